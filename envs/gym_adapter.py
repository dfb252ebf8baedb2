"""Any Gymnasium env whose actions are text, run as an AgentEnv (`env=custom env.entry_point=...`).

The wrapped env knows nothing of this project: its observations become next states (with a
configurable chat role and kind; an `info["next_state"]`, a NextState or its dict, wins when
present), its rewards the outcome (summed over the episode, or the last one), and its info keys
`verdict` / `hint` land in the next state's data, where `judge=rules` reads them. An env without
task ids of its own poses tasks by seed: task `seed-17` is `reset(seed=17)`.

It also runs AgentEnv subclasses that override reset/step the plain Gymnasium way instead of
implementing the hooks (their task ids are used when they define `task_ids`).
"""
from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from envs.base import AgentEnv, NextState, StepResult, Task

SEED_PREFIX = "seed-"
OUTCOMES = ("sum", "last")
#: info keys copied into the next state's data (what generic_verdict and the hint judge read)
SIGNAL_KEYS = ("verdict", "hint")
RANDOM_LENGTH = 64  # longest random action (AgentEnv's own Text space allows a million characters)


def own_task_ids(env: Any) -> list[str] | None:
    """The env's own task ids, or None when it has none (AgentEnv's unimplemented hook counts as none)."""
    fn = getattr(type(env), "task_ids", None)
    if fn is None or fn is AgentEnv.task_ids:
        return None
    return [str(t) for t in env.task_ids()]


class GymAdapter(AgentEnv):
    """Wraps `env_class(**env_options)`; options: `role` and `kind` of the next states, `outcome`
    ("sum" or "last" reward), `n_seeds` (tasks seed-0 .. seed-<n_seeds-1> when the env has no
    task ids), `max_turns` (the episode ends there with the outcome so far)."""

    def __init__(self, env_class: type[gymnasium.Env], env_options: dict[str, Any] | None = None, role: str = "user",
                 kind: str = "observation", outcome: str = "sum", n_seeds: int = 10000, max_turns: int = 100) -> None:
        super().__init__(max_turns=max_turns)
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome={outcome!r}: choose sum (the episode's summed reward) or last (its last reward)")
        if role not in ("user", "tool"):
            raise ValueError(f"role={role!r}: the next state's chat role is user or tool")
        self.inner = env_class(**(env_options or {}))
        if not isinstance(self.inner.action_space, spaces.Text):
            raise ValueError(f"{env_class.__name__}'s action space is {self.inner.action_space}, not text "
                             f"(gymnasium.spaces.Text): an agent's action is the text it writes")
        self.role, self.kind, self.outcome, self.n_seeds = role, kind, outcome, int(n_seeds)
        self._ids = own_task_ids(self.inner)
        self._seed: int | None = None
        self._rewards: list[float] = []

    def task_ids(self) -> list[str]:
        return self._ids if self._ids is not None else [f"{SEED_PREFIX}{n}" for n in range(self.n_seeds)]

    def load_task(self, task_id: str) -> Task:
        if self._ids is None and not (task_id.startswith(SEED_PREFIX) and task_id[len(SEED_PREFIX):].isdigit()):
            raise KeyError(f"unknown task {task_id!r}; {type(self.inner).__name__} poses tasks by seed: seed-0, seed-1, ...")
        return Task(task_id, prompt="")  # the prompt is the first observation, known once the env is reset

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._seed = seed
        return super().reset(seed=seed, options=options)

    def _start(self, task: Task) -> None:
        if self._ids is None:
            obs, _ = self.inner.reset(seed=int(task.task_id[len(SEED_PREFIX):]))
        else:
            obs, _ = self.inner.reset(seed=self._seed, options={"task_id": task.task_id})
        task.prompt = _text(obs)
        self._rewards = []

    def _act(self, action: str) -> StepResult:
        obs, reward, terminated, truncated, info = self.inner.step(action)
        self._rewards.append(float(reward))
        ns = info.get("next_state") if isinstance(info, dict) else None
        if isinstance(ns, dict):
            ns = NextState.from_dict(ns)
        if not isinstance(ns, NextState):
            ns = NextState(self.role, _text(obs), self.kind)
        for key in SIGNAL_KEYS:
            if isinstance(info, dict) and key in info:
                ns.data.setdefault(key, info[key])
        # the inner env's own end, or the turn limit: either way its rewards are the outcome
        done = bool(terminated or truncated) or self.turn + 1 >= self.max_turns
        return StepResult(ns, done=done, outcome=self._outcome() if done else None)

    def _outcome(self) -> float:
        return float(sum(self._rewards)) if self.outcome == "sum" else self._rewards[-1]

    def random_action(self, rng: np.random.Generator) -> str:
        """The inner env's own random action if it has one, else a draw from its Text space of a
        plausible length (the job's seed decides it)."""
        if isinstance(self.inner, AgentEnv) and type(self.inner).random_action is not AgentEnv.random_action:
            return self.inner.random_action(rng)
        space = self.inner.action_space
        space.seed(int(rng.integers(2**31)))
        longest = min(space.max_length, max(space.min_length, RANDOM_LENGTH))
        return space.sample(mask=(int(rng.integers(space.min_length, longest + 1)), None))

    def close(self) -> None:
        self.inner.close()


def _text(obs: Any) -> str:
    return obs if isinstance(obs, str) else str(obs)
