"""Token-in/token-out rollouts through the real engine over real HTTP (tiny model)."""
from __future__ import annotations

import asyncio

import pytest

from agent.actors import ModelActor
from agent.chat import ChatRenderer
from agent.policy.base import SamplingParams
from agent.policy.engine import Engine
from agent.policy.server import serve
from agent.policy.sglang_client import SGLangClient
from agent.rollout import EpisodeJob, Runner
from tests.toy_envs import ChatterEnv


@pytest.fixture(scope="module")
def served():
    engine = Engine("tiny", dtype="float32", seed=0)
    server = serve(engine)
    yield engine, server
    server.stop()
    engine.close()


def _rollouts(served, n: int, max_new_tokens: int = 12):
    engine, server = served
    renderer = ChatRenderer(engine.tokenizer)

    async def go():
        client = SGLangClient(server.url, api_key=server.api_key)
        runner = Runner(lambda: ChatterEnv(max_turns=4), lambda j: ModelActor(
            client, renderer, SamplingParams(max_new_tokens=max_new_tokens, seed=j.seed), max_context=4096),
            n_envs=4, progress=False)
        try:
            return await runner.run([EpisodeJob(f"e{i}", "chat", f"g{i}", seed=i) for i in range(n)])
        finally:
            runner.close()
            await client.aclose()

    return asyncio.run(go()), renderer


def test_prefix_invariant_in_every_multi_turn_episode(served):
    episodes, renderer = _rollouts(served, 8)
    for ep in episodes:
        assert ep.status == "ok" and len(ep.turns) == 4
        for a, b in zip(ep.turns, ep.turns[1:]):
            head = a.prompt_ids + a.response_ids
            assert b.prompt_ids[: len(head)] == head
            # what follows is exactly the observation delta of a's next state
            delta = renderer.observation_delta({"role": a.next_state.role, "content": a.next_state.content}, a.response_ids)
            assert b.prompt_ids[len(head):] == delta


def test_turns_carry_sampler_ids_logprobs_and_version(served):
    episodes, renderer = _rollouts(served, 4)
    engine, _ = served
    for t in (t for ep in episodes for t in ep.turns):
        assert len(t.rollout_logprobs) == len(t.response_ids) > 0
        assert all(lp <= 0.0 for lp in t.rollout_logprobs)
        assert t.policy_version == engine.weight_version
        assert t.finish_reason in ("stop", "length")
        assert t.action == renderer.response_text(t.response_ids)
    first = episodes[0].turns[0]
    assert first.prompt_ids == renderer.render_prompt(first.messages, first.tools)


def test_context_limit_ends_episode_with_failure_outcome(served):
    engine, server = served
    renderer = ChatRenderer(engine.tokenizer)

    async def go():
        client = SGLangClient(server.url, api_key=server.api_key)
        prompt_len = len(renderer.render_prompt(ChatterEnv().reset()[1]["messages"]))
        runner = Runner(lambda: ChatterEnv(max_turns=50), lambda j: ModelActor(
            client, renderer, SamplingParams(max_new_tokens=16), max_context=prompt_len + 60), n_envs=1, progress=False)
        try:
            return await runner.run([EpisodeJob("e", "chat", "g", seed=0)])
        finally:
            runner.close()
            await client.aclose()

    ep = asyncio.run(go())[0]
    assert ep.status == "ok" and ep.outcome == -1.0 and 1 <= len(ep.turns) < 50
    assert all(len(t.prompt_ids) + len(t.response_ids) <= ep.turns[0].prompt_ids.__len__() + 60 for t in ep.turns)
