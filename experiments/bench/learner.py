"""`python -m experiments.bench learner`: training tokens/s of TorchLearner.train_step against a
bare loop (the same model, batch and AdamW; plain forward + backward + step) in the same run.

The two steps alternate, so load from other processes hits both alike; the figure is the ratio
of median tokens/s (goal >= 0.9).
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from agent.policy.models import load_model
from learner.samples import Sample
from learner.torch_learner import TorchLearner


def make_batch(vocab: int, n: int, prompt_len: int, response_len: int, seed: int) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        ids = torch.randint(0, vocab, (prompt_len + response_len,), generator=g).tolist()
        adv = 1.0 if i % 2 == 0 else -1.0
        out.append(Sample(ids[:prompt_len], ids[prompt_len:], [0.0] * response_len, [adv] * response_len, [1] * response_len))
    return out


class BareLoop:
    """What one would write by hand: full logits, log-softmax, policy-gradient loss, AdamW."""

    def __init__(self, model_name: str, samples: list[Sample], lr: float, device: torch.device, bf16: bool) -> None:
        self.model, _ = load_model(model_name, dtype="float32")
        self.model.to(device).train()
        self.model.config.use_cache = False
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.1)
        self.ids = torch.tensor([s.prompt_ids + s.response_ids for s in samples], device=device)
        self.adv = torch.tensor([s.advantages for s in samples], device=device)
        self.prompt_len = len(samples[0].prompt_ids)
        self.device, self.bf16 = device, bf16

    def step(self) -> None:
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            logits = self.model(input_ids=self.ids).logits
        logp = torch.log_softmax(logits[:, self.prompt_len - 1 : -1].float(), -1)
        logp = logp.gather(-1, self.ids[:, self.prompt_len :].unsqueeze(-1)).squeeze(-1)
        loss = -(logp * self.adv).mean()
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def add_batch_args(ap: argparse.ArgumentParser) -> None:
    """The model, batch and timing options the learner benchmarks share."""
    ap.add_argument("--model", default="smollm2", help="tiny, smollm2 or a local HF folder")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--response-len", type=int, default=128)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--bf16", action="store_true")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main(argv: list[str]) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench learner", description=__doc__)
    add_batch_args(ap)
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)

    learner = TorchLearner(args.model, lr=1e-6, bf16=args.bf16, device=args.device,
                           max_tokens_per_micro_batch=args.samples * (args.prompt_len + args.response_len))
    vocab = int(learner.model.get_output_embeddings().weight.shape[0])
    samples = make_batch(vocab, args.samples, args.prompt_len, args.response_len, seed=0)
    bare = BareLoop(args.model, samples, 1e-6, learner.device, args.bf16)
    tokens = sum(s.n_tokens for s in samples)

    times: dict[str, list[float]] = {"learner": [], "bare": []}
    steps = {"learner": lambda: learner.train_step(samples), "bare": bare.step}
    for i in range(args.warmup + args.iters):
        for name, fn in steps.items():
            sync(learner.device)
            t0 = time.perf_counter()
            fn()
            sync(learner.device)
            if i >= args.warmup:
                times[name].append(time.perf_counter() - t0)

    tps = {k: tokens / statistics.median(v) for k, v in times.items()}
    ratio = tps["learner"] / tps["bare"]
    return {
        "model": args.model,
        "device": str(learner.device),
        "bf16": args.bf16,
        "batch": f"{args.samples}x{args.prompt_len + args.response_len}",
        "iters": args.iters,
        "learner_tokens_per_s": round(tps["learner"], 1),
        "bare_tokens_per_s": round(tps["bare"], 1),
        "ratio": round(ratio, 3),
        "goal": 0.9,
        "meets_goal": ratio >= 0.9,
    }
