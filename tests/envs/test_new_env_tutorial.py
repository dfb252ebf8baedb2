"""docs/new_env.md cannot rot: its env code is the example file's, its Python runs, its commands run."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.cli import REPO

DOC = REPO / "docs" / "new_env.md"
EXAMPLE = REPO / "docs" / "examples" / "guess_number.py"
FROM_FILE = "# docs/examples/guess_number.py\n"
FROM_GYM_FILE = "# docs/examples/repeat_word.py\n"  # section 8: a plain Gymnasium env
FROM_SUBCLASS_FILE = "# docs/examples/guess_number_gym.py\n"  # section 2: an AgentEnv written the Gymnasium way
SHOWN_FILES = (FROM_FILE, FROM_GYM_FILE, FROM_SUBCLASS_FILE)


def blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)


def commands() -> list[str]:
    return [c.strip() for c in blocks("bash")]


def test_code_shown_is_the_example_files():
    shown = [b.removeprefix(FROM_FILE) for b in blocks("python") if b.startswith(FROM_FILE)]
    source = EXAMPLE.read_text()
    assert len(shown) >= 5
    for b in shown:
        assert b in source, f"docs/new_env.md shows code that is not in {EXAMPLE.name}:\n{b}"
    (gym_block,) = [b.removeprefix(FROM_GYM_FILE) for b in blocks("python") if b.startswith(FROM_GYM_FILE)]
    assert gym_block in (REPO / "docs/examples/repeat_word.py").read_text()
    subclass = [b.removeprefix(FROM_SUBCLASS_FILE) for b in blocks("python") if b.startswith(FROM_SUBCLASS_FILE)]
    assert len(subclass) == 3 and all(b in (REPO / "docs/examples/guess_number_gym.py").read_text() for b in subclass)
    # the Gymnasium way comes first, then the hooks
    assert DOC.read_text().index(FROM_SUBCLASS_FILE) < DOC.read_text().index(FROM_FILE)
    conf = (REPO / "docs/examples/conf/env/guess_number.yaml").read_text()
    (yaml_block,) = blocks("yaml")
    assert yaml_block in conf


def test_python_snippets_run():
    runnable = [b for b in blocks("python") if not b.startswith(SHOWN_FILES)]
    assert len(runnable) == 3
    for code in runnable:
        p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, f"{code}\n{p.stderr[-2000:]}"


def _run(command: str, run_dir) -> list[dict]:
    args = command.split()
    assert args[:3] == ["python", "-m", "experiments.run"], command
    p = subprocess.run([sys.executable, *args[1:], f"run_dir={run_dir}", "progress=false", "wandb.mode=disabled"],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"{command}\n{p.stderr[-3000:]}"
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_oracle_and_random_runs(tmp_path):
    oracle, random_run = [c for c in commands() if "model=tiny" not in c and "repeat_word" not in c and "_gym:" not in c]
    rows = _run(oracle, tmp_path / "oracle")
    assert len(rows) == 2 and all(r["outcome_mean"] == 1.0 and r["episodes"] == 4 for r in rows)
    rows = _run(random_run, tmp_path / "random")
    assert len(rows) == 1 and rows[0]["episodes"] == 4 and rows[0]["outcome_mean"] is not None
    turns = [json.loads(line) for line in (tmp_path / "random" / "turns.jsonl").read_text().splitlines()]
    assert all(t["next_state"]["data"]["verdict"] in (-1, 1) for t in turns)
    assert all(1 <= int(t["action"]) <= 8 for t in turns)  # env.high=8 reached the constructor


def test_plain_gymnasium_env_run(tmp_path):
    (command,) = [c for c in commands() if "repeat_word" in c]
    rows = _run(command, tmp_path / "gym")
    assert len(rows) == 1 and rows[0]["episodes"] == 4 and rows[0]["turns"] == 12  # env.turns=3 reached the env
    turns = [json.loads(line) for line in (tmp_path / "gym" / "turns.jsonl").read_text().splitlines()]
    assert all(t["task_id"].startswith("seed-") and t["outcome"] in (0.0, 1.0) for t in turns)  # outcome=last
    assert all(t["next_state"]["data"]["verdict"] in (-1, 1) for t in turns)


@pytest.mark.slow
def test_training_run_with_the_tiny_model(tmp_path):
    (train,) = [c for c in commands() if "model=tiny" in c and "_gym:" not in c]
    rows = [r for r in _run(train, tmp_path / "train") if not r.get("eval_only")]  # the held-out row is not a step
    assert [r["step"] for r in rows] == [0, 1]
    assert all(r["prm_score_mean"] is not None for r in rows)  # the env's verdicts reached the judge
    assert rows[-1]["policy_version"] >= 1 or rows[-1]["train"].get("skipped")


def test_gymnasium_style_subclass_runs(tmp_path):
    """Section 2's env, its own reset and step: random guesses, then training on its verdicts."""
    random_run, train = [c for c in commands() if "guess_number_gym:" in c]
    rows = _run(random_run, tmp_path / "random")
    assert len(rows) == 1 and rows[0]["episodes"] == 4 and rows[0]["outcome_mean"] is not None
    turns = [json.loads(line) for line in (tmp_path / "random" / "turns.jsonl").read_text().splitlines()]
    assert all(t["task_id"].startswith("seed-") and t["next_state"]["data"]["verdict"] in (-1, 1) for t in turns)
    assert all(t["next_state"]["content"] in ("Higher.", "Lower.", "Yes, that's it!", "Please reply with a number.")
               for t in turns)
    rows = [r for r in _run(train, tmp_path / "train") if not r.get("eval_only")]
    assert [r["step"] for r in rows] == [0, 1]
    assert all(r["prm_score_mean"] is not None for r in rows)  # its info verdicts reached the judge
    assert rows[-1]["policy_version"] >= 1 or rows[-1]["train"].get("skipped")
