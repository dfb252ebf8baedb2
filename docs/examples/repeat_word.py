"""A plain Gymnasium env that knows nothing of this project (docs/new_env.md, "Bring a plain
Gymnasium env"): `env=custom` runs it through envs.gym_adapter. tests/envs/test_new_env_tutorial.py
and tests/envs/test_custom_envs.py run it."""
from __future__ import annotations

import gymnasium
from gymnasium import spaces

WORDS = ("apple", "river", "stone", "cloud")


class RepeatWordEnv(gymnasium.Env):
    """Repeat the word shown, `turns` times; reward 1 per exact repeat; info has a verdict and a hint."""

    def __init__(self, turns: int = 2) -> None:
        self.turns = int(turns)
        self.observation_space, self.action_space = spaces.Text(64), spaces.Text(16)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.word, self.t = WORDS[int(self.np_random.integers(len(WORDS)))], 0
        return f"Repeat: {self.word}", {}

    def step(self, action: str):
        self.t += 1
        ok = action.strip() == self.word
        info = {"verdict": 1 if ok else -1, "hint": "" if ok else f"Reply with exactly {self.word}."}
        return f"Repeat: {self.word}", float(ok), False, self.t >= self.turns, info
