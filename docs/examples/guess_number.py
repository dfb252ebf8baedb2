"""The new-env tutorial's example (docs/new_env.md): guess a secret number, the user says higher or lower.

Everything an env needs is here: the tasks, the oracle, the next state with a verdict and a
hint for the rules judge, and the registration line. tests/envs/test_new_env_tutorial.py runs it.
"""
from __future__ import annotations

import re

import numpy as np

from envs.base import AgentEnv, NextState, Status, StepResult, Task, register


def binary_search(secret: int, high: int) -> list[str]:
    """The known-good guesses for `secret` in 1..high: halve the range each turn."""
    lo, hi, guesses = 1, high, []
    while True:
        mid = (lo + hi) // 2
        guesses.append(str(mid))
        if mid == secret:
            return guesses
        lo, hi = (mid + 1, hi) if mid < secret else (lo, mid - 1)


class GuessNumberEnv(AgentEnv):
    """Find a number from 1 to `high`; each reply is "Higher." or "Lower." until the agent hits it."""

    def __init__(self, high: int = 16, max_turns: int = 6) -> None:
        super().__init__(max_turns=max_turns)
        self.high = int(high)

    # ---- the tasks: one per secret number, each with its oracle ---------------------------
    def task_ids(self) -> list[str]:
        return [f"secret-{n}" for n in range(1, self.high + 1)]

    def load_task(self, task_id: str) -> Task:
        if task_id not in self.task_ids():
            raise KeyError(f"unknown task {task_id!r}; this env has secret-1 .. secret-{self.high}")
        secret = int(task_id.removeprefix("secret-"))
        prompt = f"I am thinking of a number from 1 to {self.high}. Guess it: reply with one number per message."
        return Task(task_id, prompt, oracle=binary_search(secret, self.high), answer=secret)

    # ---- an episode -----------------------------------------------------------------------
    def _start(self, task: Task) -> None:
        self.low, self.top = 1, self.high  # the range the secret can still be in

    def _act(self, action: str) -> StepResult:
        m = re.search(r"-?\d+", action)
        if m is None:  # not understood: the agent's fault, and a process signal for the judge
            return StepResult(NextState("user", "Please reply with a number.", "user_reply",
                                        {"verdict": -1, "hint": f"Reply with one number, e.g. {(self.low + self.top) // 2}."}),
                              status=Status.INVALID_ACTION)
        guess, secret = int(m.group()), int(self.task.answer)
        if guess == secret:
            return StepResult(NextState("user", "Yes, that's it!", "user_reply", {"verdict": 1}), done=True, outcome=1.0)
        useful = self.low <= guess <= self.top  # a guess outside the known range wastes a turn
        reply = "Higher." if guess < secret else "Lower."
        if guess < secret:
            self.low = max(self.low, guess + 1)
        else:
            self.top = min(self.top, guess - 1)
        data = {"verdict": 1 if useful else -1, "low": self.low, "high": self.top}
        if not useful:
            data["hint"] = f"The number is between {self.low} and {self.top}; guess the middle, {(self.low + self.top) // 2}."
        return StepResult(NextState("user", reply, "user_reply", data))

    def random_action(self, rng: np.random.Generator) -> str:
        return str(int(rng.integers(1, self.high + 1)))


# One line makes it `gymnasium.make("openclaw/GuessNumber-v0")` once this module is imported.
register("openclaw/GuessNumber-v0", "docs.examples.guess_number:GuessNumberEnv")
