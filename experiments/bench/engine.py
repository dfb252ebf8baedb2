"""Engine throughput: new tokens/s of the embedded engine over HTTP at 1 and N concurrent
requests, against transformers' own batched `generate` on the same prompts, same model object,
same run. Every side generates exactly max_new_tokens per prompt (ignore_eos / min_new_tokens).

Goals: engine at N concurrent >= 0.9x batched generate, and >= 3x its own sequential.
`python -m experiments.bench engine [--model tiny] [--concurrency 8] [--max-new-tokens 64]`

`--case multiturn`: N concurrent episodes of --turns turns over a ~--prompt-tokens chat prompt
(a shared system prompt, one user question each); every turn appends the sampled reply and a
short tool message as token deltas, as the runner does. Turns/s of the engine with prefix reuse
against one without (goal >= 2x), and tok/s against HF `generate` run turn by turn on the same
batch of episodes. Seeds per (episode, turn) make both engines sample the same conversations.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import torch

from agent.chat import ChatRenderer
from agent.policy.engine import Engine
from agent.policy.server import serve
from agent.policy.sglang_client import SGLangClient

QUESTIONS = [
    "What is the capital of France?", "Write a haiku about the sea.", "Explain recursion to a child.",
    "List three prime numbers above 50.", "How do plants make food?", "Give me a tip for learning Python.",
    "Why is the sky blue?", "Describe a cat in two sentences.", "What does a compiler do?",
    "Name a famous painting and its painter.", "How many legs does a spider have?", "What is 17 times 3?",
]


def main(argv: list[str]) -> dict:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench engine")
    ap.add_argument("--model", default="smollm2", help="smollm2 (default) or tiny")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="figures are medians over this many rounds")
    ap.add_argument("--case", choices=("single", "multiturn"), default="single")
    ap.add_argument("--turns", type=int, default=8, help="multiturn: turns per episode")
    ap.add_argument("--prompt-tokens", type=int, default=400, help="multiturn: first prompt length, about")
    args = ap.parse_args(argv)
    if args.case == "multiturn":
        return _multiturn(args)
    n, new = args.concurrency, args.max_new_tokens

    engine = Engine(args.model, dtype=args.dtype, max_batch=max(n, 1), seed=0)
    dtype = str(engine.model.dtype).removeprefix("torch.")  # a closed engine has no model
    handle = serve(engine)
    try:
        tok = engine.tokenizer
        prompts = [list(tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                                return_dict=True)["input_ids"]) for q in (QUESTIONS * n)[:n]]
        hf = lambda batch: _hf_generate(engine, batch, new)  # noqa: E731
        eng = lambda batch: asyncio.run(_engine_generate(handle.url, handle.api_key, batch, new))  # noqa: E731
        eng(prompts[:1]), hf(prompts[:1])  # warm-up: first calls pay one-off allocation costs
        seq_prompts = prompts[: max(2, n // 4)]
        rounds = []  # one round times all four side by side, so a noisy neighbour hits each alike
        for _ in range(args.rounds):
            rounds.append({
                "hf_generate_batched_tok_s": _rate(lambda: hf(prompts)),
                "engine_concurrent_tok_s": _rate(lambda: eng(prompts)),
                "engine_sequential_tok_s": _rate(lambda: _sequential(eng, seq_prompts)),
                "hf_generate_sequential_tok_s": _rate(lambda: _sequential(hf, seq_prompts)),
            })
    finally:
        handle.stop()
        engine.close()

    def ratio(a: str, b: str) -> float:  # median over rounds of the within-round ratio
        return round(statistics.median(r[a] / r[b] for r in rounds), 3)

    return {
        "model": args.model, "dtype": dtype, "concurrency": n,
        "max_new_tokens": new, "rounds": args.rounds, "torch_threads": torch.get_num_threads(),
        "load_avg_1m": round(os.getloadavg()[0], 1),
        **{k: round(statistics.median(r[k] for r in rounds), 1) for k in rounds[0]},
        "engine_vs_hf_batched": ratio("engine_concurrent_tok_s", "hf_generate_batched_tok_s"),
        "engine_concurrent_vs_sequential": ratio("engine_concurrent_tok_s", "engine_sequential_tok_s"),
        "engine_vs_hf_sequential": ratio("engine_sequential_tok_s", "hf_generate_sequential_tok_s"),
    }


def _multiturn(args: argparse.Namespace) -> dict:
    n, new, turns = args.concurrency, args.max_new_tokens, args.turns
    reuse = Engine(args.model, dtype=args.dtype, max_batch=max(n, 1), seed=0)
    plain = Engine(args.model, dtype=args.dtype, max_batch=max(n, 1), seed=0, prefix_cache_mb=0)
    dtype = str(reuse.model.dtype).removeprefix("torch.")  # a closed engine has no model
    servers = [serve(reuse), serve(plain)]
    try:
        chat = ChatRenderer(reuse.tokenizer)
        prompts = _episode_prompts(chat, n, args.prompt_tokens)
        eng = lambda h: asyncio.run(_engine_episodes(h.url, h.api_key, chat, prompts, turns, new))  # noqa: E731
        hf = lambda: _hf_episodes(reuse, chat, prompts, turns, new)  # noqa: E731
        for h in servers:  # warm-up: one-off allocation costs
            asyncio.run(_engine_episodes(h.url, h.api_key, chat, prompts[:1], 1, 2))
        _hf_sample(reuse, prompts[:1], 2)
        rounds, same = [], True  # seconds per side, round by round; same: both engines sampled alike
        for _ in range(args.rounds):
            r: dict[str, float] = {}
            convs = {}
            for key, run in (("reuse", lambda: eng(servers[0])), ("no_reuse", lambda: eng(servers[1])),
                             ("hf_generate", hf)):
                t0 = time.perf_counter()
                convs[key] = run()
                r[key] = time.perf_counter() - t0
            same = same and convs["reuse"] == convs["no_reuse"]
            rounds.append(r)
        stats = reuse.prefix_cache_stats()
    finally:
        for h in servers:
            h.stop()
        reuse.close()
        plain.close()

    def median(key: str, per: int) -> float:
        return round(statistics.median(per / r[key] for r in rounds), 2)

    def ratio(a: str, b: str) -> float:  # median over rounds of the within-round speed ratio
        return round(statistics.median(r[b] / r[a] for r in rounds), 3)

    return {
        "case": "multiturn", "model": args.model, "dtype": dtype,
        "concurrency": n, "turns": turns, "first_prompt_tokens": statistics.median(map(len, prompts)),
        "max_new_tokens": new, "rounds": args.rounds, "torch_threads": torch.get_num_threads(),
        "load_avg_1m": round(os.getloadavg()[0], 1),
        "reuse_turns_s": median("reuse", n * turns), "no_reuse_turns_s": median("no_reuse", n * turns),
        "reuse_tok_s": median("reuse", n * turns * new), "no_reuse_tok_s": median("no_reuse", n * turns * new),
        "hf_generate_tok_s": median("hf_generate", n * turns * new),
        "reuse_vs_no_reuse": ratio("reuse", "no_reuse"), "reuse_vs_hf_generate": ratio("reuse", "hf_generate"),
        "no_reuse_vs_hf_generate": ratio("no_reuse", "hf_generate"), "same_conversations": same,
        "prefix_cache": {k: stats[k] for k in ("hits", "tokens_reused", "tokens_prefilled", "bytes_used")},
    }


def _episode_prompts(chat: ChatRenderer, n: int, tokens: int) -> list[list[int]]:
    """One first prompt per episode: a shared system prompt grown to about `tokens`, a question each."""
    rule = "Work step by step, call one tool at a time, read its output carefully and never guess a file's contents. "
    system = "You are a coding agent in a sandboxed repository."
    while len(chat.render_prompt([{"role": "system", "content": system + rule}])) < tokens:
        system += rule
    return [chat.render_prompt([{"role": "system", "content": system}, {"role": "user", "content": q}])
            for q in (QUESTIONS * n)[:n]]


def _tool_delta(chat: ChatRenderer, turn: int, reply: list[int]) -> list[int]:
    return chat.observation_delta({"role": "tool", "content": f"exit code 0; {turn + 1} files changed"}, reply)


async def _engine_episodes(url: str, key: str, chat: ChatRenderer, prompts: list[list[int]], turns: int,
                           new: int) -> list[list[int]]:
    async def episode(i: int, ids: list[int]) -> list[int]:
        for t in range(turns):
            out = await client.request("POST", "/generate", {
                "input_ids": ids, "return_logprob": True, "sampling_params": {
                    "max_new_tokens": new, "temperature": 1.0, "ignore_eos": True, "sampling_seed": 1000 * i + t}})
            ids = ids + out["output_ids"] + _tool_delta(chat, t, out["output_ids"])
        return ids

    async with SGLangClient(url, timeout=600, api_key=key) as client:
        return list(await asyncio.gather(*[episode(i, p) for i, p in enumerate(prompts)]))


def _hf_episodes(engine: Engine, chat: ChatRenderer, prompts: list[list[int]], turns: int, new: int) -> list[list[int]]:
    """The same episodes in lockstep, each turn one batched `generate` over the whole context (its
    samples differ from the engine's: other random streams)."""
    for t in range(turns):
        prompts = [p + r + _tool_delta(chat, t, r) for p, r in zip(prompts, _hf_sample(engine, prompts, new))]
    return prompts


def _rate(run) -> float:
    t0 = time.perf_counter()
    tokens = run()
    return tokens / (time.perf_counter() - t0)


def _sequential(run, prompts: list[list[int]]) -> int:
    return sum(run([p]) for p in prompts)


def _hf_generate(engine: Engine, prompts: list[list[int]], new: int) -> int:
    return len(_hf_sample(engine, prompts, new)) * new


def _hf_sample(engine: Engine, prompts: list[list[int]], new: int) -> list[list[int]]:
    """transformers' generate on a left-padded batch, sampling at temperature 1 like the engine."""
    width = max(map(len, prompts))
    pad = engine.tokenizer.pad_token_id if engine.tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.inference_mode():
        out = engine.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                                    do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=pad)
    assert out.shape[1] - width == new
    return out[:, width:].tolist()


async def _engine_generate(url: str, key: str, prompts: list[list[int]], new: int) -> int:
    async with SGLangClient(url, timeout=600, api_key=key) as client:
        outs = await asyncio.gather(*[client.request("POST", "/generate", {
            "input_ids": p, "return_logprob": True,
            "sampling_params": {"max_new_tokens": new, "temperature": 1.0, "ignore_eos": True}}) for p in prompts])
    tokens = [o["meta_info"]["completion_tokens"] for o in outs]
    assert tokens == [new] * len(prompts), tokens
    return sum(tokens)
