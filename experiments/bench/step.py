"""`python -m experiments.bench step`: one RL step of the Quickstart job (command 1 of the README)
under the old settings (float32 engine and learner, no KV reuse, rollout log-probs as PPO's old,
no TIS) against today's defaults, in one run, each as its own `experiments.run` process.

Both jobs skip the held-out evaluation (`eval.n_tasks=0`): the figure is the step and the model loads.
Printed: each job's wall time (model loads included), its step's rollout and train seconds, the
ratios old / new (goal >= 2x), and the new job's sampler/learner mismatch figures.
`--old-rev REV` runs the old job on the code of git revision REV (a temporary worktree of this
checkout, the same Python) instead of this code, so that speed-ups that are not settings (the
engine's decode, the learner's batching) count as well; without it both jobs run this code.
Other arguments are passed to both jobs (e.g. `model=tiny` for a quick check).
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

OLD = ["model.dtype=float32", "learner.bf16=false", "policy.prefix_cache_mb=0", "learner.old_logprobs=rollout",
       "learner.tis_cap=null"]
# eval.n_tasks=0: the held-out evaluations before and after (32 greedy episodes) would dwarf the step
COMMON = ["steps=1", "eval.n_tasks=0", "wandb.mode=disabled", "progress=false"]
# the step of the untrained model, as older revisions (which have no warm-start settings) run it:
# on this code the default env warms the shipped model up first, and its SFT is no step
NO_WARM_START = ["warm_start=none"]


def run_job(overrides: list[str], run_dir: Path, timeout_s: float, cwd: Path | None = None) -> dict[str, Any]:
    """Run one job (on the code in `cwd`, default this checkout); its wall time and the step row
    of its metrics.jsonl."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "experiments.run", *COMMON, *overrides, f"run_dir={run_dir}"],
                       capture_output=True, text=True, timeout=timeout_s, cwd=cwd)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"job {' '.join(overrides)} failed (rc {p.returncode}): {' | '.join(tail)}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in rows if not r.get("eval_only"))
    return {"wall_s": wall, "rollout_s": step["timings"]["rollout_s"], "train_s": step["timings"]["train_s"],
            "train": step.get("train") or {}}


@contextlib.contextmanager
def worktree(rev: str, path: Path):
    """A detached git worktree of this checkout at `rev`, removed afterwards."""
    repo = Path(__file__).resolve().parents[2]
    p = subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(path), rev],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise SystemExit(f"bench step: cannot check out --old-rev {rev}: {p.stderr.strip().splitlines()[-1:]}")
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(path)],
                       capture_output=True, timeout=120)


def main(argv: list[str]) -> dict[str, Any]:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return {}
    rev = None
    if "--old-rev" in argv:
        i = argv.index("--old-rev")
        if i + 1 == len(argv):
            raise SystemExit("bench step: --old-rev needs a git revision")
        rev, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    with tempfile.TemporaryDirectory(prefix="bench-step-") as tmp:
        with (worktree(rev, Path(tmp) / "old-code") if rev else contextlib.nullcontext()) as old_code:
            old = run_job([*OLD, *([] if rev else NO_WARM_START), *argv], Path(tmp) / "old", timeout_s=3600, cwd=old_code)
        new = run_job([*NO_WARM_START, *argv], Path(tmp) / "new", timeout_s=3600)
    step_old, step_new = old["rollout_s"] + old["train_s"], new["rollout_s"] + new["train_s"]
    ratio = step_old / step_new if step_new > 0 else None
    return {
        "overrides": argv, "old_rev": rev,
        "old_wall_s": round(old["wall_s"], 1), "new_wall_s": round(new["wall_s"], 1),
        "old_step_s": round(step_old, 1), "new_step_s": round(step_new, 1),
        "old_rollout_s": round(old["rollout_s"], 1), "new_rollout_s": round(new["rollout_s"], 1),
        "old_train_s": round(old["train_s"], 1), "new_train_s": round(new["train_s"], 1),
        "step_speedup": None if ratio is None else round(ratio, 2),
        "wall_speedup": round(old["wall_s"] / new["wall_s"], 2),
        "goal": 2.0,
        "meets_goal": ratio is not None and ratio >= 2.0,
        "new_mismatch": {k: new["train"][k] for k in ("mismatch_abs_mean", "mismatch_abs_max", "mismatch_kl", "tis_mean")
                         if k in new["train"]},
    }
