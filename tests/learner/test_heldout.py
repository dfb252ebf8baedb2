"""Held-out evaluation: the split every run writes, the episode evaluator's estimates, the row
schedule (eval.every), and `python -m experiments.eval`."""
from __future__ import annotations

import asyncio
import json
import re

import pytest
from hydra import compose, initialize_config_dir

from agent.actors import OracleActor, RandomActor
from agent.rollout import Runner
from experiments.run import run_experiment
from learner.evaluation import EpisodeEvaluator, HeldOutResult, eval_jobs, heldout_curve
from learner.loop import LoopConfig, eval_due
from learner.runlog import RunLog
from learner.wandb_log import flatten
from tests.cli import REPO, eval_cli, run_cli
from tests.toy_envs import CountdownEnv, InfraFailEnv

COUNTDOWN = ["env=custom", "env.entry_point=tests.toy_envs:CountdownEnv"]


def test_estimates_equal_the_hand_computed_ones():
    result = HeldOutResult(k=2, outcomes={
        "a": [1.0, -1.0, -1.0, 1.0],  # 2 of 4: rate 1/2, pass@2 = 1 - C(2,2)/C(4,2) = 5/6
        "b": [-1.0, -1.0, None, -1.0],  # 0 of 3 counted (one excluded): rate 0, pass@2 = 0
        "c": [1.0, 1.0, 1.0, 1.0],  # rate 1, pass@2 = 1
        "d": [None, None, None, None],  # nothing counted: the task drops out
    })
    est = result.estimates()
    assert result.excluded == 5
    assert est["pass@1"].value == pytest.approx(0.5)  # (1/2 + 0 + 1) / 3
    # Wilson over the 11 counted episodes, 6 successes: centre 0.533681, half-width 0.253598
    assert (est["pass@1"].lo, est["pass@1"].hi, est["pass@1"].n) == (pytest.approx(0.2800915, abs=1e-6),
                                                                       pytest.approx(0.7872873, abs=1e-6), 11)
    assert est["pass@k"].value == pytest.approx((5 / 6 + 0 + 1) / 3) and est["pass@k"].n == 3
    # 3 tasks: each bootstrap mean is the minimum with probability 1/27 > 2.5%, so the interval
    # runs from the smallest task value to the largest
    assert (est["pass@k"].lo, est["pass@k"].hi) == (0.0, 1.0)
    assert (est["outcome_mean"].value, est["outcome_mean"].lo, est["outcome_mean"].hi) == (0.0, -1.0, 1.0)
    row = result.row()
    assert row["heldout/pass@1"] == est["pass@1"].value and row["heldout/pass@1_n"] == 11
    assert row["heldout/pass@k_lo"] == 0.0 and row["heldout/k"] == 2 and row["heldout/excluded"] == 5
    assert row["heldout/outcomes"]["b"] == [-1.0, -1.0, None, -1.0]
    wandb = flatten(row)  # W&B gets the same names, and no series per task
    assert wandb["heldout/pass@1"] == 0.5 and not any(k.startswith("heldout/outcomes") for k in wandb)
    table = result.table()
    assert "| pass@1 | 0.500 | [0.280, 0.787] | 11 episodes |" in table
    assert "| pass@2 | 0.611 | [0.000, 1.000] | 3 tasks |" in table
    assert "| excluded (infra_error, timeout) | 5 | | 16 episodes |" in table
    one = HeldOutResult(k=1, outcomes={"a": [1.0]}).table().splitlines()[2:]  # k = 1: pass@k would repeat pass@1
    assert [line.split(" | ")[0] for line in one] == ["| pass@1", "| outcome_mean", "| excluded (infra_error, timeout)"]
    # fewer counted samples than k: pass@k has no task to go on and is left out
    assert set(HeldOutResult(k=3, outcomes={"a": [1.0, None, None]}).estimates()) == {"pass@1", "outcome_mean"}
    assert HeldOutResult(k=1, outcomes={"a": [None]}).row() == {"heldout/k": 1, "heldout/excluded": 1,
                                                                "heldout/outcomes": {"a": [None]}}


