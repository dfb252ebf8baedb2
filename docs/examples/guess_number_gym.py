"""The new-env tutorial's first example (docs/new_env.md): guess the number, written the way every
Gymnasium env is written, with its own `reset` and `step`. The hook-based version of the same env
(named tasks, an oracle) is guess_number.py. tests/envs/test_new_env_tutorial.py runs both.
"""
from __future__ import annotations

import re

from envs.base import AgentEnv


class GuessNumberGymEnv(AgentEnv):
    """Find a number from 1 to `high`: each reply is "Higher." or "Lower." until the agent hits it."""

    def __init__(self, high: int = 16, max_turns: int = 6) -> None:
        super().__init__(max_turns=max_turns)
        self.high = int(high)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)  # seeds self.np_random, as Gymnasium asks
        self.secret = int(self.np_random.integers(1, self.high + 1))
        self.low, self.top, self.t = 1, self.high, 0  # the range the secret can still be in
        return f"I am thinking of a number from 1 to {self.high}. Guess it: reply with one number per message.", {}

    def step(self, action: str):
        self.t += 1
        out_of_turns = self.t >= self.max_turns
        m = re.search(r"-?\d+", action)
        if m is None:  # not understood: a wasted turn, and a hint of what to do instead
            info = {"verdict": -1, "hint": f"Reply with one number, e.g. {(self.low + self.top) // 2}."}
            return "Please reply with a number.", -1.0 if out_of_turns else 0.0, False, out_of_turns, info
        guess = int(m.group())
        if guess == self.secret:
            return "Yes, that's it!", 1.0, True, False, {"verdict": 1}
        useful = self.low <= guess <= self.top  # a guess outside the known range wastes a turn
        if guess < self.secret:
            self.low = max(self.low, guess + 1)
        else:
            self.top = min(self.top, guess - 1)
        info = {"verdict": 1 if useful else -1}
        if not useful:
            info["hint"] = f"The number is between {self.low} and {self.top}; guess the middle, {(self.low + self.top) // 2}."
        reply = "Higher." if guess < self.secret else "Lower."
        return reply, -1.0 if out_of_turns else 0.0, False, out_of_turns, info
