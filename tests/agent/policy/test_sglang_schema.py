"""Our SGLang client's requests, judged by SGLang's own schemas (sglang 0.5.23's package, see
tests/sglang_schema.py): every body SGLangClient sent to a real embedded server, and every
answer it read back, is checked by SGLang's request objects, validation and JSON contract."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import httpx

from agent.policy.base import SamplingParams
from agent.policy.engine import Engine
from agent.policy.models import save_model
from agent.policy.server import serve
from agent.policy.sglang_client import SGLangClient
from tests.cli import REPO

TOP_K_ALL = 1 << 30  # SGLang's "whole vocabulary" (sampling_params.TOP_K_ALL)


def sglang_verdicts(items: list[dict], vocab_size: int) -> list[dict]:
    p = subprocess.run([sys.executable, "-m", "tests.sglang_schema"], cwd=REPO, capture_output=True, text=True,
                       input=json.dumps({"vocab_size": vocab_size, "items": items}), timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


async def exchanges(engine: Engine, url: str, key: str, weights: str) -> list[tuple[str, str, dict | None, object]]:
    """(method, path, request body, answer) of every call SGLangClient makes, over real HTTP."""
    seen: list[tuple[str, str, dict | None, object]] = []

    async def record(resp: httpx.Response) -> None:
        await resp.aread()
        req = resp.request
        seen.append((req.method, req.url.path, json.loads(req.content) if req.content else None, resp.json()))

    prompt = engine.tokenizer("check the schema")["input_ids"]
    eos = engine.tokenizer.eos_token_id
    async with SGLangClient(url, api_key=key) as client:
        client._http.event_hooks["response"].append(record)
        assert await client.health()
        await client.generate(prompt, SamplingParams(max_new_tokens=5))
        await client.generate(prompt, SamplingParams(max_new_tokens=5, temperature=0.7, top_p=0.9, top_k=20,
                                                     stop_token_ids=[eos], seed=11))
        await client.generate(prompt, SamplingParams(max_new_tokens=3, temperature=0.0))
        await client.score(prompt, 1)
        await client.score(prompt, len(prompt))
        await client.update_weights(weights, 1)
        await client.update_weights(weights)  # no version given: the client asks /model_info
    return seen


def test_client_requests_and_answers_pass_sglang_schemas(tmp_path):
    engine = Engine("tiny", dtype="float32", seed=0)
    save_model(engine.model, engine.tokenizer, tmp_path / "w")
    handle = serve(engine, weights_dirs=[tmp_path])
    try:
        seen = asyncio.run(exchanges(engine, handle.url, handle.api_key, str(tmp_path / "w")))
    finally:
        handle.stop()
        engine.close()
    assert {(m, p) for m, p, _, _ in seen} == {("GET", "/health"), ("POST", "/generate"),
                                               ("POST", "/update_weights_from_disk"), ("GET", "/model_info")}
    kinds = {"/generate": ("generate_request", "generate_response"),
             "/update_weights_from_disk": ("update_weights_request", "update_weights_response"),
             "/model_info": (None, "model_info_response"), "/health": (None, None)}
    items, where = [], []
    for i, (_, path, body, answer) in enumerate(seen):
        for kind, value in zip(kinds[path], (body, answer)):
            if kind is not None:
                items.append({"kind": kind, "body": value})
                where.append((i, kind))
    vocab = engine.vocab_size
    verdicts = sglang_verdicts(items, vocab)
    bad = [(where[k], items[k]["body"], v["error"]) for k, v in enumerate(verdicts) if v["error"]]
    assert not bad, bad
    got = {w: v["normalized"] for w, v in zip(where, verdicts)}

    gen = [got[(i, "generate_request")] for i, s in enumerate(seen) if s[1] == "/generate"]
    plain, tuned, greedy, score_1, score_end = gen
    prompt_len = plain["input_len"]
    for g in (plain, tuned, greedy):  # output log-probs only, one sequence
        assert g["is_single"] and g["return_logprob"] and g["logprob_start_len"] == -1
    assert plain["sampling"] == {"max_new_tokens": 5, "temperature": 1.0, "top_p": 1.0, "top_k": TOP_K_ALL,
                                 "sampling_seed": None, "ignore_eos": False, "stop_token_ids": []}
    assert tuned["sampling"] == {"max_new_tokens": 5, "temperature": 0.7, "top_p": 0.9, "top_k": 20, "sampling_seed": 11,
                                 "ignore_eos": False, "stop_token_ids": [engine.tokenizer.eos_token_id]}
    assert greedy["sampling"]["top_k"] == 1  # SGLang's greedy: temperature 0 becomes top_k 1
    for s, start in ((score_1, 1), (score_end, prompt_len)):  # prefill only, input log-probs from start-1
        assert s["sampling"]["max_new_tokens"] == 0 and s["return_logprob"]
        # the scheduler refuses logprob_start_len > len(input_ids) (scheduler.py, handle_generate_request)
        assert s["logprob_start_len"] == start - 1 <= s["input_len"]
    for i, (_, path, body, answer) in enumerate(seen):
        if path == "/generate" and body["sampling_params"]["max_new_tokens"] == 0:
            meta = got[(i, "generate_response")]["meta_info"]
            entries = meta["input_token_logprobs"]
            assert entries[0]["logprob"] is None and len(entries) == prompt_len - body["logprob_start_len"]

    updates = [got[(i, "update_weights_request")] for i, s in enumerate(seen) if s[1] == "/update_weights_from_disk"]
    assert updates == [{"model_path": str(tmp_path / "w"), "weight_version": "1", "flush_cache": True,
                        "abort_all_requests": False},
                       {"model_path": str(tmp_path / "w"), "weight_version": None, "flush_cache": True,
                        "abort_all_requests": False}]
    assert [got[(i, "model_info_response")] for i, s in enumerate(seen) if s[1] == "/model_info"] == [
        {"weight_version": "2"}]


REFUSED = [  # (kind, body, part of SGLang's error)
    ("generate_request", {"input_ids": [1, 2], "return_logprobs": True}, "unexpected keyword argument 'return_logprobs'"),
    ("generate_request", {"input_ids": [1, 2], "sampling_params": {"seed": 1}}, "unknown field `seed`"),
    ("generate_request", {"input_ids": [1, 2], "sampling_params": {"top_p": 0.0}}, "top_p must be in (0, 1]"),
    ("generate_request", {"input_ids": [1, 2], "sampling_params": {"top_k": 0}}, "top_k must be -1"),
    ("generate_request", {"input_ids": [1, 2], "return_logprob": "yes"}, "invalid type"),
    ("generate_request", {"sampling_params": {}}, "Either text, input_ids or input_embeds"),
    ("update_weights_request", {"model_path": "/w", "weight_version": 3}, "valid string"),
    ("update_weights_request", {"model_path": "/w", "version": "3"}, "Unexpected keyword argument 'version'"),
    ("update_weights_response", {"success": True, "message": "", "weight_version": "1"}, "'weight_version'"),
    ("generate_response", {"text": "", "meta_info": {"id": "x", "logprobs": []}}, "never sends: ['logprobs']"),
]


def test_sglang_schemas_refuse_what_sglang_refuses():
    """The check is SGLang's and strict: an unknown key or a bad value fails it."""
    verdicts = sglang_verdicts([{"kind": k, "body": b} for k, b, _ in REFUSED], vocab_size=256)
    for (kind, body, error), verdict in zip(REFUSED, verdicts):
        assert verdict["error"] is not None and error in verdict["error"], (kind, body, verdict)