def test_heldout_curve_states_start_against_end():
    def row(step, v, lo, hi):
        return {"step": step, "heldout/pass@1": v, "heldout/pass@1_lo": lo, "heldout/pass@1_hi": hi, "heldout/pass@1_n": 40}

    start = row(0, 0.1, 0.04, 0.23)
    lines = heldout_curve([start, {"step": 1, "reward_mean": 0.5}, row(4, 0.5, 0.35, 0.65)])
    assert lines == ["held-out pass@1 (95% CI) after N updates:",
                     "     0: 0.100 [0.040, 0.230] n=40", "     4: 0.500 [0.350, 0.650] n=40",
                     "start (after 0) 0.100 [0.040, 0.230] -> end (after 4) 0.500 [0.350, 0.650]: "
                     "rose beyond both intervals (they do not overlap)"]
    assert heldout_curve([start, row(4, 0.3, 0.2, 0.45)])[-1].endswith("rose above the start's interval, but the intervals overlap")
    assert heldout_curve([start, row(4, 0.2, 0.1, 0.3)])[-1].endswith("not distinguishable from noise")
    assert heldout_curve([start, row(4, 0.1, 0.04, 0.23)])[-1].endswith("did not rise")
    assert heldout_curve([start]) == lines[:2]  # one evaluation: its value, no verdict
    # after a warm start, RL's own rise is stated too: from the warm-started policy (after 0)
    before = {**row(0, 0.0, 0.0, 0.09), "eval_only": True, "phase": "before warm start"}
    warm = heldout_curve([before, start, row(4, 0.2, 0.1, 0.3)])
    assert warm[-2].startswith("start (before warm start) 0.000") and warm[-2].endswith("(they do not overlap)")
    assert warm[-1] == ("RL's own: warm-started (after 0) 0.100 [0.040, 0.230] -> end (after 4) 0.200 [0.100, 0.300]: "
                        "rose within the intervals: not distinguishable from noise")
    assert heldout_curve([before, start])[-1].startswith("start (")  # no update yet: no RL line
    # chat_sim's personalization comes first; rows without intervals (older runs) print nothing
    both = [dict(start, personalization=0.2, personalization_lo=0.1, personalization_hi=0.3, personalization_n=16)]
    assert heldout_curve(both)[0] == "personalization (95% CI) after N updates:"
    assert heldout_curve([{"step": 0, "personalization": 0.5}]) == []


def test_eval_rows_follow_eval_every():
    def rows(steps: int, every: int, first: int = 0) -> list[int]:
        cfg = LoopConfig(steps=steps, tasks_per_step=1, group_size=1, seed=0, eval_every=every)
        return [k for k in range(first, steps + 1) if eval_due(k, cfg, first)]

    assert rows(6, 4) == [0, 4, 6]  # the first row, every 4th, the final eval-only row
    assert rows(6, 1) == [0, 1, 2, 3, 4, 5, 6]
    assert rows(10, 4, first=3) == [3, 4, 8, 10]  # a resumed run starts with a figure
    assert rows(6, 0) == []


def test_sample_seeds_are_fixed_per_task_and_sample():
    jobs = eval_jobs(["a", "b"], k=3, seed=7)
    assert [j.task_id for j in jobs] == ["a"] * 3 + ["b"] * 3
    assert len({j.seed for j in jobs}) == 6
    assert [j.seed for j in eval_jobs(["b"], k=3, seed=7)] == [j.seed for j in jobs[3:]]  # by task id, not position
    assert [j.seed for j in eval_jobs(["a", "b"], k=3, seed=8)] != [j.seed for j in jobs]


