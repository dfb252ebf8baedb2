"""The rollout runner: many concurrent episodes against one policy, each turn recorded exactly.

One asyncio task per episode, bounded by `n_envs` live env instances (docs/architecture.md, "Runner":
this beat Gymnasium's vector envs for agents, whose steps are of uneven length). Env calls run
in a thread pool sized to the env count, off the event loop. Every wait has a deadline: a step
timeout and an episode timeout, and a turn that hits one says which fired. An env that raised
or hung is closed and replaced; its episode ends with status infra_error or timeout and no
outcome, so it never reads as reward 0.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import time
import traceback
from collections import Counter
from typing import Any, Awaitable, Callable

from agent.actors import Action, Actor
from agent.policy.base import PolicyUnavailable
from envs.progress import Progress
from agent.turn import Turn
from envs.base import AgentEnv, NextState, Status, TaskSplit

log = logging.getLogger(__name__)


@dataclasses.dataclass
class EpisodeJob:
    episode_id: str
    task_id: str
    group_id: str
    seed: int


@dataclasses.dataclass
class Episode:
    job: EpisodeJob
    turns: list[Turn]
    outcome: float | None  # None when the episode was cut by infrastructure or a deadline
    status: Status  # ok, or the status that ended it (infra_error, timeout)
    timeout: str | None = None  # which deadline fired: "step" or "episode"
    error: str | None = None
    duration_s: float = 0.0


class _PolicyFailure(Exception):
    """The policy (not the env) failed to produce an action."""


class _Deadline(Exception):
    def __init__(self, which: str, seconds: float) -> None:
        super().__init__(f"{which} timeout after {seconds:.1f}s")
        self.which = which
        self.seconds = seconds


# where a run hands each turn the moment its next state exists (the trainer's scorer)
OnTurn = Callable[[Turn], Awaitable[None] | None]


class Runner:
    """Runs episode jobs with at most `n_envs` envs alive; envs are reused across episodes."""

    def __init__(
        self,
        make_env: Callable[[], AgentEnv],
        make_actor: Callable[[EpisodeJob], Actor],
        n_envs: int,
        step_timeout_s: float = 300.0,
        episode_timeout_s: float = 1800.0,
        progress: bool = True,
        label: str = "rollouts",
    ) -> None:
        self.make_env = make_env
        self.make_actor = make_actor
        self.n_envs = max(1, int(n_envs))
        self.step_timeout_s = step_timeout_s
        self.episode_timeout_s = episode_timeout_s
        self.progress = progress
        self.label = label  # what its progress bar is called ("held-out" for an evaluation's runner)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.n_envs + 2, thread_name_prefix="env")
        self._idle: list[AgentEnv] = []
        self._all: set[AgentEnv] = set()
        self._slots: asyncio.Semaphore | None = None

    # ---- env pool ----------------------------------------------------------------------
    async def _call(self, fn: Callable[..., Any], *args: Any, timeout: float, which: str, **kw: Any) -> Any:
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self._pool, lambda: fn(*args, **kw))
        try:
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            raise _Deadline(which, timeout) from None

    async def _take_env(self) -> AgentEnv:
        if self._idle:
            return self._idle.pop()
        env = await self._call(self.make_env, timeout=self.step_timeout_s, which="step")
        self._all.add(env)
        return env

    async def task_ids(self) -> list[str]:
        """The env's task ids (asks one pooled env)."""
        return list(await self._ask_env(lambda env: env.task_ids()))

    async def task_split(self, n_held_out: int, seed: int) -> TaskSplit:
        """The env's training / held-out split (asks one pooled env; see AgentEnv.task_split)."""
        return await self._ask_env(lambda env: env.task_split(n_held_out, seed))

    async def _ask_env(self, fn: Callable[[AgentEnv], Any]) -> Any:
        env = await self._take_env()
        try:
            return await self._call(fn, env, timeout=self.step_timeout_s, which="step")
        finally:
            self._idle.append(env)

    def _discard(self, env: AgentEnv) -> None:
        """Close an env that failed or hung, without waiting on it."""
        self._all.discard(env)
        self._pool.submit(_close_quietly, env)

    # ---- episodes ----------------------------------------------------------------------
    async def run(self, jobs: list[EpisodeJob], on_turn: OnTurn | None = None) -> list[Episode]:
        """Run `jobs`; each turn goes to `on_turn` the moment its next state exists (awaited if it
        returns a coroutine)."""
        self._slots = asyncio.Semaphore(self.n_envs)
        with Progress(self.label, total=len(jobs), enabled=self.progress) as bar:
            counts: Counter[str] = Counter()

            async def one(job: EpisodeJob) -> Episode:
                assert self._slots is not None
                async with self._slots:
                    ep = await self._episode(job, on_turn)
                counts[ep.status] += 1
                bar.advance(status=" ".join(f"{k}={v}" for k, v in sorted(counts.items())))
                return ep

            return list(await asyncio.gather(*(one(j) for j in jobs)))

    async def _episode(self, job: EpisodeJob, on_turn: OnTurn | None) -> Episode:
        t0 = time.monotonic()
        deadline = t0 + self.episode_timeout_s
        turns: list[Turn] = []
        env: AgentEnv | None = None
        actor: Actor | None = None
        try:
            env = await self._take_env()
            _, info = await self._call(
                env.reset, seed=job.seed, options={"task_id": job.task_id}, timeout=self.step_timeout_s, which="step"
            )
            messages: list[dict[str, Any]] = list(info["messages"])
            tools: list[dict[str, Any]] = list(info.get("tools") or [])
            actor = self.make_actor(job)
            actor.begin(env, messages, tools)
            while True:
                budget, which = self._budget(deadline)
                try:
                    action = await asyncio.wait_for(actor.act(), budget)
                except asyncio.TimeoutError:
                    raise _Deadline(which, budget) from None
                except PolicyUnavailable:  # no later episode can run either: the run stops
                    raise
                except Exception as e:
                    raise _PolicyFailure(f"{type(e).__name__}: {e}") from e
                if action.context_full:
                    return self._finish(job, turns, outcome=env.fail_outcome, status=Status.OK, t0=t0)
                budget, which = self._budget(deadline)
                try:
                    _, _, terminated, truncated, sinfo = await self._call(env.step, action.text, timeout=budget, which=which)
                except _Deadline as d:
                    self._discard(env)
                    env = None
                    turns.append(self._turn(job, turns, action, messages, tools, _harness_state("timeout", str(d), timeout=d.which), Status.TIMEOUT))
                    raise
                except Exception as e:
                    self._discard(env)
                    env = None
                    turns.append(self._turn(job, turns, action, messages, tools, _harness_state("infra_error", f"{type(e).__name__}: {e}"), Status.INFRA_ERROR))
                    raise
                ns: NextState = sinfo["next_state"]
                status = Status(sinfo["status"])
                turn = self._turn(job, turns, action, messages, tools, ns, status)
                turns.append(turn)
                messages = messages + [{"role": "assistant", "content": action.text}, {"role": ns.role, "content": ns.content}]
                actor.observe(action, ns)
                if on_turn is not None:
                    r = on_turn(turn)
                    if asyncio.iscoroutine(r):
                        await r
                if terminated or truncated:
                    if status.is_infra:  # the env gave up under the agent: replace it
                        self._discard(env)
                        env = None
                    return self._finish(job, turns, outcome=sinfo["outcome"], status=status if status.is_infra else Status.OK, t0=t0)
        except _Deadline as d:
            if env is not None:  # a deadline fired in generation: the env itself is fine
                self._idle.append(env)
                env = None
            return self._finish(job, turns, outcome=None, status=Status.TIMEOUT, t0=t0, timeout=d.which, error=str(d))
        except _PolicyFailure as e:  # the env is fine; only this episode is lost
            log.warning("episode %s: policy failed: %s", job.episode_id, e)
            return self._finish(job, turns, outcome=None, status=Status.INFRA_ERROR, t0=t0, error=f"policy: {e}")
        except PolicyUnavailable:
            raise
        except Exception as e:
            log.warning("episode %s failed: %s", job.episode_id, traceback.format_exc())
            if env is not None:
                self._discard(env)
                env = None
            return self._finish(job, turns, outcome=None, status=Status.INFRA_ERROR, t0=t0, error=f"{type(e).__name__}: {e}")
        finally:
            if env is not None:
                self._idle.append(env)
            if actor is not None:
                await self._end(actor, job)

    async def _end(self, actor: Actor, job: EpisodeJob) -> None:
        """Tell the actor the episode is over (bounded: a hung end must not hold the step)."""
        try:
            await asyncio.wait_for(actor.end(), min(self.step_timeout_s, 60.0))
        except Exception as e:  # the episode's record is complete; only the actor's own bookkeeping is lost
            log.warning("episode %s: actor.end() failed: %s: %s", job.episode_id, type(e).__name__, e)

    def _budget(self, deadline: float) -> tuple[float, str]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Deadline("episode", self.episode_timeout_s)
        return (left, "episode") if left < self.step_timeout_s else (self.step_timeout_s, "step")

    @staticmethod
    def _turn(job: EpisodeJob, turns: list[Turn], action: Action, messages: list[dict[str, Any]],
              tools: list[dict[str, Any]], ns: NextState, status: Status) -> Turn:
        return Turn(
            episode_id=job.episode_id, task_id=job.task_id, group_id=job.group_id, step_index=len(turns),
            policy_version=action.policy_version, prompt_ids=action.prompt_ids, response_ids=action.response_ids,
            rollout_logprobs=action.rollout_logprobs, action=action.text, next_state=ns, status=status,
            finish_reason=action.finish_reason, messages=list(messages), tools=tools,
        )

    @staticmethod
    def _finish(job: EpisodeJob, turns: list[Turn], outcome: float | None, status: Status, t0: float,
                timeout: str | None = None, error: str | None = None) -> Episode:
        for t in turns:
            t.outcome = outcome
        if turns:
            turns[-1].episode_done = True
        return Episode(job=job, turns=turns, outcome=outcome, status=status, timeout=timeout, error=error,
                       duration_s=time.monotonic() - t0)

    def close(self) -> None:
        """Close every env this runner made (also the busy ones: called at shutdown)."""
        envs = list(self._all)
        self._all.clear()
        self._idle.clear()
        for f in [self._pool.submit(_close_quietly, e) for e in envs]:
            try:
                f.result(timeout=60)
            except Exception as e:  # closing must go on for the others
                log.warning("closing an env failed: %s", e)
        self._pool.shutdown(wait=False, cancel_futures=True)


def _harness_state(kind: str, message: str, **data: Any) -> NextState:
    return NextState(role="tool", content=f"[harness] {message}", kind=kind, data={"error": message, **data})


def _close_quietly(env: AgentEnv) -> None:
    try:
        env.close()
    except Exception as e:
        log.warning("env.close() raised: %s", e)
