"""The runner: concurrency, oracle/random actors, deadlines, failures, cleanup."""
from __future__ import annotations

import asyncio

from agent.actors import OracleActor, RandomActor
from agent.rollout import EpisodeJob, Runner
from tests.toy_envs import CountdownEnv, InfraFailEnv


def _jobs(n: int, task: str = "n3") -> list[EpisodeJob]:
    return [EpisodeJob(episode_id=f"e{i}", task_id=task, group_id=f"g{i // 2}", seed=i) for i in range(n)]


def _run(runner: Runner, jobs: list[EpisodeJob]):
    try:
        return asyncio.run(runner.run(jobs))
    finally:
        runner.close()


def test_oracle_episodes_succeed_and_reuse_envs():
    made: list[CountdownEnv] = []

    def make() -> CountdownEnv:
        made.append(CountdownEnv())
        return made[-1]

    eps = _run(Runner(make, lambda j: OracleActor(), n_envs=3, progress=False), _jobs(10))
    assert [e.outcome for e in eps] == [1.0] * 10
    assert all(e.status == "ok" and len(e.turns) == 3 for e in eps)
    assert [t.step_index for t in eps[0].turns] == [0, 1, 2]
    assert all(t.outcome == 1.0 for e in eps for t in e.turns)
    assert [t.episode_done for t in eps[0].turns] == [False, False, True]
    assert eps[0].turns[1].next_state.kind == "user_reply"
    assert 1 <= len(made) <= 3  # at most n_envs envs, reused across episodes
    assert all(env.closed for env in made)  # close() reached every env


def test_each_run_hands_its_turns_to_its_own_sink_only():
    handed: list = []

    async def sink(turn) -> None:  # a coroutine sink is awaited before the episode goes on
        handed.append(turn)

    async def go(runner: Runner):
        first = await runner.run(_jobs(2), on_turn=sink)
        assert sorted(map(id, handed)) == sorted(id(t) for e in first for t in e.turns)  # every turn, once
        n = len(handed)
        await runner.run(_jobs(2))  # no sink: the next run hands nothing on (as the held-out evaluation)
        return n

    runner = Runner(CountdownEnv, lambda j: OracleActor(), n_envs=2, progress=False)
    try:
        n = asyncio.run(go(runner))
    finally:
        runner.close()
    assert n == 6 and len(handed) == 6  # 2 episodes x 3 turns, each once


def test_messages_grow_with_each_turn():
    eps = _run(Runner(CountdownEnv, lambda j: OracleActor(), n_envs=1, progress=False), _jobs(1))
    t0, t1 = eps[0].turns[:2]
    assert t1.messages[: len(t0.messages)] == t0.messages
    assert t1.messages[len(t0.messages):] == [{"role": "assistant", "content": "3"}, {"role": "user", "content": "Good, go on."}]


def test_random_actions_never_crash_the_runner():
    eps = _run(Runner(CountdownEnv, lambda j: RandomActor(j.seed), n_envs=4, progress=False), _jobs(40, "n5"))
    assert all(e.status == "ok" and e.outcome in (1.0, -1.0) for e in eps)


def test_step_timeout_ends_episode_with_timeout_status_and_replaces_env():
    made: list[CountdownEnv] = []

    def make() -> CountdownEnv:
        made.append(CountdownEnv(hang_s=3.0))
        return made[-1]

    class HangOnce(OracleActor):
        async def act(self):
            a = await super().act()
            a.text = "hang " + a.text
            return a

    runner = Runner(make, lambda j: HangOnce(), n_envs=1, step_timeout_s=0.5, progress=False)
    eps = _run(runner, _jobs(2))
    for e in eps:
        assert e.status == "timeout" and e.timeout == "step" and e.outcome is None
        assert e.turns[-1].status == "timeout" and e.turns[-1].next_state.data["timeout"] == "step"
    assert len(made) == 2  # the hung env was not handed to the next episode


def test_episode_timeout_says_which_deadline_fired():
    class Slow(OracleActor):
        async def act(self):
            await asyncio.sleep(0.4)
            return await super().act()

    eps = _run(Runner(CountdownEnv, lambda j: Slow(), n_envs=1, step_timeout_s=5, episode_timeout_s=0.6, progress=False), _jobs(1))
    assert eps[0].status == "timeout" and eps[0].timeout == "episode" and eps[0].outcome is None


def test_env_exception_is_infra_error_not_reward_zero():
    class Crash(OracleActor):
        async def act(self):
            a = await super().act()
            if self.env.turn == 1:
                a.text = "crash"
            return a

    made: list[CountdownEnv] = []

    def make() -> CountdownEnv:
        made.append(CountdownEnv())
        return made[-1]

    eps = _run(Runner(make, lambda j: Crash(), n_envs=1, progress=False), _jobs(2))
    for e in eps:
        assert e.status == "infra_error" and e.outcome is None
        assert e.turns[-1].status == "infra_error"
        assert all(t.outcome is None for t in e.turns)
    assert len(made) == 2  # the broken env was replaced, not reused


def test_env_reported_infra_error_ends_episode_without_outcome():
    eps = _run(Runner(InfraFailEnv, lambda j: OracleActor(), n_envs=1, progress=False), _jobs(1))
    assert eps[0].status == "infra_error" and eps[0].outcome is None and eps[0].turns[-1].status == "infra_error"


def test_policy_failure_is_infra_error_and_keeps_env():
    class Broken(OracleActor):
        async def act(self):
            raise ConnectionError("policy server went away")

    made: list[CountdownEnv] = []

    def make() -> CountdownEnv:
        made.append(CountdownEnv())
        return made[-1]

    eps = _run(Runner(make, lambda j: Broken(), n_envs=1, progress=False), _jobs(3))
    assert all(e.status == "infra_error" and "policy" in e.error for e in eps)
    assert len(made) == 1
