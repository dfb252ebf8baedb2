"""Who picks the actions: a model behind a PolicyClient, the task's oracle, or chance.

All three drive an episode through the same runner. A model actor keeps the episode's token
context: the prompt is rendered once, then grows by the sampled ids and observation deltas.
Oracle and random actors produce text only (their turns carry no token ids).
"""
from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Protocol

import numpy as np

from agent.chat import ChatRenderer
from agent.policy.base import PolicyClient, SamplingParams
from envs.base import AgentEnv, NextState


@dataclasses.dataclass
class Action:
    text: str
    prompt_ids: list[int] = dataclasses.field(default_factory=list)
    response_ids: list[int] = dataclasses.field(default_factory=list)
    rollout_logprobs: list[float] = dataclasses.field(default_factory=list)  # the sampler's, one per response id
    finish_reason: str = ""
    policy_version: int = 0
    context_full: bool = False  # no room left in the context window: the episode must end


class Actor(Protocol):
    """One episode's decision maker. `begin` once, then `act` / `observe` alternately, then
    `end` when the episode is over (however it ended)."""

    def begin(self, env: AgentEnv, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None: ...

    async def act(self) -> Action: ...

    def observe(self, action: Action, next_state: NextState) -> None: ...

    async def end(self) -> None: ...

    def fork(self, env: AgentEnv, seed: int) -> Actor:
        """An actor that continues this episode from where it is now, on `env` (a fork of the
        episode's env), drawing its own samples from `seed` (rollout.branch)."""
        ...


class _NoEnd:
    async def end(self) -> None:
        pass


class ModelActor(_NoEnd):
    def __init__(self, client: PolicyClient, renderer: ChatRenderer, sampling: SamplingParams, max_context: int) -> None:
        self.client = client
        self.renderer = renderer
        self.sampling = dataclasses.replace(
            sampling, stop_token_ids=sorted(set(sampling.stop_token_ids) | set(renderer.stop_token_ids))
        )
        self.max_context = max_context
        self.ids: list[int] = []

    def begin(self, env: AgentEnv, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        self.ids = self.renderer.render_prompt(messages, tools)

    async def act(self) -> Action:
        room = self.max_context - len(self.ids)
        if room <= 0:
            return Action(text="", prompt_ids=list(self.ids), context_full=True, finish_reason="context")
        sampling = dataclasses.replace(self.sampling, max_new_tokens=min(self.sampling.max_new_tokens, room))
        out = await self.client.generate(self.ids, sampling)
        return Action(
            text=self.renderer.response_text(out.output_ids),
            prompt_ids=list(self.ids),
            response_ids=list(out.output_ids),
            rollout_logprobs=list(out.logprobs),
            finish_reason=out.finish_reason,
            policy_version=out.weight_version,
        )

    def observe(self, action: Action, next_state: NextState) -> None:
        delta = self.renderer.observation_delta({"role": next_state.role, "content": next_state.content}, action.response_ids)
        self.ids = action.prompt_ids + action.response_ids + delta

    def fork(self, env: AgentEnv, seed: int) -> ModelActor:
        """The same token context (a branch's first prompt continues its trunk's ids exactly)."""
        actor = ModelActor(self.client, self.renderer, dataclasses.replace(self.sampling, seed=seed), self.max_context)
        actor.ids = list(self.ids)
        return actor


class OracleActor(_NoEnd):
    """Each task's known-good actions (no model): tests every env end to end."""

    def begin(self, env: AgentEnv, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        self.env = env

    async def act(self) -> Action:
        return Action(text=await asyncio.to_thread(self.env.oracle_action))

    def observe(self, action: Action, next_state: NextState) -> None:
        pass

    def fork(self, env: AgentEnv, seed: int) -> OracleActor:
        actor = OracleActor()
        actor.env = env
        return actor


class RandomActor(_NoEnd):
    """Random actions from the env's own generator (seeded per episode)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def begin(self, env: AgentEnv, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        self.env = env

    async def act(self) -> Action:
        return Action(text=self.env.random_action(self.rng))

    def observe(self, action: Action, next_state: NextState) -> None:
        pass

    def fork(self, env: AgentEnv, seed: int) -> RandomActor:
        actor = RandomActor(seed)
        actor.env = env
        return actor
