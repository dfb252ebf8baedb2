"""Small envs defined for the tests: they exercise the runner, the learner and `env=custom`."""
from __future__ import annotations

import os
import time

import gymnasium
import numpy as np
from gymnasium import spaces

from envs.base import AgentEnv, NextState, Status, StepResult, Task


class CountdownEnv(AgentEnv):
    """Say N, N-1, ..., 1, one number per turn. Multi-turn with a known oracle; tasks "n2".."n5"."""

    def __init__(self, max_turns: int = 6, hang_s: float = 0.0) -> None:
        super().__init__(max_turns=max_turns)
        self.hang_s = hang_s
        self.closed = False

    def task_ids(self) -> list[str]:
        return [f"n{k}" for k in range(2, 6)]

    def load_task(self, task_id: str) -> Task:
        n = int(task_id[1:])
        return Task(task_id, f"Count down from {n} to 1, one number per message.", oracle=[str(k) for k in range(n, 0, -1)], answer=n)

    def _start(self, task: Task) -> None:
        self.expect = int(task.answer)

    def _act(self, action: str) -> StepResult:
        if "hang" in action:
            time.sleep(self.hang_s)
        if "crash" in action:
            raise RuntimeError("the toy env's machinery broke")
        if action.strip() != str(self.expect):
            return StepResult(NextState("user", f"No, say {self.expect}.", "user_reply", {"verdict": -1, "hint": f"The next number is {self.expect}."}),
                              done=True, outcome=-1.0)
        self.expect -= 1
        if self.expect == 0:
            return StepResult(NextState("user", "Done, thanks!", "user_reply", {"verdict": 1}), done=True, outcome=1.0)
        return StepResult(NextState("user", "Good, go on.", "user_reply", {"verdict": 1}))

    def random_action(self, rng: np.random.Generator) -> str:
        return str(int(rng.integers(0, 6)))

    def close(self) -> None:
        self.closed = True


class InfraFailEnv(CountdownEnv):
    """Reports an infrastructure failure on its second turn (as a dead sandbox would)."""

    def _act(self, action: str) -> StepResult:
        if self.turn == 1:
            return StepResult(NextState("tool", "sandbox died", "shell", {}), status=Status.INFRA_ERROR)
        return super()._act(action)


class ExitEnv(CountdownEnv):
    """Its process exits on the second turn, as a lost worker would (only for envs in Ray actors)."""

    def _act(self, action: str) -> StepResult:
        if self.turn == 1:
            os._exit(17)
        return super()._act(action)


class ChatterEnv(AgentEnv):
    """Always `max_turns` turns whatever the agent says; next states alternate user and tool
    roles (multi-turn episodes). Outcome +1 if any reply contained a digit; each turn's verdict
    (for the rules judge) is whether that reply did."""

    def task_ids(self) -> list[str]:
        return ["chat"]

    def load_task(self, task_id: str) -> Task:
        return Task(task_id, "Tell me anything.", oracle=["1"] * self.max_turns)

    def _start(self, task: Task) -> None:
        self.seen_digit = False

    def _act(self, action: str) -> StepResult:
        self.seen_digit |= any(c.isdigit() for c in action)
        role = "tool" if self.turn % 2 == 0 else "user"
        verdict = 1 if any(c.isdigit() for c in action) else -1  # for the rules judge
        ns = NextState(role, f"turn {self.turn} heard {len(action)} characters", "tool_result" if role == "tool" else "user_reply",
                       {"verdict": verdict})
        last = self.turn + 1 >= self.max_turns
        return StepResult(ns, done=last, outcome=(1.0 if self.seen_digit else -1.0) if last else None)


class FirstCharEnv(AgentEnv):
    """One turn: +1 when the reply starts with a lowercase ASCII letter, else -1. A random
    byte-level model hits it about one time in ten, so a learner has something to find.
    The next state carries the verdict (and a hint) for the rules judge. `delay_s`: how long each
    turn takes, so a tiny-model run lasts long enough for a test to act between its steps."""

    def __init__(self, max_turns: int = 1, delay_s: float = 0.0) -> None:
        super().__init__(max_turns=max_turns)
        self.delay_s = delay_s

    def task_ids(self) -> list[str]:
        return ["say"]

    def load_task(self, task_id: str) -> Task:
        return Task(task_id, "Say a word.", oracle=["hello"])

    def _act(self, action: str) -> StepResult:
        time.sleep(self.delay_s)
        ok = action[:1].isascii() and action[:1].islower()
        ns = NextState("user", "Nice." if ok else "Start with a lowercase letter.", "user_reply",
                       {"verdict": 1 if ok else -1, "hint": "" if ok else "Begin the reply with a lowercase letter such as 'a'."})
        return StepResult(ns, done=True, outcome=1.0 if ok else -1.0)


class PlainStepAgentEnv(AgentEnv):
    """An AgentEnv subclass written the plain Gymnasium way: its own reset and step, no hooks.
    One turn: reward 1 for a reply that starts with a lowercase letter, else 0; its info
    gives the next state itself."""

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)  # as Gymnasium asks of every env
        return "Say a word.", {}

    def step(self, action: str):
        ok = action[:1].isascii() and action[:1].islower()
        ns = NextState("tool", "ok" if ok else "no", "check", {"verdict": 1 if ok else -1})
        return ns.content, float(ok), True, False, {"next_state": ns}


class DiscreteGymEnv(gymnasium.Env):
    """A Gymnasium env whose actions are not text: it cannot be an agent's env."""

    def __init__(self) -> None:
        self.observation_space = spaces.Discrete(2)
        self.action_space = spaces.Discrete(4)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        return 0, {}

    def step(self, action: int):
        return 0, 0.0, True, False, {}


class HooklessEnv(AgentEnv):
    """An AgentEnv with neither the hooks nor its own reset/step."""


class ResetFailsEnv(CountdownEnv):
    """Every episode fails in reset with the env's own message."""

    def _start(self, task):
        raise ValueError("the data file for this env is missing")


class HalfFailEnv(CountdownEnv):
    """Fails in its first step on every other task (n2 and n4 fail, n3 and n5 run)."""

    def _act(self, action: str):
        assert self.task is not None
        if int(self.task.task_id[1:]) % 2 == 0:
            raise RuntimeError(f"cannot act on {self.task.task_id}")
        return super()._act(action)
