"""SkyRLGymEnv: SkyRL's text envs (`skyrl-gym` on PyPI) as an AgentEnv.

`env_class` is a skyrl-gym registry id (`gsm8k`, `gsm8k_multi_turn`, `aime`, `text2sql`, ...).
Tasks are rows of a SkyRL dataset (`data`: JSONL or parquet, the format SkyRL's own dataset
scripts write): `prompt` (chat messages), `reward_spec` ({"ground_truth": ...}), optional
`extra_info` and `env_class` (a row's own class wins). Without `data`, the gsm8k family gets the
bundled generator's word problems with decimal answers (envs/toolcall/problems.py), prompted
the way SkyRL's GSM8K script prompts ("... output the final answer after \"####\"").

Each episode makes the row's env (`skyrl_gym.make(env_class, env_config=..., extras=row)`) and
calls its `init(prompt)`; its system messages become the system prompt, the rest the first user
message. `step` returns SkyRL's chat messages: they become the next state (role "tool" when one
is a tool message, else "user"; an empty list at the end reads as the reward). SkyRL rewards are
scores (gsm8k: 1 correct, 0 or a format score otherwise): the outcome is +1 when the final
reward reaches `threshold`, else -1, the raw reward kept in the next state's data; a turn whose
reward reaches `threshold` has verdict +1, a final one below it -1.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from envs.base import AgentEnv, NextState, StepResult, Task
from envs.ecosystem import require
from envs.toolcall import problems
from envs.toolcall.loader import read_rows

skyrl_gym = require("skyrl_gym", "skyrl-gym")

GSM8K = ("gsm8k", "gsm8k_multi_turn")
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'  # SkyRL's GSM8K prompt
_DECIMAL = re.compile(r"-?\d+(\.\d+)?")  # what gsm8k's "#### ANSWER" parser can match


def generated_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """SkyRL gsm8k rows from the bundled word-problem generator (answers gsm8k can parse)."""
    return [{"prompt": [{"role": "user", "content": f"{t.prompt} {INSTRUCTION}"}],
             "reward_spec": {"method": "rule", "ground_truth": t.answer}, "extra_info": {"task_id": t.task_id}}
            for t in problems.generate(n, seed) if _DECIMAL.fullmatch(t.answer)]


class SkyRLGymEnv(AgentEnv):
    """A skyrl-gym text env over a SkyRL dataset; see the module docstring."""

    def __init__(self, env_class: str = "gsm8k", data: str | None = None, n_problems: int = 200, seed: int = 0,
                 env_config: dict | None = None, threshold: float = 1.0, max_turns: int = 10):
        super().__init__(max_turns=max_turns)
        if env_class not in skyrl_gym.registry:
            raise ValueError(f"unknown skyrl-gym env_class {env_class!r}; it has: {', '.join(sorted(skyrl_gym.registry))}")
        if data is None and env_class not in GSM8K:
            raise ValueError(f"env_class={env_class} needs env.data=FILE (a SkyRL dataset: JSONL or parquet rows with "
                             "prompt, reward_spec, extra_info); only gsm8k has bundled problems")
        self.env_class, self.threshold = env_class, float(threshold)
        self.env_config = OmegaConf.create(dict(env_config or {}))
        rows = read_rows(data) if data else generated_rows(int(n_problems), int(seed))
        for i, row in enumerate(rows):
            if not isinstance(row, dict) or not isinstance(row.get("prompt"), list) or "reward_spec" not in row:
                raise ValueError(f"{data}: row {i + 1} is not a SkyRL row (needs a prompt message list and a reward_spec)")
        self._rows = {f"skyrl-{i:05d}": row for i, row in enumerate(rows)}
        self._env: Any = None
        self._system: str | None = None

    # ---- tasks ---------------------------------------------------------------------------
    def task_ids(self) -> list[str]:
        return list(self._rows)

    def _row(self, task_id: str) -> dict[str, Any]:
        try:
            return self._rows[task_id]
        except KeyError:
            raise KeyError(f"unknown skyrl task {task_id!r} (ids look like 'skyrl-00000')") from None

    def _class(self, row: dict[str, Any]) -> str:
        return str(row.get("env_class") or self.env_class)

    def load_task(self, task_id: str) -> Task:
        row = self._row(task_id)
        truth = (row.get("reward_spec") or {}).get("ground_truth")
        oracle = [f"The answer is:\n#### {truth}"] if self._class(row) in GSM8K and truth is not None else []
        return Task(task_id=task_id, prompt="", oracle=oracle, answer=truth, meta={"env_class": self._class(row)})

    # ---- one episode ---------------------------------------------------------------------
    def _start(self, task: Task) -> NextState | None:
        row = self._row(task.task_id)
        extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
        self._env = skyrl_gym.make(self._class(row), env_config=self.env_config, extras=extras)
        prompt, _ = self._env.init([dict(m) for m in row["prompt"]])
        system = [str(m["content"]) for m in prompt if m.get("role") == "system"]
        self._system = "\n\n".join(system) or None
        # The prompt is what the env's init() returns, so it exists only once the env is made.
        self.task = dataclasses.replace(task, prompt="\n\n".join(str(m["content"]) for m in prompt if m.get("role") != "system"))
        return None

    def system_prompt(self) -> str | None:
        return self._system

    def _act(self, action: str) -> StepResult:
        out = self._env.step(action)
        reward, done = float(out["reward"]), bool(out["done"])
        messages = list(out.get("observations") or [])
        data: dict[str, Any] = {"reward": reward, "metadata": out.get("metadata") or {}}
        if reward >= self.threshold:
            data["verdict"] = 1
        elif done:
            data["verdict"] = -1
        role = "tool" if any(m.get("role") == "tool" for m in messages) else "user"
        content = "\n\n".join(str(m.get("content", "")) for m in messages) or f"The episode ended with reward {reward:g}."
        ns = NextState(role, content, "skyrl", data)
        if not done:
            return StepResult(ns)
        return StepResult(ns, done=True, outcome=1.0 if reward >= self.threshold else -1.0)

    def _finish(self) -> None:
        if self._env is not None:
            self._env.close()
        self._env = None

    def random_action(self, rng: np.random.Generator) -> str:
        """gsm8k-style answers, right or wrong, marked or not."""
        assert self.task is not None
        guess = [str(int(rng.integers(-20, 200))), str(self.task.answer)][int(rng.integers(2))]
        return [f"#### {guess}", f"I think it is {guess}.", f"Step by step: ...\n#### {guess}"][int(rng.integers(3))]
