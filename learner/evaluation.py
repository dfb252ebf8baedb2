"""Held-out evaluation between updates: the paper's personalization score.

An env that offers `held_out_tasks()` and `personalization_score(task, first_response)` (the
chat_sim env does) is scored on the policy's first response to each held-out task, rendered
exactly as the env would present it. The figure is logged as `personalization` in the row of
the step it precedes: row k is the policy after k updates (a last row holds the final one).
"""
from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import numpy as np

from agent.chat import ChatRenderer
from agent.policy.base import PolicyClient, SamplingParams
from envs.base import AgentEnv


def supports_heldout(env: AgentEnv) -> bool:
    return callable(getattr(env, "held_out_tasks", None)) and callable(getattr(env, "personalization_score", None))


class HeldOutEvaluator:
    def __init__(self, env: AgentEnv, client: PolicyClient, renderer: ChatRenderer, sampling: SamplingParams,
                 n_tasks: int = 16, concurrency: int = 16) -> None:
        self.env = env
        self.client = client
        self.renderer = renderer
        self.sampling = dataclasses.replace(sampling, stop_token_ids=sorted(set(sampling.stop_token_ids) | set(renderer.stop_token_ids)))
        self.tasks = env.held_out_tasks(n_tasks)
        self.sem = asyncio.Semaphore(concurrency)

    async def _one(self, i: int, task: Any) -> float:
        messages = []
        sp = self.env.system_prompt()
        if sp:
            messages.append({"role": "system", "content": sp})
        messages.append({"role": "user", "content": task.prompt})
        async with self.sem:
            # one seed per held-out task: a fixed draw per task, different across tasks
            sampling = dataclasses.replace(self.sampling, seed=(self.sampling.seed or 0) * 1000 + i)
            out = await self.client.generate(self.renderer.render_prompt(messages, self.env.tools()), sampling)
        text = self.renderer.response_text(out.output_ids)
        return float(await asyncio.to_thread(self.env.personalization_score, task, text))

    async def __call__(self) -> dict[str, Any]:
        scores = await asyncio.gather(*(self._one(i, t) for i, t in enumerate(self.tasks)))
        return {"personalization": float(np.mean(scores)) if scores else None, "personalization_n": len(scores)}
