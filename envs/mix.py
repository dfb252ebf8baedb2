"""A mixture of envs in one run (`env=mix`): each member is an env of its own, built with its own
options (so its own sandboxes and limits), and its task ids are prefixed by the member's name
(`toolcall/17`), so a task (and its group of samples) always belongs to one member, and every
figure can be read per member from the task id (`member_of`). Which member a draw picks is the
run's business (the sampling weights, learner/loop.py); this env only routes each episode.
"""
from __future__ import annotations

from typing import Any, Callable

import gymnasium
import numpy as np

from envs.base import AgentEnv, TaskSplit

SEP = "/"


def member_of(task_id: str) -> str:
    """The member a mixture's task id belongs to."""
    return task_id.partition(SEP)[0]


def draw_weights(weights: dict[str, float], task_ids: list[str]) -> list[float]:
    """Per-task probabilities under which a draw picks member m with probability weights[m]
    (normalised over the members that have tasks here), then one of m's tasks uniformly."""
    counts: dict[str, int] = {}
    for t in task_ids:
        counts[member_of(t)] = counts.get(member_of(t), 0) + 1
    total = sum(weights[m] for m in counts)
    return [weights[member_of(t)] / total / counts[member_of(t)] for t in task_ids]


class MixEnv(AgentEnv):
    """Routes each episode to the member its task id names; members are built when first used."""

    def __init__(self, members: dict[str, Callable[[], AgentEnv]]) -> None:
        super().__init__()
        bad = [name for name in members if not name or SEP in name]
        if not members or bad:
            raise ValueError(f"a mixture needs members with names without {SEP!r} (got {list(members) or 'none'})")
        self.makers = dict(members)
        self.envs: dict[str, AgentEnv] = {}
        self.current: AgentEnv | None = None

    def member(self, name: str) -> AgentEnv:
        if name not in self.makers:
            raise KeyError(f"no member {name!r} in this mixture; members: {', '.join(self.makers)}")
        if name not in self.envs:
            self.envs[name] = self.makers[name]()
        return self.envs[name]

    def task_ids(self) -> list[str]:
        return [f"{name}{SEP}{t}" for name in self.makers for t in self.member(name).task_ids()]

    def task_split(self, n_held_out: int, seed: int) -> TaskSplit:
        """Each member's own split (`n_held_out` of its tasks), prefixed by its name."""
        train, held_out = [], []
        for name in self.makers:
            s = self.member(name).task_split(n_held_out, seed)
            train += [f"{name}{SEP}{t}" for t in s.train]
            held_out += [f"{name}{SEP}{t}" for t in s.held_out]
        return TaskSplit(train, held_out)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        gymnasium.Env.reset(self, seed=seed)  # seeds np_random; the member sets its own episode up
        options = dict(options or {})
        task_id = options.get("task_id")
        if task_id is None:
            ids = self.task_ids()
            task_id = ids[int(self.np_random.integers(len(ids)))]
        name, _, inner = str(task_id).partition(SEP)
        self.current = self.member(name)
        obs, info = self.current.reset(seed=seed, options={**options, "task_id": inner})
        return obs, {**info, "task_id": f"{name}{SEP}{info.get('task_id', inner)}"}

    def step(self, action: str):
        if self.current is None:
            raise RuntimeError("step() called before reset()")
        return self.current.step(action)

    @property
    def fail_outcome(self) -> float:  # the runner reads it when an episode's context fills up
        return self.current.fail_outcome if self.current is not None else AgentEnv.fail_outcome

    def demonstrable(self, task_id: str) -> bool:
        name, _, inner = task_id.partition(SEP)
        return self.member(name).demonstrable(inner)

    def oracle_action(self) -> str:
        assert self.current is not None, "call reset() first"
        return self.current.oracle_action()

    def random_action(self, rng: np.random.Generator) -> str:
        assert self.current is not None, "call reset() first"
        return self.current.random_action(rng)

    def close(self) -> None:
        for env in self.envs.values():
            env.close()
        self.envs.clear()
