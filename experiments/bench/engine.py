"""Engine throughput: new tokens/s of the embedded engine over HTTP at 1 and N concurrent
requests, against transformers' own batched `generate` on the same prompts, same model object,
same run. Every side generates exactly max_new_tokens per prompt (ignore_eos / min_new_tokens).

Goals (issue 2): engine at N concurrent >= 0.9x batched generate, and >= 3x its own sequential.
`python -m experiments.bench engine [--model tiny] [--concurrency 8] [--max-new-tokens 64]`
"""
from __future__ import annotations

import argparse
import asyncio
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
    ap.add_argument("--repeats", type=int, default=2, help="best of this many timings per figure")
    args = ap.parse_args(argv)
    n, new = args.concurrency, args.max_new_tokens

    engine = Engine(args.model, dtype=args.dtype, max_batch=max(n, 1), seed=0)
    handle = serve(engine)
    try:
        tok = engine.tokenizer
        prompts = [list(tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                                return_dict=True)["input_ids"]) for q in (QUESTIONS * n)[:n]]
        hf = lambda batch: _hf_generate(engine, batch, new)  # noqa: E731
        eng = lambda batch: asyncio.run(_engine_generate(handle.url, batch, new))  # noqa: E731
        eng(prompts[:1]), hf(prompts[:1])  # warm-up: first calls pay one-off allocation costs
        figures = {
            "hf_generate_batched_tok_s": _best(args.repeats, lambda: hf(prompts)),
            "engine_concurrent_tok_s": _best(args.repeats, lambda: eng(prompts)),
            "hf_generate_sequential_tok_s": _best(args.repeats, lambda: _sequential(hf, prompts[: max(2, n // 4)])),
            "engine_sequential_tok_s": _best(args.repeats, lambda: _sequential(eng, prompts[: max(2, n // 4)])),
        }
    finally:
        handle.stop()
        engine.close()
    return {
        "model": args.model, "dtype": str(engine.model.dtype), "concurrency": n, "max_new_tokens": new,
        "threads": torch.get_num_threads(),
        **{k: round(v, 1) for k, v in figures.items()},
        "engine_vs_hf_batched": round(figures["engine_concurrent_tok_s"] / figures["hf_generate_batched_tok_s"], 3),
        "engine_concurrent_vs_sequential": round(figures["engine_concurrent_tok_s"] / figures["engine_sequential_tok_s"], 3),
        "engine_vs_hf_sequential": round(figures["engine_sequential_tok_s"] / figures["hf_generate_sequential_tok_s"], 3),
    }


def _best(repeats: int, run) -> float:
    """Highest tokens/s over `repeats` runs (the machine is shared: the best run is the least disturbed)."""
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        tokens = run()
        best = max(best, tokens / (time.perf_counter() - t0))
    return best


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


async def _engine_generate(url: str, prompts: list[list[int]], new: int) -> int:
    async with SGLangClient(url, timeout=600) as client:
        outs = await asyncio.gather(*[client.request("POST", "/generate", {
            "input_ids": p, "return_logprob": True,
            "sampling_params": {"max_new_tokens": new, "temperature": 1.0, "ignore_eos": True}}) for p in prompts])
    tokens = [o["meta_info"]["completion_tokens"] for o in outs]
    assert tokens == [new] * len(prompts), tokens
    return sum(tokens)