def test_oracle_passes_every_held_out_task_and_infra_failures_are_excluded():
    async def evaluate(env_cls, make_actor) -> HeldOutResult:
        runner = Runner(env_cls, make_actor, n_envs=2, progress=False)
        try:
            return await EpisodeEvaluator(runner, ["n2", "n4"], k=2, seed=0).evaluate()
        finally:
            runner.close()

    oracle = asyncio.run(evaluate(CountdownEnv, lambda job: OracleActor()))
    assert oracle.outcomes == {"n2": [1.0, 1.0], "n4": [1.0, 1.0]}
    assert oracle.estimates()["pass@1"].value == 1.0 and oracle.row()["heldout/excluded"] == 0
    broken = asyncio.run(evaluate(InfraFailEnv, lambda job: OracleActor()))  # the sandbox dies on turn 2
    assert broken.outcomes == {"n2": [None, None], "n4": [None, None]} and broken.estimates() == {}
    # random actions with fixed seeds: two evaluations draw the same episodes
    random_runs = [asyncio.run(evaluate(CountdownEnv, lambda job: RandomActor(job.seed))) for _ in range(2)]
    assert random_runs[0].outcomes == random_runs[1].outcomes


def run_in_process(run_dir, *overrides: str) -> list[dict]:
    with initialize_config_dir(config_dir=str(REPO / "experiments" / "conf"), version_base=None):
        cfg = compose("config", overrides=["policy=oracle", "mode=eval", *overrides, f"run_dir={run_dir}", "progress=false"])
    return asyncio.run(run_experiment(cfg, RunLog(run_dir)))


def test_rollouts_draw_only_training_tasks(tmp_path):
    rows = run_in_process(tmp_path, *COUNTDOWN, "steps=3", "tasks_per_step=4", "eval.n_tasks=2")
    split = json.loads((tmp_path / "tasks.json").read_text())
    assert len(split["held_out"]) == 2 and sorted(split["train"] + split["held_out"]) == ["n2", "n3", "n4", "n5"]
    drawn = {json.loads(line)["task_id"] for line in (tmp_path / "turns.jsonl").read_text().splitlines()}
    assert drawn == set(split["train"])  # 12 draws over 4 tasks would hit a held-out one (p = 1 - 2^-12)
    # without a trainer the policy never changes: the first row carries the held-out figures
    assert [r["step"] for r in rows if "heldout/pass@1" in r] == [0] and rows[0]["heldout/pass@1"] == 1.0
    assert set(rows[0]["heldout/outcomes"]) == set(split["held_out"])


def test_same_eval_seed_holds_out_the_same_tasks_for_every_run_seed(tmp_path):
    def split(seed: int, eval_seed: int) -> dict:
        run_dir = tmp_path / f"s{seed}-e{eval_seed}"
        run_in_process(run_dir, "env=toolcall", "sandbox=bwrap", "steps=1", "tasks_per_step=1", f"seed={seed}", f"eval.seed={eval_seed}",
                       "eval.n_tasks=8")
        return json.loads((run_dir / "tasks.json").read_text())

    a, b, other = split(0, 1234), split(1, 1234), split(0, 99)
    assert len(a["held_out"]) == 8 and len(a["train"]) == 492 and not set(a["train"]) & set(a["held_out"])
    assert a == b
    assert other["held_out"] != a["held_out"] and other["eval_seed"] == 99


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A short tiny-model training run on CountdownEnv (4 tasks: 2 held out), held-out
    evaluation every 2 updates."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    p = run_cli(*COUNTDOWN, "model=tiny", "mode=outcome", "steps=5", "tasks_per_step=2", "group_size=2", "n_envs=4",
                "sampling.max_new_tokens=4", "eval.every=2", "eval.n_tasks=2", "learner.max_staleness=0",
                "wandb.mode=disabled", f"run_dir={run_dir}", timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    (run_dir / "stdout.txt").write_text(p.stdout + p.stderr)
    return run_dir


