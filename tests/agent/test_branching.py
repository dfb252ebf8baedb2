"""Episode trees (rollout.branch): the runner forks a trunk and runs continuations to the end."""
from __future__ import annotations

import asyncio
import dataclasses
import threading

import pytest

from agent.actors import Action, ModelActor, RandomActor
from agent.branching import Branching
from agent.chat import ChatRenderer
from agent.policy.base import SamplingParams
from agent.rollout import EpisodeJob, Runner
from agent.turn import PRMScore, Turn
from envs.base import ForkError, NextState
from tests.agent.test_tokens import served  # noqa: F401  (the tiny model behind its HTTP server)
from tests.toy_envs import ChatterEnv, CountdownEnv


class TrackedChatter(ChatterEnv):
    """ChatterEnv that records every env made (forks included) and whether it was closed."""

    made: list[TrackedChatter] = []

    def __init__(self, max_turns: int = 3) -> None:
        super().__init__(max_turns=max_turns)
        self.closed = False
        TrackedChatter.made.append(self)

    def fork(self) -> TrackedChatter:
        f = super().fork()
        TrackedChatter.made.append(f)
        return f

    def close(self) -> None:
        self.closed = True


def _run(runner: Runner, jobs: list[EpisodeJob], on_turn=None):
    try:
        return asyncio.run(runner.run(jobs, on_turn=on_turn))
    finally:
        runner.close()


def _jobs(n: int, task: str = "chat") -> list[EpisodeJob]:
    return [EpisodeJob(f"e{i}", task, f"g{i}", seed=i) for i in range(n)]


def test_every_step_forks_k_continuations_and_the_records_keep_the_tree():
    TrackedChatter.made = []
    runner = Runner(TrackedChatter, lambda j: RandomActor(j.seed), n_envs=2, progress=False,
                    branching=Branching(at="every", k=2))
    eps = _run(runner, _jobs(2))
    # each trunk: 3 turns; before steps 0, 1, 2 two continuations of 3, 2, 1 turns
    assert len(eps) == 2 * (1 + 3 * 2)
    for trunk_id in ("e0", "e1"):
        tree = [e for e in eps if e.turns[0].tree_id == trunk_id]
        trunk = [e for e in tree if not e.turns[0].branch_id]
        assert len(trunk) == 1 and [t.step_index for t in trunk[0].turns] == [0, 1, 2]
        by_key = {t.key: t for e in tree for t in e.turns}
        for e in tree:
            first = e.turns[0]
            start = first.step_index
            if first.branch_id:
                assert first.branch_id in {f"b{start}.0", f"b{start}.1"}
                assert e.job.episode_id == f"{trunk_id}/{first.branch_id}" and e.job.seed != trunk[0].job.seed
                # a continuation starts from the trunk's state before its step
                assert first.parent_turn == (f"{trunk_id}/{start - 1}" if start else None)
                assert len(e.turns) == 3 - start and e.turns[-1].episode_done and e.outcome in (-1.0, 1.0)
                assert first.messages == by_key[f"{trunk_id}/{start}"].messages
            for a, b in zip(e.turns, e.turns[1:]):
                assert b.parent_turn == a.key and b.branch_id == a.branch_id and b.step_index == a.step_index + 1
    assert len(TrackedChatter.made) >= 1 + 2 * 3 * 2 and all(env.closed for env in TrackedChatter.made)


def test_every_k_forks_before_every_kth_step_only():
    runner = Runner(lambda: ChatterEnv(max_turns=5), lambda j: RandomActor(j.seed), n_envs=1, progress=False,
                    branching=Branching(at="every_k", k=1, every=2))
    eps = _run(runner, _jobs(1))
    assert sorted(e.turns[0].branch_id for e in eps) == ["", "b0.0", "b2.0", "b4.0"]


