"""A two-mode comparison through `-m` with the tiny model: one run dir and one offline W&B run per
mode, sharing a group; `experiments.compare` turns them into a table and PNGs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from experiments.compare import (CompareError, Reading, compare, figure_plot, group_runs, headline, load_run,
                                 value_after)
from tests.cli import REPO
from tests.learner.test_wandb import offline_records

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
        assert rec["run"]["job_type"] == "train"
        hist = rec["history"]
        assert [h["_step"] for h in hist] == [r["step"] for r in rows]
        for h, r in zip(hist, rows):  # the same figures as metrics.jsonl, nested keys flattened
            assert h["outcome_mean"] == pytest.approx(r["outcome_mean"])
            assert h["timings/rollout_s"] == pytest.approx(r["timings"]["rollout_s"])
            assert h["status_counts/ok"] == r["status_counts"]["ok"]
            assert h["trajectories/_type"] == "incremental-table-file" and h["trajectories/nrows"] >= 1
            assert h["tokens/_type"] == "html-file"  # the sampled turns' token panel
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


# ---- groups of seeds, intervals and paired tests, on hand-written run dirs ----------------------

def write_run(root: Path, mode: str, seed: int, rows: list[dict], model: str = "tiny", **top) -> Path:
    d = root / f"{mode}-{model}-{seed}"
    d.mkdir(parents=True)
    cfg = {"env": {"name": "chat_sim", "max_turns": 2}, "mode": {"name": mode, "train": mode != "eval"},
           "model": {"name": model, "path": f"/models/{model}"}, "learner": {"lr": 1e-5}, "seed": seed,
           "name": f"chat_sim-{mode}", "run_dir": str(d), "wandb": {"group": f"g{seed}"}, **top}
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def reward_rows(*values: float) -> list[dict]:
    return [{"step": k, "reward_mean": v} for k, v in enumerate(values)]


# reward after 0, 1, 2 updates per seed; combine is binary + 0.3 on every seed after 2
BINARY = {0: (0.1, 0.2, 0.4), 1: (0.2, 0.3, 0.5), 2: (0.3, 0.4, 0.6)}
COMBINE = {s: (a, b, c + 0.3) for s, (a, b, c) in BINARY.items()}


def table_rows(text: str, first_cell: str) -> dict[str, list[str]]:
    """The rows of the report's tables whose first cell starts with `first_cell`, keyed by their
    first two cells."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].startswith(first_cell):
            out[f"{cells[0]} | {cells[1]}"] = cells[2:]
    return out


@pytest.fixture
def seeds3(tmp_path) -> list[Path]:
    return ([write_run(tmp_path, "binary", s, reward_rows(*v)) for s, v in BINARY.items()]
            + [write_run(tmp_path, "combine", s, reward_rows(*v)) for s, v in COMBINE.items()])


def test_groups_give_mean_and_t_interval_over_seeds(seeds3, tmp_path):
    text = compare(seeds3, tmp_path / "cmp").read_text()
    rows = table_rows(text, "binary") | table_rows(text, "combine")
    # over seeds 0.1, 0.2, 0.3: mean 0.2, s 0.1, half-width 4.3027 * 0.1 / sqrt(3) = 0.248
    assert rows["binary | 0, 1, 2"] == [f"{m:.2f} ± 0.25 (n=3 seeds)" for m in (0.2, 0.3, 0.5)]
    assert rows["combine | 0, 1, 2"][2] == "0.80 ± 0.25 (n=3 seeds)"
    assert "Student t interval" in text
    # the per-run Table-3 rows stay
    assert table_rows(text, "binary-tiny-0")["binary-tiny-0 | binary"] == ["0.1", "0.2", "0.4"]
    # the percentile bootstrap of three values cannot leave their range: [0.1, 0.3]
    text = compare(seeds3, tmp_path / "boot", ci="bootstrap").read_text()
    assert table_rows(text, "binary")["binary | 0, 1, 2"][0] == "0.20 ± 0.10 (n=3 seeds)"


