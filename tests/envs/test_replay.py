"""env=replay: a finished tiny run, replayed with the same settings, gets exactly the next states it
recorded; an action the run never took at that point ends the episode as `diverged`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from envs.base import Status
from envs.replay import ReplayEnv
from tests.cli import run_cli

COMMON = ["model=tiny", "mode=eval", "steps=1", "tasks_per_step=2", "group_size=2", "n_envs=2",
          "sampling.max_new_tokens=8", "eval.every=0", "wandb.mode=disabled"]
KEYS = ("task_id", "step_index", "prompt_ids", "response_ids", "action", "next_state", "status", "outcome", "episode_done")


def _turns(run_dir: Path) -> dict[tuple[str, int], dict]:
    return {(t["episode_id"], t["step_index"]): {k: t[k] for k in KEYS}
            for t in map(json.loads, (run_dir / "turns.jsonl").read_text().splitlines())}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("replay") / "original"
    p = run_cli("env=chat_sim", "env.max_turns=2", *COMMON, f"run_dir={run_dir}")
    assert p.returncode == 0, p.stderr[-2000:]
    return run_dir


def test_a_replayed_run_gets_the_recorded_next_states_exactly(recorded, tmp_path):
    p = run_cli("env=replay", f"env.run_dir={recorded}", *COMMON, f"run_dir={tmp_path}")
    assert p.returncode == 0, p.stderr[-2000:]
    original, replayed = _turns(recorded), _turns(tmp_path)
    assert len(original) >= 4 and replayed == original  # same jobs, token ids, actions, next states, endings


def test_a_divergent_action_ends_the_episode_as_diverged(recorded):
    first = json.loads((recorded / "turns.jsonl").read_text().splitlines()[0])
    env = ReplayEnv(str(recorded))
    _, info = env.reset(options={"task_id": first["task_id"]})
    assert info["messages"] == first["messages"] and info["tools"] == first["tools"]
    assert env.oracle_action() == first["action"]
    fork = env.fork()  # a replay forks too: it shares the record, not the position in it
    _, _, _, _, same = env.step(first["action"])
    assert same["next_state"].to_dict() == first["next_state"] and same["status"] == first["status"]
    _, reward, term, trunc, info = fork.step(first["action"] + " (changed)")
    assert info["status"] == Status.DIVERGED.value and Status.DIVERGED.is_infra
    assert (reward, term, trunc, info["outcome"]) == (0.0, False, True, None)
    assert "no recorded next state" in info["next_state"].content
    with pytest.raises(KeyError, match="recorded no episode"):
        env.reset(options={"task_id": "no/such-task"})


def test_a_missing_run_is_one_clear_line(tmp_path):
    p = run_cli("env=replay", f"env.run_dir={tmp_path}/nothing", *COMMON, f"run_dir={tmp_path}/r")
    assert p.returncode != 0 and "holds no turns.jsonl" in p.stderr and "Traceback" not in p.stderr
    p = run_cli("env=replay", *COMMON, f"run_dir={tmp_path}/r2")
    assert p.returncode != 0 and "env.run_dir=RUN" in p.stderr and "Traceback" not in p.stderr
