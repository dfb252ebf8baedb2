"""Engine throughput: new tokens/s of the embedded engine over HTTP at 1 and N concurrent
requests, against transformers' own batched `generate` on the same prompts, same model object,
same run. Every side generates exactly max_new_tokens per prompt (ignore_eos / min_new_tokens).

Goals (issue 2): engine at N concurrent >= 0.9x batched generate, and >= 3x its own sequential.
`python -m experiments.bench engine [--model tiny] [--concurrency 8] [--max-new-tokens 64]`
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import torch

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
    args = ap.parse_args(argv)
    n, new = args.concurrency, args.max_new_tokens

    engine = Engine(args.model, dtype=args.dtype, max_batch=max(n, 1), seed=0)
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
        "model": args.model, "dtype": str(engine.model.dtype).removeprefix("torch."), "concurrency": n,
        "max_new_tokens": new, "rounds": args.rounds, "torch_threads": torch.get_num_threads(),
        "load_avg_1m": round(os.getloadavg()[0], 1),
        **{k: round(statistics.median(r[k] for r in rounds), 1) for k in rounds[0]},
        "engine_vs_hf_batched": ratio("engine_concurrent_tok_s", "hf_generate_batched_tok_s"),
        "engine_concurrent_vs_sequential": ratio("engine_concurrent_tok_s", "engine_sequential_tok_s"),
        "engine_vs_hf_sequential": ratio("engine_sequential_tok_s", "hf_generate_sequential_tok_s"),
    }


def _rate(run) -> float:
    t0 = time.perf_counter()
    tokens = run()
    return tokens / (time.perf_counter() - t0)


def _sequential(run, prompts: list[list[int]]) -> int:
    return sum(run([p]) for p in prompts)


def _hf_generate(engine: Engine, prompts: list[list[int]], new: int) -> int:
    """transformers' generate on a left-padded batch, sampling at temperature 1 like the engine."""
    width = max(map(len, prompts))
    pad = engine.tokenizer.pad_token_id if engine.tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.inference_mode():
        out = engine.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                                    do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=pad)
    assert out.shape[1] - width == new
    return len(prompts) * new


async def _engine_generate(url: str, key: str, prompts: list[list[int]], new: int) -> int:
    async with SGLangClient(url, timeout=600, api_key=key) as client:
        outs = await asyncio.gather(*[client.request("POST", "/generate", {
            "input_ids": p, "return_logprob": True,
            "sampling_params": {"max_new_tokens": new, "temperature": 1.0, "ignore_eos": True}}) for p in prompts])
    tokens = [o["meta_info"]["completion_tokens"] for o in outs]
    assert tokens == [new] * len(prompts), tokens
    return sum(tokens)
