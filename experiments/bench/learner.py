"""`python -m experiments.bench learner`: training tokens/s of TorchLearner.train_step against a
bare loop (the same model, batch and AdamW; plain forward + backward + step) in the same run,
both at the default precision (`--precision auto`: bf16 where the CPU has bf16 units), the
learner in bf16 against the learner in float32, AdamW's moments in bfloat16 against float32
(`learner.optimizer_state_dtype`), and a batch in which three groups of four are flat (their
advantages all 0, as on hard tasks) stepped as train_step does (flat samples not forwarded)
against every sample forwarded.

The steps alternate, so load from other processes hits all alike; the figures are ratios of
median tokens/s (goal: learner >= 0.9x the bare loop). Achieved TFLOP/s (6 x non-embedding
parameters x tokens per second, the usual estimate without attention and the LM head) is printed
next to an estimate of the CPU's peak at that precision.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from agent.policy.models import cpu_flags, load_model, resolve_dtype
from learner.samples import Sample
from learner.torch_learner import TorchLearner


def make_batch(vocab: int, n: int, prompt_len: int, response_len: int, seed: int, flat_share: float = 0.0,
               flat_advantage: float = 0.0) -> list[Sample]:
    """`n` random samples with advantages +1/-1, the first `flat_share` of them `flat_advantage`."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        ids = torch.randint(0, vocab, (prompt_len + response_len,), generator=g).tolist()
        adv = flat_advantage if i < flat_share * n else 1.0 if i % 2 == 0 else -1.0
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
    ap.add_argument("--precision", default="auto", choices=["auto", "float32", "bfloat16"],
                    help="autocast precision (auto: bf16 on GPUs and CPUs with bf16 units)")


def use_bf16(precision: str, device: torch.device) -> bool:
    return resolve_dtype(precision, device.type) == torch.bfloat16


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def cpu_peak_tflops(bf16: bool) -> float | None:
    """A peak estimate for this CPU from its flags, threads and clock: FLOPs per cycle per core
    (AMX-BF16 2048, AVX512-BF16 128 for bf16; AVX-512 64, AVX2/FMA 32 for fp32) x threads x GHz."""
    flags = cpu_flags()
    try:
        mhz = max(float(line.partition(":")[2]) for line in open("/proc/cpuinfo") if line.startswith("cpu MHz"))
    except (OSError, ValueError):
        return None
    if bf16:
        per_cycle = 2048 if "amx_bf16" in flags else 128 if "avx512_bf16" in flags else 32  # else: emulated via fp32
    else:
        per_cycle = 64 if "avx512f" in flags else 32 if "fma" in flags else 8
    return per_cycle * torch.get_num_threads() * mhz * 1e6 / 1e12


def main(argv: list[str]) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench learner", description=__doc__)
    add_batch_args(ap)
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    bf16 = use_bf16(args.precision, device)
    budget = args.samples * (args.prompt_len + args.response_len)
    learner = TorchLearner(args.model, lr=1e-6, bf16=bf16, device=str(device), max_tokens_per_micro_batch=budget)
    other = TorchLearner(args.model, lr=1e-6, bf16=not bf16, device=str(device), max_tokens_per_micro_batch=budget)
    narrow = TorchLearner(args.model, lr=1e-6, bf16=bf16, device=str(device), max_tokens_per_micro_batch=budget,
                          optimizer_state_dtype="bfloat16")
    vocab = int(learner.model.get_output_embeddings().weight.shape[0])
    samples = make_batch(vocab, args.samples, args.prompt_len, args.response_len, seed=0)
    flat = make_batch(vocab, args.samples, args.prompt_len, args.response_len, seed=1, flat_share=0.75)
    # the same batch with the flat samples' advantages a hair above 0: train_step forwards them
    # all, as it did for flat ones before (the update differs by 1e-9 of theirs)
    flat_forwarded = make_batch(vocab, args.samples, args.prompt_len, args.response_len, seed=1, flat_share=0.75,
                                flat_advantage=1e-9)
    bare = BareLoop(args.model, samples, 1e-6, learner.device, bf16)
    tokens = sum(s.n_tokens for s in samples)
    non_embedding = sum(p.numel() for n, p in learner.model.named_parameters() if "embed" not in n and "lm_head" not in n)

    steps = {"learner": lambda: learner.train_step(samples), "bare": bare.step, "other": lambda: other.train_step(samples),
             "narrow": lambda: narrow.train_step(samples), "flat": lambda: learner.train_step(flat),
             "flat_forwarded": lambda: learner.train_step(flat_forwarded)}
    times: dict[str, list[float]] = {k: [] for k in steps}
    for i in range(args.warmup + args.iters):
        for name, fn in steps.items():
            sync(device)
            t0 = time.perf_counter()
            fn()
            sync(device)
            if i >= args.warmup:
                times[name].append(time.perf_counter() - t0)

    tps = {k: tokens / statistics.median(v) for k, v in times.items()}
    ratio = tps["learner"] / tps["bare"]
    bf16_tps, fp32_tps = (tps["learner"], tps["other"]) if bf16 else (tps["other"], tps["learner"])
    peak = cpu_peak_tflops(bf16) if device.type == "cpu" else None
    return {
        "model": args.model,
        "device": str(device),
        "precision": "bfloat16" if bf16 else "float32",
        "cpu_bf16_units": sorted(cpu_flags() & {"amx_bf16", "avx512_bf16"}) if device.type == "cpu" else None,
        "batch": f"{args.samples}x{args.prompt_len + args.response_len}",
        "iters": args.iters,
        "learner_tokens_per_s": round(tps["learner"], 1),
        "bare_tokens_per_s": round(tps["bare"], 1),
        "ratio": round(ratio, 3),
        "goal": 0.9,
        "meets_goal": ratio >= 0.9,
        "bf16_vs_fp32_learner": round(bf16_tps / fp32_tps, 3),
        "bf16_moments_vs_fp32_moments": round(tps["narrow"] / tps["learner"], 3),
        "flat_75pct_step_speedup": round(statistics.median(times["flat_forwarded"]) / statistics.median(times["flat"]), 3),
        "learner_tflops": round(6 * non_embedding * tps["learner"] / 1e12, 4),
        "cpu_peak_tflops_estimate": None if peak is None else round(peak, 3),
    }
