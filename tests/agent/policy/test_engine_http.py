"""The SGLang-compatible server over real HTTP on 127.0.0.1, driven by SGLangClient, ChatClient
and raw httpx: SGLang's /generate body and answer format, scoring, weight updates under load,
OpenAI chat completions, 400s for bad bodies."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import torch

from agent.policy.base import PolicyClient, SamplingParams
from agent.policy.chat_client import ChatClient
from agent.policy.engine import Engine
from agent.policy.jsonhttp import ServerError
from agent.policy.models import load_model, save_model, tiny_model
from agent.policy.server import serve
from agent.policy.sglang_client import SGLangClient
from tests.agent.policy.test_sglang_policy import free_port

TOL = 1e-4  # fp32 CPU, see tests/agent/policy/test_engine.py
KEY = "engine-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def weights_root(tmp_path_factory):
    return tmp_path_factory.mktemp("run")


@pytest.fixture(scope="module")
def server(weights_root):
    engine = Engine("tiny", dtype="float32", seed=0, max_batch=8)
    handle = serve(engine, api_key=KEY, weights_dirs=[weights_root])
    yield engine, handle.url
    handle.stop()
    engine.close()


def post(url: str, path: str, body, key: str | None = KEY) -> httpx.Response:
    """POST `body` as JSON (NaN and infinities written as Python writes them: a client may send them)."""
    headers = {"content-type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    return httpx.post(url + path, content=json.dumps(body), timeout=60, headers=headers)


def teacher_forced(model, ids: list[int], start: int) -> list[float]:
    with torch.inference_mode():
        lps = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
    return [float(lps[j - 1, ids[j]]) for j in range(start, len(ids))]


def test_generate_answers_in_sglang_format(server):
    engine, url = server
    prompt = engine.tokenizer("hello")["input_ids"]
    resp = post(url, "/generate", {"input_ids": prompt, "return_logprob": True, "logprob_start_len": 1,
                                   "sampling_params": {"max_new_tokens": 6, "temperature": 0.7, "top_p": 0.9,
                                                       "top_k": 20, "sampling_seed": 4}})
    assert resp.status_code == 200
    body = resp.json()
    meta = body["meta_info"]
    assert set(body) == {"text", "output_ids", "meta_info"}
    assert {"id", "finish_reason", "prompt_tokens", "completion_tokens", "output_token_logprobs",
            "input_token_logprobs", "weight_version"} <= set(meta)
    out = body["output_ids"]
    assert meta["prompt_tokens"] == len(prompt) and meta["completion_tokens"] == len(out)
    assert meta["finish_reason"] in ({"type": "length", "length": 6}, {"type": "stop", "matched": out[-1]})
    assert [e[1] for e in meta["output_token_logprobs"]] == out and all(e[2] is None for e in meta["output_token_logprobs"])
    # input log-probs cover input_ids[1:], first entry None (as SGLang does)
    assert [e[1] for e in meta["input_token_logprobs"]] == prompt[1:] and meta["input_token_logprobs"][0][0] is None
    full = prompt + out
    ref = teacher_forced(engine.model, full, 2)
    got = [e[0] for e in meta["input_token_logprobs"][1:]] + [e[0] for e in meta["output_token_logprobs"]]
    assert max(abs(a - b) for a, b in zip(got, ref)) < TOL
    assert body["text"] == engine.decode(out)


def test_text_input_and_prefill_only_scoring(server):
    engine, url = server
    body = post(url, "/generate", {"text": "score me", "sampling_params": {"max_new_tokens": 0},
                                   "return_logprob": True, "logprob_start_len": 0}).json()
    ids = engine.tokenizer("score me")["input_ids"]
    assert body["output_ids"] == [] and body["meta_info"]["finish_reason"] == {"type": "length", "length": 0}
    lps = body["meta_info"]["input_token_logprobs"]
    assert [e[1] for e in lps] == ids and lps[0][0] is None
    assert max(abs(e[0] - r) for e, r in zip(lps[1:], teacher_forced(engine.model, ids, 1))) < TOL


def test_sglang_client_generate_and_score_over_http(server):
    engine, url = server
    prompts = [engine.tokenizer("p" * (2 + 9 * i))["input_ids"] for i in range(5)]

    async def go():
        async with SGLangClient(url, timeout=60, api_key=KEY) as client:
            assert isinstance(client, PolicyClient) and await client.health()
            results = await asyncio.gather(*[client.generate(p, SamplingParams(max_new_tokens=10 + 3 * i, seed=i))
                                             for i, p in enumerate(prompts)])
            scores = await asyncio.gather(*[client.score(p + r.output_ids, len(p)) for p, r in zip(prompts, results)])
            return results, scores

    results, scores = asyncio.run(go())
    for p, r, s in zip(prompts, results, scores):
        ref = teacher_forced(engine.model, p + r.output_ids, len(p))
        assert len(r.logprobs) == len(r.output_ids) == len(s) > 0 and r.weight_version == engine.weight_version
        assert max(abs(a - b) for a, b in zip(r.logprobs, ref)) < TOL
        assert max(abs(a - b) for a, b in zip(s, ref)) < TOL


def test_bad_bodies_get_400_with_a_message(server, weights_root):
    _, url = server
    bad = [
        ({}, "exactly one"),
        ({"text": "a", "input_ids": [1]}, "exactly one"),
        ({"input_ids": [[1, 2], [3]]}, "input_ids"),
        ({"input_ids": [10**7]}, "out of range"),
        ({"input_ids": []}, "empty"),
        ({"input_ids": [1], "sampling_params": {"temperature": -1}}, "temperature"),
        ({"input_ids": [1], "sampling_params": {"temperature": float("nan")}}, "temperature"),
        ({"input_ids": [1], "sampling_params": {"top_p": float("inf")}}, "top_p"),
        ({"input_ids": [1], "sampling_params": {"stop": ["x"]}}, "stop"),
        ({"input_ids": [1], "stream": True}, "stream"),
        ({"input_ids": [1, 2], "return_logprob": True, "logprob_start_len": 5}, "logprob_start_len"),
    ]
    for body, words in bad:
        resp = post(url, "/generate", body)
        assert resp.status_code == 400, body
        assert words in resp.json()["error"]["message"], (body, resp.text)
    resp = httpx.post(url + "/generate", content=b"{not json", headers={"content-type": "application/json", **AUTH})
    assert resp.status_code == 400
    assert post(url, "/v1/chat/completions", {"messages": []}).status_code == 400
    resp = post(url, "/update_weights_from_disk", {"model_path": str(weights_root / "no-such-folder")})
    assert resp.status_code == 400 and resp.json()["success"] is False and "safetensors" in resp.json()["message"]

    async def client_error():
        async with SGLangClient(url, api_key=KEY) as client:
            with pytest.raises(ServerError, match="out of range"):
                await client.generate([10**7], SamplingParams())

    asyncio.run(client_error())


def test_unauthenticated_weight_swap_is_refused(server, weights_root, tmp_path):
    """The attack: swap the served weights for zeros through the engine's own routes. Without the
    key nothing but /health answers; with it, weights load only from the allowed folder."""
    engine, url = server
    zeros, tok = tiny_model(seed=0)
    with torch.no_grad():
        for param in zeros.parameters():
            param.zero_()
    save_model(zeros, tok, weights_root / "zeros")  # inside the allowed folder: only the key stops it
    save_model(zeros, tok, tmp_path / "zeros")      # outside it
    (weights_root / "link").symlink_to(tmp_path / "zeros")  # inside by name, outside in fact
    ids = tok("probe the weights")["input_ids"]
    before, version = teacher_forced(engine.model, ids, 1), engine.weight_version

    for key in (None, "wrong-key"):
        assert post(url, "/update_weights_from_disk", {"model_path": str(weights_root / "zeros")}, key).status_code == 401
        assert post(url, "/generate", {"input_ids": ids}, key).status_code == 401
        assert post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, key).status_code == 401
    assert httpx.get(url + "/get_model_info").status_code == 401
    assert httpx.get(url + "/health").status_code == 200  # the one open route: a supervisor's probe
    for outside in (tmp_path / "zeros", weights_root / "link", weights_root / ".." / "elsewhere"):
        resp = post(url, "/update_weights_from_disk", {"model_path": str(outside)})
        message = resp.json()["message"]
        assert resp.status_code == 403 and resp.json()["success"] is False, resp.text
        assert "allowed folders" in message and "\n" not in message
    for page in ("/docs", "/redoc", "/openapi.json"):
        assert httpx.get(url + page, headers=AUTH).status_code == 404
    assert engine.weight_version == version
    assert teacher_forced(engine.model, ids, 1) == before  # still the served weights, not zeros


def test_non_utf8_bytes_survive_json(server):
    _, url = server
    body = post(url, "/generate", {"input_ids": [0xC3], "sampling_params": {"max_new_tokens": 40, "sampling_seed": 3}}).json()
    assert isinstance(body["text"], str) and "\ufffd" in body["text"]


def test_openai_chat_completions_and_models(server):
    engine, url = server
    assert httpx.get(url + "/v1/models", headers=AUTH).json()["data"][0]["id"] == "tiny"
    info = httpx.get(url + "/get_model_info", headers=AUTH).json()
    assert info["is_generation"] and info["weight_version"] == str(engine.weight_version)

    async def go():
        async with ChatClient(url + "/v1", model="tiny", api_key=KEY) as chat:
            return await chat.complete([{"role": "user", "content": "hi"}], temperature=1.0, max_tokens=5, n=3)

    async def refused(base: str, key: str | None) -> ServerError:
        async with ChatClient(base, model="tiny", api_key=key, retries=0, timeout=10) as chat:
            with pytest.raises(ServerError) as e:
                await chat.complete([{"role": "user", "content": "hi"}], max_tokens=2)
            return e.value

    texts = asyncio.run(go())
    assert len(texts) == 3 and all(isinstance(t, str) for t in texts)
    assert asyncio.run(refused(url, "wrong-key")).status == 401  # the server's own status, not a traceback
    assert asyncio.run(refused(f"http://127.0.0.1:{free_port()}", None)).status == 0  # nothing listens there
    raw = post(url, "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                                             "max_tokens": 4}).json()
    assert raw["object"] == "chat.completion" and raw["choices"][0]["message"]["role"] == "assistant"
    assert raw["usage"]["completion_tokens"] <= 4


def test_weight_update_over_http_under_load(tmp_path):
    """Concurrent generations while /update_weights_from_disk runs: none fails, each result's
    version names the weights that sampled it."""
    models = {0: load_model("tiny", dtype="float32", seed=0)[0], 7: load_model("tiny", dtype="float32", seed=1)[0]}
    new_model, tok = load_model("tiny", dtype="float32", seed=1)
    save_model(new_model, tok, tmp_path / "ckpt")
    engine = Engine("tiny", dtype="float32", seed=0, max_batch=4)
    handle = serve(engine, weights_dirs=[tmp_path])
    prompt = tok("weights")["input_ids"]

    async def go():
        async with SGLangClient(handle.url, timeout=60, api_key=handle.api_key) as client:
            sp = SamplingParams(max_new_tokens=30)
            first = [asyncio.create_task(client.generate(prompt, sp)) for _ in range(6)]
            await asyncio.sleep(0.05)
            update = asyncio.create_task(client.update_weights(str(tmp_path / "ckpt"), weight_version=7))
            second = [asyncio.create_task(client.generate(prompt, sp)) for _ in range(6)]
            version = await update
            results = await asyncio.gather(*first, *second)
            return version, results, await client.generate(prompt, sp)

    try:
        version, results, after = asyncio.run(go())
    finally:
        handle.stop()
        engine.close()
    assert version == 7 and after.weight_version == 7
    for r in [*results, after]:
        assert r.weight_version in models
        ref = teacher_forced(models[r.weight_version], prompt + r.output_ids, len(prompt))
        assert max(abs(a - b) for a, b in zip(r.logprobs, ref)) < TOL


def test_client_retries_then_reports_unreachable_server():
    async def go():
        async with SGLangClient("http://127.0.0.1:9", timeout=2, retries=1) as client:
            assert not await client.health()
            with pytest.raises(ServerError, match="cannot reach"):
                await client.generate([1], SamplingParams(max_new_tokens=1))

    asyncio.run(go())
