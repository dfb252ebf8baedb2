"""`python -m experiments.run` with rollout.branch and mode=vine, end to end with the tiny model."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.chat import ChatRenderer
from agent.policy.models import load_tokenizer
from agent.turn import Turn
from tests.agent.test_branching import assert_token_invariant
from tests.cli import run_cli


@pytest.mark.slow
def test_a_vine_run_writes_its_trees_and_the_judge_audit(tmp_path):
    p = run_cli("env=custom", "env.entry_point=tests.toy_envs:ChatterEnv", "env.max_turns=3", "model=tiny", "n_envs=2",
                "tasks_per_step=1", "group_size=2", "sampling.max_new_tokens=3", "mode=vine", "judge=rules",
                "rollout.branch.at=every", "rollout.branch.k=2", "steps=2", "eval.every=0", "learner.max_staleness=0",
                f"run_dir={tmp_path}", timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    turns = [Turn.from_json(json.loads(line)) for line in (tmp_path / "turns.jsonl").read_text().splitlines()]
    # per step: 2 trees of 15 turns (trunk 3 + continuations of 3, 3, 2, 2, 1, 1)
    assert len(turns) == 2 * 2 * 15
    assert sum(1 for t in turns if not t.branch_id) == 2 * 2 * 3
    assert {t.branch_id for t in turns} == {"", "b0.0", "b0.1", "b1.0", "b1.1", "b2.0", "b2.1"}
    keys = {t.key for t in turns}
    assert all(t.parent_turn in keys for t in turns if t.parent_turn is not None)
    assert assert_token_invariant(turns, ChatRenderer(load_tokenizer("tiny"))) == 2 * 2 * 12
    assert all(t.prm is not None and t.outcome in (-1.0, 1.0) for t in turns)
    # branch points' turns train (when their values differ); the rest of each path does not
    first = {}
    for t in turns:
        first[t.episode_id] = min(first.get(t.episode_id, t.step_index), t.step_index)
    trained = [t for t in turns if "advantage" in t.meta]
    assert all(not t.branch_id or t.step_index == first[t.episode_id] for t in trained)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for r in rows:
        audit = r["judge_audit"]
        assert audit["turns"] == 2 * 3 * 3  # 2 trees x 3 branch points x (trunk + 2 continuations)
        assert (audit["pearson"] is None) == (audit["undefined"] is not None)
        assert audit["pearson"] is None or -1.0 <= audit["pearson"] <= 1.0
        assert r["episodes"] == 2 * 7


def _kept_task(root: Path) -> Path:
    """A terminal task whose tests pass only where the setup's files (work dir and /tmp) are
    there: every path of a tree is verified in its own sandbox, so a fork that lost them scores 0."""
    d = root / "tasks" / "kept-files"
    for sub in ("environment", "solution", "tests"):
        (d / sub).mkdir(parents=True)
    (d / "instruction.md").write_text("Leave the files as they are and submit.\n")
    (d / "environment" / "setup.sh").write_text("mkdir -p 'a dir' && echo kept > 'a dir/f' && echo tmp > /tmp/t\n")
    (d / "solution" / "solve.sh").write_text("true\n")
    (d / "tests" / "test.sh").write_text(
        "mkdir -p /logs/verifier\n"
        "if grep -qx kept 'a dir/f' && grep -qx tmp /tmp/t; then echo 1 > /logs/verifier/reward.txt; "
        "else echo 0 > /logs/verifier/reward.txt; fi\n")
    return d.parent


@pytest.mark.slow
@pytest.mark.bwrap
def test_a_vine_run_branches_the_terminal_env_in_bwrap(tmp_path):
    # max_turns=3, every_k with every=2: branch points before steps 0 and 2, k=2 continuations each
    p = run_cli("env=terminal", "sandbox=bwrap", f"env.tasks_dir={_kept_task(tmp_path)}", "env.max_turns=3", "model=tiny",
                "n_envs=1", "tasks_per_step=1", "group_size=1", "sampling.max_new_tokens=8", "mode=vine", "judge=rules",
                "rollout.branch.at=every_k", "rollout.branch.every=2", "rollout.branch.k=2", "steps=1", "eval.every=0",
                "eval.n_tasks=0", "learner.max_staleness=0", f"run_dir={tmp_path}/run", timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    turns = [Turn.from_json(json.loads(line)) for line in (tmp_path / "run" / "turns.jsonl").read_text().splitlines()]
    # one tree: the trunk's 3 turns + continuations of 3, 3 (from step 0) and 1, 1 (from step 2)
    assert len(turns) == 11 and len({t.tree_id for t in turns}) == 1
    assert sorted({t.branch_id for t in turns}) == ["", "b0.0", "b0.1", "b2.0", "b2.1"]
    keys = {t.key for t in turns}
    assert all(t.parent_turn in keys for t in turns if t.parent_turn is not None)
    assert {t.parent_turn for t in turns if t.branch_id in ("b2.0", "b2.1")} == {f"{turns[0].tree_id}/1"}
    assert assert_token_invariant(turns, ChatRenderer(load_tokenizer("tiny"))) == 8
    # every path ended in its own forked sandbox, where the task's tests found the setup's files
    ends = [t for t in turns if t.episode_done]
    assert len(ends) == 5
    for t in ends:
        data = t.next_state.data
        assert (t.next_state.kind, data["reward"], data["tampered"], t.outcome) == ("tests", 1.0, [], 1.0), data
    assert all(t.prm is not None for t in turns)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["episodes"] == 5
    audit = rows[0]["judge_audit"]
    assert audit["turns"] == 2 * 3  # 2 branch points x (trunk + 2 continuations)
    assert (audit["pearson"] is None) == (audit["undefined"] is not None)
    assert audit["pearson"] is None or -1.0 <= audit["pearson"] <= 1.0


def test_an_env_that_cannot_fork_gives_one_line(tmp_path):
    p = run_cli("env=custom", "env.entry_point=tests.agent.test_branching:Unforkable", "policy=random", "mode=eval",
                "rollout.branch.at=every", "eval.every=0", "steps=1", f"run_dir={tmp_path}")
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1].startswith("error: rollout.branch needs an env that can fork: Unforkable cannot fork")


def test_branch_settings_are_checked_before_the_run(tmp_path):
    p = run_cli("env=custom", "env.entry_point=tests.toy_envs:CountdownEnv", "mode=vine", f"run_dir={tmp_path}/a")
    assert p.returncode == 1 and "mode=vine values each turn by its continuations" in p.stderr
    p = run_cli("env=custom", "env.entry_point=tests.toy_envs:CountdownEnv", "policy=random", "mode=eval",
                "rollout.branch.at=disagree", f"run_dir={tmp_path}/b")
    assert p.returncode == 1 and "needs the judge's PRM votes" in p.stderr
    p = run_cli("env=custom", "env.entry_point=tests.toy_envs:CountdownEnv", "rollout.branch.at=sometimes", f"run_dir={tmp_path}/c")
    assert p.returncode == 1 and "choose one of none, every, every_k, disagree" in p.stderr
    assert not (tmp_path / "a").exists()
