"""`python -m experiments.bench memory`: a job's peak resident memory against the sum of what it
must hold, side by side in one run.

Cases (`--case quickstart|terminal|all`, default all), each an `experiments.run` process of its own:
  quickstart  the Quickstart job (`+experiment=quickstart`), phases as it runs them
  terminal    one outcome step of 128 concurrent terminal episodes (bwrap) with the tiny model
The parts a job must hold (its own sizes, read from the job's config.yaml):
  runtime      RSS of a fresh interpreter that imported the run's modules (measured in this run)
  learner      float32 parameters and gradients + AdamW's two moments (float32, or bfloat16 where
               learner.optimizer_state_dtype says so)
  engine       the serving copy of the weights in the engine's dtype; none where the engine serves
               the learner's own tensors (policy=local, learner=torch, a float32 engine)
  kv_budget    the engine's prefix-cache budget (policy.prefix_cache_mb; auto: the engine's weights)
Printed per case: the job's peak RSS (the kernel's high-water mark, from its last metrics row) and
each phase's, the parts, and ratio = peak / sum of parts (goal <= 1.5); bench.json also keeps the
job's held-out pass@1 by update (heldout_pass1). Other arguments go to
every job (e.g. `model=tiny steps=1` for a quick check).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from agent.policy.models import load_model, resolve_dtype
from experiments.factories import prefix_cache_mb

GOAL = 1.5
CASES: dict[str, list[str]] = {
    "quickstart": ["+experiment=quickstart"],
    "terminal": ["env=terminal", "model=tiny", "sandbox=bwrap", "mode=outcome", "steps=1", "n_envs=128",
                 "tasks_per_step=128", "group_size=1", "eval.n_tasks=0", "sampling.max_new_tokens=32"],
}
COMMON = ["wandb.mode=disabled", "progress=false"]
# What a run process imports before it builds anything: the runtime every job pays for.
RUNTIME_PROBE = ("import experiments.run, experiments.factories, agent.policy.engine, learner.torch_learner;"
                 "from agent.host_memory import rss_bytes; print(rss_bytes())")


def runtime_bytes(timeout_s: float = 300.0) -> int:
    p = subprocess.run([sys.executable, "-c", RUNTIME_PROBE], capture_output=True, text=True, timeout=timeout_s)
    if p.returncode != 0:
        raise RuntimeError(f"the runtime probe failed: {(p.stderr or p.stdout).strip().splitlines()[-1:]}")
    return int(p.stdout.strip().splitlines()[-1])


def parts(config: dict[str, Any], runtime: int) -> dict[str, int]:
    """The bytes a job with this resolved config must hold (see the module docstring)."""
    model, _ = load_model(str(config["model"]["path"]), dtype="float32", seed=int(config.get("seed", 0)))
    n = sum(p.numel() for p in model.parameters())
    del model
    served = n * torch.finfo(resolve_dtype(str(config["model"].get("dtype", "auto")))).bits // 8
    shared = (config.get("policy", {}).get("name") == "local" and config.get("learner", {}).get("name") == "torch"
              and served == 4 * n)  # the engine serves the learner's float32 tensors (learner/training.py)
    budget = prefix_cache_mb(config.get("policy", {}).get("prefix_cache_mb", 0))
    moments = 2 if config.get("learner", {}).get("optimizer_state_dtype") == "bfloat16" else 4  # bytes each
    return {"runtime": runtime, "learner": n * (4 + 4 + 2 * moments), "engine": 0 if shared else served,
            "kv_budget": served if budget is None else int(budget * 2**20)}


def run_case(name: str, extra: list[str], runtime: int, timeout_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"bench-memory-{name}-") as tmp:
        run_dir = Path(tmp) / "run"
        t0 = time.perf_counter()
        try:  # the job stops itself on SIGTERM (the timeout's), sandboxes and engine included
            p = subprocess.run([sys.executable, "-m", "experiments.run", *CASES[name], *COMMON, *extra,
                                f"run_dir={run_dir}"], capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise SystemExit(f"bench memory: the {name} job ran past --timeout {timeout_s:.0f} s") from None
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
            raise SystemExit(f"bench memory: the {name} job failed (rc {p.returncode}): {' | '.join(tail)}")
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        memories = [r["memory"] for r in rows if "memory" in r]
        if not memories:
            raise SystemExit(f"bench memory: the {name} job's metrics carry no memory figures")
        memory = memories[-1]
        # what the job learned beside what it held: a leaner job must still learn
        heldout = {str(r["step"]): round(r["heldout/pass@1"], 3) for r in rows if "heldout/pass@1" in r}
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
    sizes = parts(config, runtime)
    peak = int(memory["peak_rss_gb"] * 1e9)
    return {
        "wall_s": round(wall, 1),
        "peak_gb": round(peak / 1e9, 3),
        "phase_peak_gb": {k: round(v, 3) for k, v in memory.get("phase_peak_gb", {}).items()},
        "parts_gb": {k: round(v / 1e9, 3) for k, v in sizes.items()},
        "parts_sum_gb": round(sum(sizes.values()) / 1e9, 3),
        "ratio": round(peak / sum(sizes.values()), 3),
        "goal": GOAL,
        "heldout_pass1": heldout,
    }


def main(argv: list[str]) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench memory", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=[*CASES, "all"], default="all")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per job")
    args, extra = ap.parse_known_args(argv)
    runtime = runtime_bytes()
    names = list(CASES) if args.case == "all" else [args.case]
    out: dict[str, Any] = {"overrides": extra, "runtime_gb": round(runtime / 1e9, 3)}
    for name in names:
        out[name] = run_case(name, extra, runtime, args.timeout)
        print(f"{name}: peak {out[name]['peak_gb']} GB = {out[name]['ratio']}x the parts "
              f"({out[name]['parts_gb']}; goal <= {GOAL}x)", flush=True)
    return out