@pytest.mark.slow
def test_training_never_draws_a_held_out_task_and_evaluates_on_schedule(trained_run):
    split = json.loads((trained_run / "tasks.json").read_text())
    assert len(split["held_out"]) == 2 and not set(split["train"]) & set(split["held_out"])
    drawn = {json.loads(line)["task_id"] for line in (trained_run / "turns.jsonl").read_text().splitlines()}
    assert drawn and drawn <= set(split["train"])  # 20 episodes over 4 tasks would hit a held-out one
    rows = [json.loads(line) for line in (trained_run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4, 5] and rows[-1]["eval_only"]
    assert [r["step"] for r in rows if "heldout/pass@1" in r] == [0, 2, 4, 5]
    for r in rows:
        if "heldout/pass@1" in r:
            assert set(r["heldout/outcomes"]) == set(split["held_out"])
            assert r["heldout/pass@1_lo"] <= r["heldout/pass@1"] <= r["heldout/pass@1_hi"]
    trained = [r for r in rows if not r.get("eval_only")]
    assert all(0.05 < r["memory"]["rss_gb"] <= r["memory"]["peak_rss_gb"] for r in trained)  # host memory per step
    phases = trained[-1]["memory"]["phase_peak_gb"]  # the peak while each phase ran, none above the run's
    assert set(phases) == {"rollouts", "train", "eval"}, phases
    assert all(0.05 < gb <= trained[-1]["memory"]["peak_rss_gb"] + 1e-6 for gb in phases.values()), phases
    printed = (trained_run / "stdout.txt").read_text()  # the run ends with its held-out curve
    assert "held-out pass@1 (95% CI) after N updates:" in printed and "start (after 0)" in printed
    assert re.search(r"peak RSS [\d.]+ GB \(rollouts [\d.]+, train [\d.]+, eval [\d.]+ GB by phase\)", printed), printed[-2000:]
    assert all(f"  {k:>4}: " in printed for k in (0, 2, 4, 5))


@pytest.mark.slow
def test_eval_command_evaluates_a_runs_checkpoint_on_its_held_out_tasks(trained_run, tmp_path):
    out = tmp_path / "eval"
    p = eval_cli(*COUNTDOWN, f"model.path={trained_run}/checkpoints/latest/model", "k=3", "n_tasks=2",
                 "eval.temperature=1.0", "sampling.max_new_tokens=4", f"out={out}")
    assert p.returncode == 0, p.stderr[-3000:]
    report = json.loads((out / "eval.json").read_text())
    trained = json.loads((trained_run / "tasks.json").read_text())
    assert report["split"] == {"train": trained["train"], "held_out": trained["held_out"]}  # the same eval.seed
    assert report["model"] == f"{trained_run}/checkpoints/latest/model"
    assert {t: len(o) for t, o in report["outcomes"].items()} == {t: 3 for t in report["split"]["held_out"]}
    for name in ("pass@1", "pass@k", "outcome_mean"):
        e = report["estimates"][name]
        assert e["lo"] <= e["value"] <= e["hi"], name
    md = (out / "eval.md").read_text()
    assert "| metric | value | 95% CI | n |" in md and "| pass@3 |" in md and md.splitlines()[-1] in p.stdout


def test_eval_command_with_the_oracle_passes_every_task(tmp_path):
    out = tmp_path / "oracle"
    p = eval_cli("env=toolcall", "sandbox=bwrap", "policy=oracle", "k=2", "n_tasks=3", f"out={out}")
    assert p.returncode == 0, p.stderr[-3000:]
    report = json.loads((out / "eval.json").read_text())
    assert report["estimates"]["pass@1"] == {"value": 1.0, "lo": pytest.approx(0.6097, abs=1e-4), "hi": 1.0, "n": 6}
    assert report["excluded"] == 0 and len(report["split"]["held_out"]) == 3 and report["config"]["eval"]["k"] == 2
    assert "| pass@1 | 1.000 | [0.610, 1.000] | 6 episodes |" in (out / "eval.md").read_text()


def test_eval_command_bad_input_is_one_line(tmp_path):
    p = eval_cli(*COUNTDOWN, "policy=oracle", "k=0", f"out={tmp_path}/bad")
    assert p.returncode != 0 and p.stderr.strip().splitlines() == [p.stderr.strip()] and "eval.k >= 1" in p.stderr
    assert not (tmp_path / "bad").exists()
    p = eval_cli(*COUNTDOWN, "model.path=/no/such/model", f"out={tmp_path}/bad")
    assert p.returncode != 0 and p.stderr.strip().splitlines() == [p.stderr.strip()] and "/no/such/model" in p.stderr
