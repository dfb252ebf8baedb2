"""cluster=ray: envs in Ray actors behind a proxy give what local envs give; a lost actor is an
infra_error, not a crash; actors are gone after close and after Ctrl-C of the driver."""
from __future__ import annotations

import asyncio
import os
import signal
import textwrap
import time
from contextlib import AsyncExitStack

import pytest
import ray
from hydra import compose, initialize_config_dir

from agent.actors import OracleActor, RandomActor
from agent.rollout import EpisodeJob, Runner
from envs import remote
from experiments.factories import ConfigError, env_factory
from tests.cli import REPO
from tests.ready import start_ready
from tests.toy_envs import CountdownEnv, ExitEnv

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    """One small local Ray cluster for the module (its start costs about 10 s here)."""
    stop = remote.connect(num_cpus=2)
    yield
    stop()


def test_worker_shutdown_releases_what_its_backends_hold(monkeypatch):
    """EnvWorker.shutdown ends the sandboxes every backend the process used registered, each once."""
    import envs.sandbox as sandbox

    calls: list[str] = []
    monkeypatch.setattr(sandbox, "_releasers", [])
    release = lambda: calls.append("released")  # noqa: E731
    sandbox.on_release(release)
    sandbox.on_release(release)  # a second pool of the process subscribes the same sweeper
    remote.EnvWorker(CountdownEnv).shutdown()
    assert calls == ["released"]


def _jobs(tasks: list[str], repeat: int = 1) -> list[EpisodeJob]:
    return [EpisodeJob(episode_id=f"e{i}-{t}", task_id=t, group_id=t, seed=i) for i in range(repeat) for t in tasks]


def _run(make_env, make_actor, jobs, n_envs=2, **kw):
    runner = Runner(make_env, make_actor, n_envs=n_envs, progress=False, **kw)
    try:
        return asyncio.run(runner.run(jobs)), runner
    finally:
        runner.close()


def _summary(eps) -> list[tuple]:
    return [(e.job.task_id, e.status, e.outcome, [(t.action, t.status, t.next_state.content) for t in e.turns]) for e in eps]


def _cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "experiments" / "conf"), version_base=None):
        return compose("config", overrides=["wandb.mode=disabled", *overrides])


def test_oracle_and_random_episodes_match_local_envs():
    jobs = _jobs(["n2", "n3", "n4", "n5"], repeat=2)
    made: list[remote.RemoteEnv] = []

    def make_remote() -> remote.RemoteEnv:
        made.append(remote.RemoteEnv(CountdownEnv, actor_cpus=0.1))
        return made[-1]

    local, _ = _run(CountdownEnv, lambda j: OracleActor(), jobs)
    far, _ = _run(make_remote, lambda j: OracleActor(), jobs)
    assert _summary(far) == _summary(local)
    assert all(e.status == "ok" and e.outcome == 1.0 for e in far)
    assert made and all(env.pid != os.getpid() for env in made)  # the envs really ran elsewhere
    # The actor's generator advances the caller's: random episodes are the same actions as local ones.
    local, _ = _run(CountdownEnv, lambda j: RandomActor(j.seed), jobs)
    far, _ = _run(make_remote, lambda j: RandomActor(j.seed), jobs)
    assert _summary(far) == _summary(local)
    assert len({t.action for e in far for t in e.turns}) > 1


def test_closed_runner_leaves_no_actor():
    made: list[remote.RemoteEnv] = []

    def make() -> remote.RemoteEnv:
        made.append(remote.RemoteEnv(CountdownEnv, actor_cpus=0.1))
        return made[-1]

    _run(make, lambda j: OracleActor(), _jobs(["n2", "n3"]))
    assert made
    for env in made:  # ray.kill is asynchronous: the actor is gone within moments, not at once
        deadline = time.monotonic() + 30
        with pytest.raises(ray.exceptions.RayActorError):
            while time.monotonic() < deadline:
                ray.get(env.actor.describe.remote(), timeout=30)
                time.sleep(0.2)


def test_actor_that_dies_mid_episode_is_an_infra_error():
    eps, _ = _run(remote.remote_factory(ExitEnv, actor_cpus=0.1), lambda j: OracleActor(), _jobs(["n3", "n4", "n5"]))
    assert [e.status for e in eps] == ["infra_error"] * 3
    assert all(e.outcome is None for e in eps)  # never read as a failed task
    for e in eps:
        assert [t.status for t in e.turns] == ["ok", "infra_error"]
        assert "env actor died" in e.turns[-1].next_state.content
    # The env's own exception comes back as itself (a bad task id's ValueError), not as a lost actor.
    env = remote.RemoteEnv(CountdownEnv, actor_cpus=0.1)
    try:
        with pytest.raises(ValueError):
            env.reset(options={"task_id": "nX"})
    finally:
        env.close()


def test_toolcall_env_through_the_factory_matches_local():
    jobs = _jobs(["gen-00000", "gen-00001", "gen-00002"])
    common = ["env=toolcall", "+env.n_problems=3", "sandbox=bwrap", "policy=oracle", "mode=eval"]
    make_local = env_factory(_cfg(*common))
    stack = AsyncExitStack()
    make_far = env_factory(_cfg(*common, "cluster=ray", "cluster.actor_cpus=0.1"), stack=stack)
    assert stack._exit_callbacks  # what stops Ray (a no-op here: the module's cluster was already up)
    local, _ = _run(make_local, lambda j: OracleActor(), jobs)
    far, runner = _run(make_far, lambda j: OracleActor(), jobs)
    assert _summary(far) == _summary(local)
    assert [e.outcome for e in far] == [1.0] * 3


def test_cluster_config_errors_are_one_line():
    with pytest.raises(ConfigError, match="unknown cluster 'slurm'"):
        env_factory(_cfg("env=toolcall", "sandbox=bwrap", "cluster.name=slurm"))
    with pytest.raises(ConfigError, match="cluster=ray cannot run env.user=llm"):
        env_factory(_cfg("env=chat_sim", "env.user=llm", "cluster=ray"))


# A driver with envs in actors: prints the actors' pids, then waits to be interrupted.
DRIVER = textwrap.dedent("""
    import time
    from envs import remote
    from tests.toy_envs import CountdownEnv
    remote.connect(num_cpus=1)
    envs = [remote.RemoteEnv(CountdownEnv, actor_cpus=0.1) for _ in range(2)]
    print("READY", *[e.pid for e in envs], flush=True)
    time.sleep(600)
""")


def test_ctrl_c_of_the_driver_ends_its_actors():
    proc, words = start_ready(DRIVER, within=240, start_new_session=True)
    try:
        pids = [int(p) for p in words]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        deadline = time.monotonic() + 60
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not any(_alive(p) for p in pids)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
