"""`python -m experiments.bench memory`: a job's peak RSS against the sizes of what it must hold."""
from __future__ import annotations

import pytest

from agent.policy.models import load_model
from experiments.bench import memory

SMALL = ["model=tiny", "steps=1", "n_envs=2", "tasks_per_step=1", "group_size=2", "sampling.max_new_tokens=8",
         "eval.n_tasks=2", "warm_start.n_demos=2", "warm_start.epochs=1", "warm_start.heldout_demos=0"]


def test_parts_are_the_models_sizes():
    config = {"model": {"path": "tiny", "dtype": "float32"}, "policy": {"prefix_cache_mb": "auto"}}
    sizes = memory.parts(config, runtime=100)
    n = sum(p.numel() for p in load_model("tiny", dtype="float32")[0].parameters())
    assert sizes == {"runtime": 100, "learner": 16 * n, "engine": 4 * n, "kv_budget": 4 * n}
    config["model"]["dtype"], config["policy"]["prefix_cache_mb"] = "bfloat16", 1
    assert memory.parts(config, runtime=0) == {"runtime": 0, "learner": 16 * n, "engine": 2 * n, "kv_budget": 2**20}
    # a float32 engine in the torch learner's process serves the learner's tensors: no copy of its own
    shared = {"model": {"path": "tiny", "dtype": "float32"}, "policy": {"name": "local", "prefix_cache_mb": "auto"},
              "learner": {"name": "torch"}}
    assert memory.parts(shared, runtime=0) == {"runtime": 0, "learner": 16 * n, "engine": 0, "kv_budget": 4 * n}
    shared["model"]["dtype"] = "bfloat16"
    assert memory.parts(shared, runtime=0)["engine"] == 2 * n
    shared["learner"]["optimizer_state_dtype"] = "bfloat16"  # AdamW's moments at 2 bytes each
    assert memory.parts(shared, runtime=0)["learner"] == 12 * n


@pytest.mark.slow
def test_quickstart_case_reports_its_peak_phases_and_ratio():
    out = memory.main(["--case", "quickstart", *SMALL])
    q = out["quickstart"]
    assert set(out) == {"overrides", "runtime_gb", "quickstart"}
    # the job's high-water mark holds at least the runtime every job imports, and each phase's peak is under it
    assert q["peak_gb"] >= out["runtime_gb"] > 0
    assert {"warm start", "rollouts", "train", "eval"} <= set(q["phase_peak_gb"])
    assert all(v <= q["peak_gb"] + 1e-3 for v in q["phase_peak_gb"].values())
    assert q["ratio"] == pytest.approx(q["peak_gb"] / q["parts_sum_gb"], rel=0.01)
    assert "0" in q["heldout_pass1"] and all(0 <= v <= 1 for v in q["heldout_pass1"].values())
