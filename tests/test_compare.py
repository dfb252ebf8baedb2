"""A two-mode comparison through `-m` with the tiny model: one run dir and one offline W&B run per
mode, sharing a group; `experiments.compare` turns them into a table and PNGs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.compare import CompareError, compare, load_run, value_after
from tests.test_run_cli import REPO
from tests.test_wandb import offline_records

STEPS = 2
MODES = ("outcome", "binary")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sweep")
    args = ["-m", f"mode={','.join(MODES)}", "env=custom", "env.entry_point=tests.toy_envs:FirstCharEnv", "model=tiny",
            "judge=rules", "n_envs=4", "tasks_per_step=1", "group_size=4", "sampling.max_new_tokens=2",
            f"steps={STEPS}", "learner.max_staleness=0", "progress=false",
            f"hydra.sweep.dir={root}/hydra", "run_dir=" + str(root) + "/${name}${job_suffix:}"]
    p = subprocess.run([sys.executable, "-m", "experiments.run", *args], cwd=REPO, capture_output=True, text=True,
                       timeout=600, env={**os.environ, "WANDB_MODE": "offline"})
    assert p.returncode == 0, p.stderr[-3000:]
    (root / "sweep.log").write_text(p.stdout + p.stderr)  # Hydra logs to stdout
    return root


def run_dirs(root: Path) -> list[Path]:
    return [root / f"custom-{m}-{i}" for i, m in enumerate(MODES)]


@pytest.mark.slow
def test_multirun_writes_one_run_dir_per_mode(sweep):
    for d, mode in zip(run_dirs(sweep), MODES):
        run = load_run(d)
        assert run.mode == mode and run.env == "custom"
        assert [r["step"] for r in run.rows] == list(range(STEPS))
        assert all(r["timings"]["step_s"] > 0 for r in run.rows)
    log = (sweep / "sweep.log").read_text()
    for k in range(1, STEPS + 1):  # one progress line per RL step and job
        assert log.count(f"step {k}/{STEPS}: reward_mean=") == len(MODES)


@pytest.mark.slow
def test_offline_wandb_holds_the_metrics_and_a_shared_group(sweep):
    groups = set()
    for d in run_dirs(sweep):
        rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
        rec = offline_records(d)
        groups.add(rec["run"]["group"])
        assert rec["run"]["display_name"].startswith("custom-") and "mode" in rec["config"]
        hist = rec["history"]
        assert [h["_step"] for h in hist] == [r["step"] for r in rows]
        for h, r in zip(hist, rows):  # the same figures as metrics.jsonl, nested keys flattened
            assert h["outcome_mean"] == pytest.approx(r["outcome_mean"])
            assert h["timings/rollout_s"] == pytest.approx(r["timings"]["rollout_s"])
            assert h["status_counts/ok"] == r["status_counts"]["ok"]
            assert h["trajectories/_type"] == "table-file" and h["trajectories/nrows"] >= 1
        tables = list(d.glob("wandb/offline-run-*/files/media/table/trajectories_*.table.json"))
        assert len(tables) == STEPS
        table = json.loads(tables[0].read_text())
        row = dict(zip(table["columns"], table["data"][0]))
        assert "Say a word." in row["prompt_tail"] and row["next_state"].startswith("[user/user_reply]")
        assert row["advantage"] == "" or "mean=" in row["advantage"]
    assert len(groups) == 1 and groups.pop().startswith("custom-")


@pytest.mark.slow
def test_compare_writes_table_and_plots(sweep, tmp_path):
    report = compare(run_dirs(sweep), tmp_path / "cmp")
    text = report.read_text()
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = lines[first:lines.index("", first)]  # the first table
    assert len(table) == 2 + len(MODES)
    assert "outcome final" in table[0] and "step_time mean" in table[0] and "prm_score final" in table[0]
    for mode, line in zip(MODES, table[2:]):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[2] == mode and cells[4] == str(STEPS)
    for name in ("reward", "outcome", "prm_score", "throughput", "step_time"):
        png = tmp_path / "cmp" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"({name}.png)" in text


def test_compare_writes_the_table3_layout_after_0_n2_n_updates(sweep, tmp_path):
    runs = [load_run(d) for d in run_dirs(sweep)]
    text = compare(run_dirs(sweep), tmp_path / "t3", at=[0, 1, STEPS]).read_text()
    head = next(line for line in text.splitlines() if "after 0 |" in line)
    assert [c.strip() for c in head.strip("|").split("|")] == ["run", "mode", "reward after 0", "reward after 1",
                                                               f"reward after {STEPS}"]
    for run in runs:
        row = next(line for line in text.splitlines() if line.startswith(f"| {run.dir.name} | {run.mode} |"))
        cells = [c.strip() for c in row.strip("|").split("|")][2:]
        assert cells == [f"{v:.3g}" if v is not None else "" for v in (value_after(run, ("reward_mean",), k) for k in (0, 1, STEPS))]
        assert cells[0] == f"{run.rows[0]['reward_mean']:.3g}"


def test_compare_cli_says_what_is_wrong_with_a_dir(tmp_path):
    (tmp_path / "empty").mkdir()
    p = subprocess.run([sys.executable, "-m", "experiments.compare", str(tmp_path / "empty"), "--out", str(tmp_path / "o")],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "no metrics.jsonl" in p.stderr and "Traceback" not in p.stderr
    with pytest.raises(CompareError, match="no such run dir"):
        load_run(tmp_path / "missing")