def test_paired_by_seed_a_consistent_difference_gives_p_one_quarter_with_3_seeds(seeds3, tmp_path):
    text = compare(seeds3, tmp_path / "cmp").read_text()
    row = table_rows(text, "binary - combine")["binary - combine | seed"]
    # after 0 and 1 the modes agree on every seed: no information, p = 1; after 2 combine is ahead by
    # 0.3 on all three seeds, and of the 2^3 sign patterns only +++ and --- reach |sum| 0.9: p = 2/8
    assert row == ["p=1, Δ=+0.00 (n=3)", "p=1, Δ=+0.00 (n=3)", "p=0.25, Δ=-0.30 (n=3)"]
    assert "0.25 with 3, however consistent the difference" in text
    assert "| item |" not in text and "By item" not in text and "Not paired" not in text


def test_runs_with_different_seeds_are_not_paired(tmp_path):
    dirs = ([write_run(tmp_path, "binary", s, reward_rows(*BINARY[s])) for s in (0, 1, 2)]
            + [write_run(tmp_path, "combine", s, reward_rows(*BINARY[s % 3])) for s in (0, 1, 3)])
    text = compare(dirs, tmp_path / "cmp").read_text()
    assert table_rows(text, "binary - combine")["binary - combine | seed"] == ["not paired"] * 3
    assert "- binary vs combine by seed, after 0, 1, 2: seeds differ (0, 1, 2 vs 0, 1, 3)" in text
    assert "p=" not in text.split("paired tests between groups")[1]  # (the change within each group has its own)
    # two runs of one group with one seed cannot be paired either
    dup = write_run(tmp_path / "again", "binary", 0, reward_rows(*BINARY[0]))
    text = compare(dirs[:3] + [dup] + dirs[3:], tmp_path / "dup").read_text()
    assert "binary vs combine by seed, after 0, 1, 2: binary has two runs with one seed" in text


def test_per_item_values_are_averaged_over_seeds_and_paired_by_item(tmp_path):
    # five held-out tasks; binary solves t5 only, combine all five, on every seed
    def rows(items: dict[str, int]) -> list[dict]:
        return [{"step": 0, "reward_mean": 0.0, "held_out": {"outcomes": items}}]

    binary, combine = dict(t1=0, t2=0, t3=0, t4=0, t5=1), dict(t1=1, t2=1, t3=1, t4=1, t5=1)
    dirs = ([write_run(tmp_path, "binary", s, rows(binary)) for s in range(3)]
            + [write_run(tmp_path, "combine", s, rows(combine)) for s in range(3)])
    text = compare(dirs, tmp_path / "cmp", figure="held_out.outcomes").read_text()
    groups = table_rows(text, "binary") | table_rows(text, "combine")
    # over items [0, 0, 0, 0, 1]: mean 0.2, s sqrt(0.2), half 2.7764 * sqrt(0.2) / sqrt(5) = 0.555
    assert groups["binary | 0, 1, 2"] == ["0.20 ± 0.56 (n=5 items × 3 seeds)"]
    assert groups["combine | 0, 1, 2"] == ["1.00 ± 0.00 (n=5 items × 3 seeds)"]
    tests = table_rows(text, "binary - combine")
    assert tests["binary - combine | seed"] == ["p=0.25, Δ=-0.80 (n=3)"]
    # four non-zero item differences of -1: p = 2/16
    assert tests["binary - combine | item"] == ["p=0.125, Δ=-0.80 (n=5)"]
    assert "By item: each item's mean over the seeds" in text
    assert (tmp_path / "cmp" / "held_out.outcomes.png").stat().st_size > 0
    # the run table reads the items' mean as the run's figure
    assert table_rows(text, "binary-tiny-0")["binary-tiny-0 | binary"] == ["0.2"]


def test_readings_of_scalars_dicts_and_per_item_values(tmp_path):
    rows = [{"step": 0, "x": 0.5}, {"step": 1, "x": {"mean": 0.25}}, {"step": 2, "x": [1, None, True, 0]},
            {"step": 3, "x": {"a": 1.0, "b": "?"}}, {"step": 4, "x": True}]
    run = load_run(write_run(tmp_path, "binary", 0, rows))
    got = run.readings(("x",))
    assert got[0] == Reading(0.5) and got[1] == Reading(0.25)
    assert got[2] == Reading(2 / 3, {"0": 1.0, "2": 1.0, "3": 0.0})  # a NaN item (null) is left out
    assert 3 not in got and 4 not in got  # not numbers: no figure