def test_disagree_branches_where_the_votes_on_the_trunks_turn_disagree():
    """The runner waits for the scoring of each trunk turn; votes disagree only at step 1 here."""

    async def score(turn: Turn) -> Turn:
        votes = [1, -1, None] if turn.step_index == 1 else [1, 1, None]
        return dataclasses.replace(turn, prm=PRMScore(votes, 1, []))

    def on_turn(turn: Turn):
        return asyncio.create_task(score(turn))

    TrackedChatter.made = []
    runner = Runner(TrackedChatter, lambda j: RandomActor(j.seed), n_envs=1, progress=False,
                    branching=Branching(at="disagree", k=3))
    eps = _run(runner, _jobs(1), on_turn)
    assert sorted(e.turns[0].branch_id for e in eps) == ["", "b1.0", "b1.1", "b1.2"]
    assert all(env.closed for env in TrackedChatter.made)  # the forks of steps 0 and 2 were closed unused


class Unforkable(CountdownEnv):
    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()  # no deep copy takes a lock


def test_an_env_that_cannot_fork_stops_the_run_with_fork_error():
    runner = Runner(Unforkable, lambda j: RandomActor(j.seed), n_envs=1, progress=False, branching=Branching(at="every"))
    with pytest.raises(ForkError, match="cannot fork"):
        _run(runner, _jobs(1, "n3"))


class _HangAt1(RandomActor):
    """Says 'hang' at step 1 (CountdownEnv then sleeps in its step)."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.n = 0

    async def act(self) -> Action:
        self.n += 1
        return Action(text="hang" if self.n == 2 else self.env.oracle_action())

    def fork(self, env, seed):
        actor = _HangAt1(seed)
        actor.env, actor.n = env, self.n
        return actor


def test_forks_are_closed_when_the_run_is_cancelled():
    made: list[CountdownEnv] = []

    class Tracked(CountdownEnv):
        def __init__(self) -> None:
            super().__init__(hang_s=1.5)
            made.append(self)

        def fork(self):
            f = super().fork()
            made.append(f)
            return f

    runner = Runner(Tracked, lambda j: _HangAt1(j.seed), n_envs=1, progress=False, branching=Branching(at="every", k=2))

    async def go():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(runner.run(_jobs(1, "n5")), 0.8)

    try:
        asyncio.run(go())
    finally:
        runner.close()
    assert len(made) >= 3 and all(e.closed for e in made)


def assert_token_invariant(turns: list[Turn], renderer: ChatRenderer) -> int:
    """Every turn's prompt ids are its parent turn's prompt + response ids plus the observation
    delta of the parent's next state, on every path of the tree. Returns the turns checked."""
    by_key = {t.key: t for t in turns}
    checked = 0
    for t in turns:
        if t.parent_turn is None:
            continue
        p = by_key[t.parent_turn]
        delta = renderer.observation_delta({"role": p.next_state.role, "content": p.next_state.content}, p.response_ids)
        assert t.prompt_ids == p.prompt_ids + p.response_ids + delta, t.key
        checked += 1
    return checked


def test_token_invariant_holds_on_every_path_with_the_tiny_model(served):
    from agent.policy.sglang_client import SGLangClient

    engine, server = served
    renderer = ChatRenderer(engine.tokenizer)

    async def go():
        client = SGLangClient(server.url, api_key=server.api_key)
        runner = Runner(lambda: ChatterEnv(max_turns=3), lambda j: ModelActor(
            client, renderer, SamplingParams(max_new_tokens=8, seed=j.seed), max_context=4096),
            n_envs=2, progress=False, branching=Branching(at="every", k=2))
        try:
            return await runner.run(_jobs(2))
        finally:
            runner.close()
            await client.aclose()

    eps = asyncio.run(go())
    turns = [t for e in eps for t in e.turns]
    assert len(eps) == 14 and all(e.status == "ok" for e in eps)
    # per tree: the trunk's 3 turns + continuations of 3, 3, 2, 2, 1, 1 turns = 15 turns; all but
    # the three at step 0 (trunk, b0.0, b0.1) continue a parent
    assert len(turns) == 30 and assert_token_invariant(turns, renderer) == 24
    # a continuation's first turn continues the trunk's prefix, sampled with its own seed
    firsts = [e.turns[0] for e in eps if e.turns[0].branch_id]
    assert len({tuple(t.response_ids) for t in firsts}) > 1
