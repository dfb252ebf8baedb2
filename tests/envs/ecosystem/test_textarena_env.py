"""env=textarena on real TextArena games: a scripted solver through the Runner, refused moves,
a two-player game against the scripted opponent, and the CLI (random policy)."""
from __future__ import annotations

import asyncio
import json

import pytest

from agent.actors import Action
from agent.rollout import EpisodeJob, Runner
from envs.base import NextState
from envs.ecosystem import require
from tests.cli import run_cli

pytest.importorskip("textarena", reason="optional extra textarena not installed: .venv/bin/pip install -r requirements-extras.txt")
from envs.ecosystem.textarena import TextArenaEnv, listed_moves  # noqa: E402


class BinarySearch:
    """GuessTheNumber (1..20) solved from the game's own "higher" / "lower" next states."""

    def begin(self, env, messages, tools) -> None:
        assert "between 1 and 20" in messages[-1]["content"]
        self.lo, self.hi, self.guess = 1, 20, 0

    async def act(self) -> Action:
        self.guess = (self.lo + self.hi) // 2
        return Action(text=f"I guess [{self.guess}]")

    def observe(self, action: Action, next_state: NextState) -> None:
        if "higher" in next_state.content:
            self.lo = self.guess + 1
        elif "lower" in next_state.content:
            self.hi = self.guess - 1

    async def end(self) -> None:
        pass


def test_a_scripted_solver_wins_every_guess_the_number_game_through_the_runner():
    runner = Runner(lambda: TextArenaEnv(game="GuessTheNumber-v0", n_tasks=6), lambda job: BinarySearch(), n_envs=1, progress=False)
    jobs = [EpisodeJob(episode_id=f"e{i}", task_id=f"seed-{i:05d}", group_id=f"g{i}", seed=i) for i in range(6)]
    try:
        episodes = asyncio.run(runner.run(jobs))
    finally:
        runner.close()
    assert [ep.outcome for ep in episodes] == [1.0] * 6  # the game's reward for a win
    for ep in episodes:
        assert all(t.status == "ok" for t in ep.turns) and 1 <= len(ep.turns) <= 5  # log2(20) guesses suffice
        assert ep.turns[-1].next_state.data["reason"].startswith("Congratulations")
        assert all("I guess" not in t.next_state.content for t in ep.turns)  # the agent's own move is not echoed
    # different seeds are different games
    assert len({tuple(t.action for t in ep.turns) for ep in episodes}) > 1


def test_a_refused_move_is_invalid_action_and_the_game_decides_when_it_ends():
    env = TextArenaEnv(game="GuessTheNumber-v0")
    env.reset(options={"task_id": "seed-00000"})
    _, reward, done, _, info = env.step("no move here")
    assert info["status"] == "invalid_action" and info["next_state"].data["verdict"] == -1 and not done
    assert "invalid move" in info["next_state"].content.lower()
    _, reward, done, _, info = env.step("still none")  # TextArena allows one error, then the game ends
    assert done and info["status"] == "invalid_action" and info["outcome"] == reward
    assert "Invalid Move" in info["next_state"].data["reason"]


def test_tic_tac_toe_against_the_scripted_opponent_ends_with_the_games_result():
    env = TextArenaEnv(game="TicTacToe-v0")
    assert env.num_players == 2
    outcomes = []
    for i in range(4):
        obs, _ = env.reset(options={"task_id": f"seed-{i:05d}"})
        assert "Available Moves" in obs
        done, turns = False, 0
        while not done:
            move = listed_moves(obs.split("\n\n"))[0]  # the first free cell the game lists
            obs, reward, done, truncated, info = env.step(f"I play {move}")
            assert info["status"] == "ok" and not truncated
            turns += 1
            if not done:
                assert "Player 1:" in obs and "Available Moves" in obs  # the opponent's move, then the board
        outcomes.append(info["outcome"])
        assert info["outcome"] in (-1.0, 0.0, 1.0) and turns <= 5
    assert 1.0 in outcomes  # first-free-cell beats a random opponent now and then


class FirstListed:
    """An opponent given as env.opponent=module:Class with options: the first move listed to it."""

    def __init__(self, say: str = "") -> None:
        self.say = say

    def __call__(self, observation: str) -> str:
        return f"{self.say} {listed_moves(observation.split(chr(10) * 2))[0]}"


def test_a_callable_opponent_with_options_plays_the_other_seat():
    env = TextArenaEnv(game="TicTacToe-v0", opponent="tests.envs.ecosystem.test_textarena_env:FirstListed", opponent_options={"say": "I take"})
    obs, _ = env.reset(options={"task_id": "seed-00000"})
    done, outcome = False, None
    while not done:  # both take the first free cell: O 0, X 1, O 2, X 3, O 4, X 5, O 6 wins on the 2-4-6 diagonal
        obs, _, done, _, info = env.step(listed_moves(obs.split("\n\n"))[0])
        if not done:
            assert "Player 1: I take [" in obs
    assert info["outcome"] == 1.0 and env.turn == 4
    with pytest.raises(ValueError, match="env.opponent='nope': give random or module:callable"):
        TextArenaEnv(game="TicTacToe-v0", opponent="nope")


def test_bad_options_and_a_missing_library_are_one_line():
    with pytest.raises(ValueError, match="unknown TextArena game 'NoSuchGame-v0'"):
        TextArenaEnv(game="NoSuchGame-v0")
    with pytest.raises(ValueError, match="seats 0..0"):
        TextArenaEnv(game="GuessTheNumber-v0", player=1)
    with pytest.raises(ImportError, match="not installed .*pip install -r requirements-extras.txt"):
        require("no_such_library_xyz", "no-such-library")


@pytest.mark.slow  # a CLI process: ~45-80 s on a loaded 2-core machine
def test_textarena_runs_through_the_cli(tmp_path):
    run_dir = tmp_path / "run"
    p = run_cli("env=textarena", "env.game=TicTacToe-v0", "policy=random", "mode=eval", "n_envs=2", "steps=1",
                "tasks_per_step=2", "group_size=2", "eval.every=0", f"run_dir={run_dir}")
    assert p.returncode == 0, p.stderr[-2000:]
    row = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert row["episodes"] == 4 and -1.0 <= row["outcome_mean"] <= 1.0
    assert set(row["status_counts"]) <= {"ok", "invalid_action"} and row["status_counts"].get("ok")
    turns = [json.loads(line) for line in (run_dir / "turns.jsonl").read_text().splitlines()]
    assert all(t["next_state"]["kind"] == "game" for t in turns)
    p = run_cli("env=textarena", "env.game=NoSuchGame-v0", "policy=random", "mode=eval", f"run_dir={tmp_path}/r2")
    assert p.returncode != 0 and "unknown TextArena game" in p.stderr and "Traceback" not in p.stderr