def test_a_group_is_mode_and_whatever_else_differs(tmp_path):
    dirs = [write_run(tmp_path, "binary", s, reward_rows(0.1), model=m) for m in ("tiny", "smollm2") for s in (0, 1)]
    dirs.append(write_run(tmp_path / "lr", "binary", 0, reward_rows(0.1), learner={"lr": 1e-4}))
    groups = group_runs([load_run(d) for d in dirs])
    # seed, run_dir, name and wandb.group differ too, and model.path follows model.name: none count
    assert [(g.label, [r.seed for r in g.runs]) for g in groups] == [
        ("binary learner.lr=1e-05 model.name=tiny", [0, 1]), ("binary learner.lr=1e-05 model.name=smollm2", [0, 1]),
        ("binary learner.lr=0.0001 model.name=tiny", [0])]
    assert [g.label for g in group_runs([load_run(d) for d in dirs[:2]])] == ["binary"]
    # a key named as the same setting does not split groups
    pooled = group_runs([load_run(d) for d in dirs], same=["learner.lr"])
    assert [(g.label, [r.seed for r in g.runs]) for g in pooled] == [
        ("binary model.name=tiny", [0, 1, 0]), ("binary model.name=smollm2", [0, 1])]


def test_plots_shade_a_band_per_group(seeds3, tmp_path):
    from matplotlib.collections import PolyCollection

    compare(seeds3, tmp_path / "cmp")
    png = tmp_path / "cmp" / "reward.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = [load_run(d) for d in seeds3]
    fig = figure_plot(group_runs(runs), headline(runs))
    bands = [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2  # one per mode
    # the band of binary after 0 updates spans the t interval 0.2 ± 0.248
    ys = bands[0].get_paths()[0].vertices[:, 1]
    assert min(ys) == pytest.approx(0.2 - 0.248414, abs=1e-5) and max(ys) == pytest.approx(0.5 + 0.248414, abs=1e-5)
    # one run per mode: no interval, so no band
    single = figure_plot(group_runs(runs[:1] + runs[3:4]), headline(runs))
    assert not [c for c in single.axes[0].collections if isinstance(c, PolyCollection)]


def test_compare_cli_says_what_is_wrong_with_a_figure(seeds3, tmp_path):
    p = subprocess.run([sys.executable, "-m", "experiments.compare", *map(str, seeds3), "--out", str(tmp_path / "o"),
                        "--figure", "held_out.nope"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "no run has the figure 'held_out.nope'" in p.stderr and "Traceback" not in p.stderr


def test_the_change_within_a_group_is_paired_by_item_across_seeds(tmp_path):
    # five held-out tasks; after 2 updates tasks t1..t4 flip from -1 to +1 on every seed, t5 stays +1
    before, after = dict(t1=-1, t2=-1, t3=-1, t4=-1, t5=1), dict(t1=1, t2=1, t3=1, t4=1, t5=1)
    rows = [{"step": 0, "reward_mean": 0.0, "heldout/outcomes": {t: [o] for t, o in before.items()}},
            {"step": 2, "reward_mean": 0.0, "heldout/outcomes": {t: [o] for t, o in after.items()}}]
    dirs = [write_run(tmp_path, "outcome", s, rows) for s in range(3)]
    text = compare(dirs, tmp_path / "cmp", at=[0, 2]).read_text()
    # differences over items [2, 2, 2, 2, 0]: mean 1.6, s = sqrt(0.8), half 2.7764 * sqrt(0.8) / sqrt(5) = 1.11;
    # four non-zero differences of the same sign: p = 2/16
    assert table_rows(text, "outcome")["outcome | item"] == ["Δ=+1.60 ± 1.11, p=0.125 (n=5)"]
    assert "change within each group" in text
