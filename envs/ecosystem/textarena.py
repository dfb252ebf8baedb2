"""TextArenaEnv: TextArena's games (`textarena` on PyPI) as an AgentEnv.

`game` is a TextArena env id (`GuessTheNumber-v0`, `Wordle-v0`, `TicTacToe-v0`, ...). Task
`seed-00042` is the game reset with seed 42 (+ `seed`). The agent is player `player`; in games
for two or more players every other seat is played by `opponent`: `random` (a scripted player
that picks one of the moves the game lists to it, e.g. TicTacToe's "Available Moves", and else
repeats a bracketed example from its rules: a weak baseline) or `module:callable`, any callable
from the text a player sees to its move (a class is built with `opponent_options`), such as
one of TextArena's own agents (`textarena.agents:OpenAIAgent`; those need an LLM endpoint,
which is why no TextArena agent is the default).

The game's own env is driven without TextArena's LLM wrappers, so each next state carries only
the messages that are new to the agent (the chat already holds the earlier ones), the agent's
own move left out. A move the game refuses is status invalid_action (verdict -1); the game's
error allowance decides whether the agent may retry. The outcome is the game's reward for the
agent's seat (+1 win, -1 loss, 0 draw; single-player games may give partial credit).
TextArena seeds Python's global `random` at reset, so games are reproducible per seed only when
one env resets at a time.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable

import numpy as np
from gymnasium.envs.registration import load_env_creator

from envs.base import AgentEnv, NextState, Status, StepResult, Task
from envs.ecosystem import require

ta = require("textarena", "textarena")

MAX_OTHER_MOVES = 1000  # opponents' moves between two agent moves before the game counts as stuck
_MOVE = re.compile(r"\[[^\[\]\n]{1,40}\]")


def listed_moves(messages: list[str]) -> list[str]:
    """The bracketed moves in the newest message that lists two or more (a game's move list),
    else every bracketed move anywhere (examples in the rules)."""
    for text in reversed(messages):
        moves = _MOVE.findall(text)
        if len(moves) >= 2:
            return moves
    return [m for text in messages for m in _MOVE.findall(text)]


class RandomOpponent:
    """A scripted player: a random move among those the game lists to it ("[0]" if none)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def __call__(self, observation: str) -> str:
        moves = listed_moves(observation.split("\n\n")) or ["[0]"]
        return str(moves[int(self.rng.integers(len(moves)))])


class TextArenaEnv(AgentEnv):
    """A TextArena game; see the module docstring."""

    def __init__(self, game: str = "GuessTheNumber-v0", n_tasks: int = 500, seed: int = 0, player: int = 0,
                 num_players: int | None = None, opponent: str = "random", opponent_options: dict | None = None,
                 max_turns: int = 50):
        super().__init__(max_turns=max_turns)
        if game not in ta.envs.registration.ENV_REGISTRY:
            raise ValueError(f"unknown TextArena game {game!r}; e.g. GuessTheNumber-v0, Wordle-v0, TicTacToe-v0 "
                             "(all: textarena.envs.registration.ENV_REGISTRY)")
        self.game, self.n_tasks, self.seed, self.player = game, int(n_tasks), int(seed), int(player)
        self.num_players = int(num_players) if num_players else self._fewest_players()
        if not 0 <= self.player < self.num_players:
            raise ValueError(f"env.player={self.player}: {game} with {self.num_players} players has seats 0..{self.num_players - 1}")
        self._opponent = self._opponent_maker(opponent, dict(opponent_options or {}))
        self._env: Any = None
        self._opponents: dict[int, Callable[[str], str]] = {}
        self._heard: dict[int, list[str]] = {}  # every message each seat has seen, as text

    # ---- setup ---------------------------------------------------------------------------
    def _make(self) -> Any:
        """The game's own env: TextArena's default wrappers (which re-render the whole history
        each turn) taken off."""
        env = ta.make(self.game)
        while isinstance(env, ta.Wrapper):
            env = env.env
        return env

    def _fewest_players(self) -> int:
        for n in (1, 2):  # TextArena's states assert their player count at reset
            try:
                self._make().reset(num_players=n, seed=0)
                return n
            except (AssertionError, ValueError):
                continue
        raise ValueError(f"{self.game} takes neither 1 nor 2 players; give env.num_players=N")

    def _opponent_maker(self, opponent: str, options: dict[str, Any]) -> Callable[[int], Callable[[str], str]]:
        if opponent == "random":
            return RandomOpponent
        try:
            made = load_env_creator(opponent)
        except (ValueError, ImportError, AttributeError) as e:
            raise ValueError(f"env.opponent={opponent!r}: give random or module:callable ({e})") from None
        if isinstance(made, type):
            return lambda seed: made(**options)
        return lambda seed: made

    # ---- tasks ---------------------------------------------------------------------------
    def task_ids(self) -> list[str]:
        return [f"seed-{i:05d}" for i in range(self.n_tasks)]

    def load_task(self, task_id: str) -> Task:
        try:
            index = int(task_id.removeprefix("seed-"))
        except ValueError:
            raise KeyError(f"unknown TextArena task {task_id!r} (ids look like 'seed-00042')") from None
        return Task(task_id=task_id, prompt="", meta={"game": self.game, "seed": self.seed + index})

    # ---- one game ------------------------------------------------------------------------
    def _start(self, task: Task) -> NextState | None:
        self._env = self._make()
        self._env.reset(num_players=self.num_players, seed=task.meta["seed"])
        self._heard = {pid: [] for pid in range(self.num_players)}
        self._opponents = {pid: self._opponent(task.meta["seed"] * 7919 + pid)
                           for pid in range(self.num_players) if pid != self.player}
        self._play_others()
        # The game's first observation is the prompt; it exists only once the game is reset.
        self.task = dataclasses.replace(task, prompt=self._news())
        return None

    def _drain(self, pid: int) -> list[tuple[int, str, Any]]:
        """The messages seat `pid` has not read yet (TextArena hands them out once)."""
        state = self._env.state
        msgs, state.observations[pid] = state.observations[pid], []
        self._heard[pid].extend(self._line(m) for m in msgs)
        return msgs

    def _line(self, msg: tuple[int, str, Any]) -> str:
        sender, text, _ = msg
        if sender == ta.GAME_ID:
            return text
        # "Player 1: [4]", not TextArena's "[Player 1] [4]": a bracketed name would read as a move
        return f"{self._env.state.role_mapping.get(sender, f'Player {sender}')}: {text}"

    def _news(self) -> str:
        """What is new to the agent, its own move (already in the chat) left out."""
        msgs = [m for m in self._drain(self.player)
                if not (m[0] == self.player and m[2] == ta.ObservationType.PLAYER_ACTION)]
        return "\n\n".join(self._line(m) for m in msgs)

    def _play_others(self) -> None:
        state = self._env.state
        for _ in range(MAX_OTHER_MOVES):
            if state.done or state.current_player_id == self.player:
                return
            pid = state.current_player_id
            self._drain(pid)
            self._env.step(str(self._opponents[pid]("\n\n".join(self._heard[pid]))))
        raise RuntimeError(f"{self.game}: the opponents made {MAX_OTHER_MOVES} moves without giving the agent a turn")

    def _act(self, action: str) -> StepResult:
        state = self._env.state
        self._env.step(action)
        # A refused move within the game's error allowance leaves error_count > 0 (a valid one
        # resets it); past the allowance the game ends with the seat's invalid_move flag set.
        invalid = getattr(state, "error_count", 0) > 0 or bool(state.game_info[self.player].get("invalid_move"))
        self._play_others()
        data: dict[str, Any] = {"game": self.game, "invalid_move": invalid}
        if invalid:
            data["verdict"] = -1
        status = Status.INVALID_ACTION if invalid else Status.OK
        content = self._news()
        if not state.done:
            return StepResult(NextState("user", content, "game", data), status)
        rewards = state.rewards or {}
        reason = state.game_info[self.player].get("reason")
        outcome = float(rewards[self.player]) if self.player in rewards else self.fail_outcome
        data.update(rewards={str(k): v for k, v in rewards.items()}, reason=reason)
        end = f"Game over: {reason}" if reason else "Game over."
        return StepResult(NextState("user", f"{content}\n\n{end}".strip(), "game", data), status, done=True, outcome=outcome)

    def _finish(self) -> None:
        self._env = None

    def random_action(self, rng: np.random.Generator) -> str:
        """Mostly a move the game listed to the agent, sometimes a reply that is no move."""
        moves = listed_moves(self._heard.get(self.player, []))
        if not moves or rng.random() < 0.2:
            return "I am not sure what to play."
        return str(moves[int(rng.integers(len(moves)))])
