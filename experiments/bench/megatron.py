"""`python -m experiments.bench megatron`: training tokens/s of the megatron-core learner against
the torch learner, same model, batch and settings, in the same run (world size 1: one process,
the whole model; a GPU when there is one).

The two steps alternate, so load from other processes hits both alike; the figure is the ratio
of median tokens/s, megatron over torch.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from experiments.bench.learner import add_batch_args, make_batch, sync, use_bf16
from learner.megatron_learner import MegatronLearner
from learner.torch_learner import TorchLearner


def main(argv: list[str]) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench megatron", description=__doc__)
    add_batch_args(ap)
    args = ap.parse_args(argv)

    opts = dict(lr=1e-6, bf16=use_bf16(args.precision, torch.device("cuda" if torch.cuda.is_available() else "cpu")), max_tokens_per_micro_batch=args.samples * (args.prompt_len + args.response_len))
    learners = {"torch": TorchLearner(args.model, **opts), "megatron": MegatronLearner(args.model, **opts)}
    device = learners["torch"].device
    samples = make_batch(learners["megatron"].shape.vocab, args.samples, args.prompt_len, args.response_len, seed=0)
    tokens = sum(s.n_tokens for s in samples)

    times: dict[str, list[float]] = {name: [] for name in learners}
    for i in range(args.warmup + args.iters):
        for name, learner in learners.items():
            sync(device)
            t0 = time.perf_counter()
            learner.train_step(samples)
            sync(device)
            if i >= args.warmup:
                times[name].append(time.perf_counter() - t0)

    tps = {k: tokens / statistics.median(v) for k, v in times.items()}
    return {
        "model": args.model,
        "device": str(device),
        "bf16": opts["bf16"],
        "batch": f"{args.samples}x{args.prompt_len + args.response_len}",
        "iters": args.iters,
        "megatron_tokens_per_s": round(tps["megatron"], 1),
        "torch_tokens_per_s": round(tps["torch"], 1),
        "ratio": round(tps["megatron"] / tps["torch"], 3),
    }
