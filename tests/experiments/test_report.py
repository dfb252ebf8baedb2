"""experiments.report builds docs/results.md from the committed records alone: the same records
give the same bytes, the committed file is what the records give, a new experiment folder needs
no code change, and a benchmark's --record lands in the report with its machine."""
from __future__ import annotations

import json
import shutil

import pytest
import yaml

from experiments import report
from experiments.bench.__main__ import split_record, write_record


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("a") / "results.md"
    report.build(report.RECORDS, out)
    return out


def test_the_committed_report_is_what_the_records_build(built):
    assert built.read_text() == report.OUT.read_text(), \
        "docs/results.md drifted from its records: run `python -m experiments.report`"
    readme = report.README.read_text()
    assert report.readme_block() in readme, "README's results block drifted: run `python -m experiments.report`"
    for png in sorted((built.parent / "img").glob("*.png")):  # every plot it draws is committed
        assert (report.OUT.parent / "img" / png.name).is_file(), png.name


def test_building_twice_gives_the_same_bytes(built, tmp_path):
    again = tmp_path / "results.md"
    report.build(report.RECORDS, again)
    assert again.read_bytes() == built.read_bytes()
    pngs = sorted(p.name for p in (built.parent / "img").glob("*.png"))
    assert pngs and pngs == sorted(p.name for p in (tmp_path / "img").glob("*.png"))
    for name in pngs:
        assert (tmp_path / "img" / name).read_bytes() == (built.parent / "img" / name).read_bytes(), name


def _run(d, mode, seed, outcomes_by_step, log):
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump({"env": {"name": "toy"}, "mode": {"name": mode}, "seed": seed}))
    rows = [{"step": step, "heldout/outcomes": outcomes} for step, outcomes in outcomes_by_step.items()]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "run.log").write_text(log)


def test_a_new_experiment_folder_is_reported_with_its_rows_and_intervals(tmp_path):
    exp = tmp_path / "results" / "toy-contrast"
    start = {"q1": -1, "q2": -1, "q3": -1, "q4": -1}
    _run(exp / "a-s0", "a", 0, {0: start, 2: {"q1": 1, "q2": 1, "q3": -1, "q4": 1}},
         "step 2/2\n\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:30.00\n")
    _run(exp / "a-s1", "a", 1, {0: start, 2: {"q1": 1, "q2": -1, "q3": -1, "q4": 1}}, "rc=0 wall=45\n")
    _run(exp / "b-s0", "b", 0, {0: start, 2: start}, "peak RSS 1.50 GB (rollouts 1.50 GB by phase)\n")
    _run(exp / "b-s1", "b", 1, {0: start, 2: start}, "")
    (exp / "index.yaml").write_text(yaml.safe_dump({
        "title": "A toy contrast", "shows": "a rises.", "does_not_show": "why.",
        "command": "python -m experiments.run env=toy", "machine": {"cpu": "Test CPU", "flags": ["avx2"], "threads": 2},
        "runs": [{"name": "a-s0", "date": "2026-01-01", "command": "python -m experiments.run env=toy mode=a seed=0"},
                 "a-s1", "b-s0", "b-s1"],
        "comparisons": [{"figure": "heldout_outcome", "at": [0, 2]}]}))
    text = report.build(tmp_path / "results", tmp_path / "out" / "results.md")
    assert "## A toy contrast" in text and "**What it shows:** a rises." in text
    # item means over the seeds after 2 updates: 1, 0, -1, 1 -> 0.25, t interval with 3 df: 0.25 ± 1.52
    assert "| a | 0, 1 | -1.00 ± 0.00 (n=4 items × 2 seeds) | 0.25 ± 1.52 (n=4 items × 2 seeds) |" in text
    assert "| a-s0 | 2026-01-01 | Test CPU (avx2) † | 2 |  | 1 min 30 s |  |" in text
    assert "| a-s1 |  | Test CPU (avx2) † | 2 |  | 45 s |  |" in text and "| 1.50 GB |" in text
    assert "python -m experiments.run env=toy mode=a seed=0\n# a-s1 †, b-s0 †, b-s1 †\npython -m experiments.run env=toy\n" in text
    assert "python -m experiments.compare " in text and "| a - b | item |" in text
    assert (tmp_path / "out" / "img" / "toy-contrast-heldout_outcome.png").is_file()
    assert "](img/toy-contrast-heldout_outcome.png)" in text


def test_a_benchmark_record_is_reported_with_its_command_and_machine(tmp_path):
    argv, record = split_record(["fork", "--record", str(tmp_path / "bench" / "fork-quiet"), "--cases", "toolcall"])
    assert argv == ["fork", "--cases", "toolcall"]
    write_record(record, argv, {"toolcall_fork_p50_ms": 5.25, "nested": {"ok": True}}, load_before=0.5)
    text = report.build(tmp_path, tmp_path / "out.md")
    row = next(line for line in text.splitlines() if line.startswith("| fork-quiet |"))
    assert "`python -m experiments.bench fork --cases toolcall`" in row and "toolcall_fork_p50_ms=5.25" in row
    assert "nested.ok=true" in row and "| 0.5, " in row


def test_a_bad_index_is_one_line(tmp_path, capsys):
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "index.yaml").write_text("titel: typo\n")
    assert report.main(["--records", str(tmp_path), "--out", str(tmp_path / "x.md")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown key(s) titel" in err


def test_the_readme_block_is_rewritten_between_its_markers(tmp_path):
    shutil.copytree(report.RECORDS / "quickstart", tmp_path / "records" / "quickstart")
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{report.README_BEGIN}\nstale 9 min\n{report.README_END}\nafter\n")
    assert report.rewrite_readme(readme, tmp_path / "records")
    text = readme.read_text()
    assert "stale" not in text and text.startswith("before\n") and text.endswith("after\n")
    assert "3 min 49 s wall" in text and "AMD EPYC (avx2, avx512f, avx512_bf16), 2 threads" in text
