"""The rollout runner: many concurrent episodes against one policy, each turn recorded exactly.

One asyncio task per episode, bounded by `n_envs` live env instances (docs/architecture.md, "Runner":
this beat Gymnasium's vector envs for agents, whose steps are of uneven length). Env calls run
in a thread pool sized to the env count, off the event loop. Every wait has a deadline: a step
timeout and an episode timeout, and a turn that hits one says which fired. An env that raised
or hung is closed and replaced; its episode ends with status infra_error or timeout and no
outcome, so it never reads as reward 0. With `rollout.branch` (agent/branching.py) a trunk
episode forks its env and actor before chosen steps and runs continuations to the end beside it
(docs/forks.md).
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
from agent.branching import Branching, branch_id, branch_seed, disagree
from agent.policy.base import PolicyUnavailable
from envs.progress import Progress
from agent.turn import Turn
from envs.base import AgentEnv, ForkError, NextState, Status, TaskSplit

log = logging.getLogger(__name__)
# Full tracebacks of failed episodes: not on the console (one line each there); the entry point
# writes them to the run dir's log (experiments/run.py).
TRACEBACKS = logging.getLogger("openclaw.tracebacks")
TRACEBACKS.propagate = False


class EpisodesFailed(RuntimeError):
    """More of a run's episodes failed (env errors, deadlines) than its `max_failed_share`
    allows: the run cannot be trusted to go on. The message names the first error."""


def error_site(e: BaseException) -> str:
    """`Type: message (file:line)`, the line being the innermost frame outside installed
    packages and the standard library: where the user's own code raised."""
    frames = traceback.extract_tb(e.__traceback__)
    own = [f for f in frames if "site-packages" not in f.filename and "/lib/python" not in f.filename]
    where = (own or frames)[-1:]
    site = f" ({where[0].filename}:{where[0].lineno})" if where else ""
    return f"{type(e).__name__}: {e}{site}"


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


# where a run hands each turn the moment its next state exists (the trainer's scorer); it may
# return the task scoring the turn (the scored copy), which rollout.branch.at=disagree awaits
OnTurn = Callable[[Turn], Awaitable[Any] | None]


@dataclasses.dataclass
class _Path:
    """One path of an episode tree: the trunk (env and actor made at its start) or a
    continuation forked before step `start` (its own fork of the env and of the actor)."""

    job: EpisodeJob  # a continuation's: its own episode id and seed
    tree_id: str
    branch_id: str = ""
    start: int = 0
    parent: str | None = None  # the key of the turn before the path's first
    env: AgentEnv | None = None
    actor: Actor | None = None
    messages: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    tools: list[dict[str, Any]] = dataclasses.field(default_factory=list)


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
        branching: Branching = Branching(),
        max_failed_share: float | None = None,
    ) -> None:
        self.make_env = make_env
        self.make_actor = make_actor
        self.n_envs = max(1, int(n_envs))
        self.step_timeout_s = step_timeout_s
        self.episode_timeout_s = episode_timeout_s
        self.progress = progress
        self.label = label  # what its progress bar is called ("held-out" for an evaluation's runner)
        self.branching = branching
        # a run() whose episodes all failed (status infra_error or timeout), or a share above this,
        # raises EpisodesFailed; None: never (the caller reads each episode's status)
        self.max_failed_share = max_failed_share
        # a trunk's forks step beside it: room for k continuations at a few branch points each
        # (threads start only when needed; a call queued here counts against its deadline)
        threads = (self.n_envs + 2) * (1 + 4 * branching.k if branching.on else 1)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="env")
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
        """Close an env that failed or hung, or a fork whose path ended, without waiting on it."""
        self._all.discard(env)
        self._pool.submit(_close_quietly, env)

    # ---- episodes ----------------------------------------------------------------------
    async def run(self, jobs: list[EpisodeJob], on_turn: OnTurn | None = None) -> list[Episode]:
        """Run `jobs`; each turn goes to `on_turn` the moment its next state exists (awaited if it
        returns a coroutine; a task it returns is the turn's scoring, which rollout.branch.at=
        disagree waits for). With rollout.branch each job's trunk episode is followed in the list
        by its continuations' episodes."""
        self._slots = asyncio.Semaphore(self.n_envs)
        with Progress(self.label, total=len(jobs), enabled=self.progress) as bar:
            counts: Counter[str] = Counter()

            async def one(job: EpisodeJob) -> list[Episode]:
                assert self._slots is not None
                async with self._slots:  # a trunk's continuations run inside its slot, on forks of its env
                    eps = await self._episode(_Path(job, tree_id=job.episode_id), on_turn)
                counts[eps[0].status] += 1
                bar.advance(status=" ".join(f"{k}={v}" for k, v in sorted(counts.items())))
                return eps

            episodes = [e for eps in await asyncio.gather(*(one(j) for j in jobs)) for e in eps]
        self._check_failures(episodes)
        return episodes

    def _check_failures(self, episodes: list[Episode]) -> None:
        if self.max_failed_share is None:
            return
        failed = [e for e in episodes if e.status in (Status.INFRA_ERROR, Status.TIMEOUT)]
        all_failed = len(failed) == len(episodes)
        if not failed or (not all_failed and len(failed) <= self.max_failed_share * len(episodes)):
            return
        first = failed[0]
        raise EpisodesFailed(f"{len(failed)} of {len(episodes)} {self.label} episodes failed (max_failed_share="
                             f"{self.max_failed_share:g}); the first, {first.job.episode_id} on task {first.job.task_id}: "
                             f"{first.error or first.status}")

    async def _episode(self, path: _Path, on_turn: OnTurn | None) -> list[Episode]:
        """Run one path to its end: a trunk (a pooled env, reset) or a continuation (its own fork,
        closed at the end). A trunk's continuations run beside it; its episode comes first, then
        theirs. Forks are closed however the path ends (error, deadline, cancellation)."""
        job = path.job
        t0 = time.monotonic()
        deadline = t0 + self.episode_timeout_s
        turns: list[Turn] = []
        env, actor = path.env, path.actor
        branches: list[asyncio.Task[list[Episode]]] = []
        pending: _Path | None = None  # a fork of this step's state, until the step decides on it

        def finish(outcome: float | None, status: Status, **kw: Any) -> Episode:
            return self._finish(job, turns, outcome=outcome, status=status, t0=t0, **kw)

        try:
            if env is None:
                env = await self._take_env()
                _, info = await self._call(
                    env.reset, seed=job.seed, options={"task_id": job.task_id}, timeout=self.step_timeout_s, which="step"
                )
                path.messages = list(info["messages"])
                path.tools = list(info.get("tools") or [])
                actor = self.make_actor(job)
                actor.begin(env, path.messages, path.tools)
            assert actor is not None
            messages, tools = path.messages, path.tools
            while True:
                step = path.start + len(turns)
                if not path.branch_id and self.branching.forks_before(step):
                    pending = await self._fork_path(path, env, actor, turns[-1].key if turns else None, messages, step, 0)
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
                    return [finish(env.fail_outcome, Status.OK)] + await _gathered(branches)
                budget, which = self._budget(deadline)
                try:
                    _, _, terminated, truncated, sinfo = await self._call(env.step, action.text, timeout=budget, which=which)
                except _Deadline as d:
                    self._discard(env)
                    env = None
                    turns.append(self._turn(path, turns, action, messages, tools, _harness_state("timeout", str(d), timeout=d.which), Status.TIMEOUT))
                    raise
                except Exception as e:
                    self._discard(env)
                    env = None
                    turns.append(self._turn(path, turns, action, messages, tools, _harness_state("infra_error", f"{type(e).__name__}: {e}"), Status.INFRA_ERROR))
                    raise
                ns: NextState = sinfo["next_state"]
                status = Status(sinfo["status"])
                turn = self._turn(path, turns, action, messages, tools, ns, status)
                turns.append(turn)
                messages = messages + [{"role": "assistant", "content": action.text}, {"role": ns.role, "content": ns.content}]
                actor.observe(action, ns)
                scoring = on_turn(turn) if on_turn is not None else None
                if asyncio.iscoroutine(scoring):
                    scoring = await scoring
                if pending is not None:
                    first, pending = pending, None
                    branches.extend(await self._branch(path, first, turn, scoring, on_turn, deadline))
                if terminated or truncated:
                    if status.is_infra:  # the env gave up under the agent: replace it
                        self._discard(env)
                        env = None
                    return [finish(sinfo["outcome"], status if status.is_infra else Status.OK)] + await _gathered(branches)
        except _Deadline as d:
            if env is not None and not path.branch_id:  # a deadline fired in generation: the env itself is fine
                self._idle.append(env)
                env = None
            return [finish(None, Status.TIMEOUT, timeout=d.which, error=str(d))] + await _gathered(branches)
        except _PolicyFailure as e:  # the env is fine; only this episode is lost
            log.warning("episode %s: policy failed: %s", job.episode_id, e)
            return [finish(None, Status.INFRA_ERROR, error=f"policy: {e}")] + await _gathered(branches)
        except (PolicyUnavailable, ForkError):
            raise
        except Exception as e:
            error = error_site(e)
            log.warning("episode %s failed: %s", job.episode_id, error)
            TRACEBACKS.info("episode %s failed:\n%s", job.episode_id, traceback.format_exc())
            if env is not None:
                self._discard(env)
                env = None
            return [finish(None, Status.INFRA_ERROR, error=error)] + await _gathered(branches)
        finally:
            if pending is not None:
                self._discard(pending.env)
            for b in branches:  # only when this path was cut short (cancelled, or the run stops)
                b.cancel()
            await asyncio.gather(*branches, return_exceptions=True)
            if env is not None:
                if path.branch_id:  # a fork serves one path only
                    self._discard(env)
                else:
                    self._idle.append(env)
            if actor is not None:
                await self._end(actor, job)

    # ---- branching (rollout.branch) ----------------------------------------------------
    async def _fork_path(self, trunk: _Path, env: AgentEnv, actor: Actor, parent: str | None,
                         messages: list[dict[str, Any]], step: int, j: int) -> _Path | None:
        """Continuation j of the trunk's state before `step` (env and actor there: the trunk's
        own, or a fork of them not yet stepped): a fork of the env and of the actor. An env that
        cannot fork stops the run (ForkError); a fork that failed (a sandbox error, a deadline)
        only skips this continuation."""
        try:
            fork = await self._call(self._forked, env, timeout=self.step_timeout_s, which="step")
        except ForkError:
            raise
        except Exception as e:
            log.warning("episode %s: fork before step %d failed, no continuation there: %s", trunk.job.episode_id, step, e)
            return None
        bid = branch_id(step, j)
        seed = branch_seed(trunk.job.seed, step, j)
        job = dataclasses.replace(trunk.job, episode_id=f"{trunk.job.episode_id}/{bid}", seed=seed)
        return _Path(job, tree_id=trunk.tree_id, branch_id=bid, start=step, parent=parent, env=fork,
                     actor=actor.fork(fork, seed), messages=list(messages), tools=trunk.tools)

    def _forked(self, env: AgentEnv) -> AgentEnv:
        """env.fork(), counted among this runner's envs from the moment it exists (so `close`
        frees it even when the wait for it was cut)."""
        fork = env.fork()
        self._all.add(fork)
        return fork

    async def _branch(self, trunk: _Path, first: _Path | None, turn: Turn, scoring: Any, on_turn: OnTurn | None,
                      deadline: float) -> list[asyncio.Task[list[Episode]]]:
        """Start the k continuations of the state `turn` acted on, from `first` (the fork taken
        before it; the others are forks of it), or close that fork where the step turned out not
        to be a branch point."""
        if first is None:
            return []
        if self.branching.needs_votes and not await self._disagree(turn, scoring, deadline):
            self._discard(first.env)
            return []
        paths = [first]
        try:
            for j in range(1, self.branching.k):
                more = await self._fork_path(trunk, first.env, first.actor, first.parent, first.messages, first.start, j)
                if more is not None:
                    paths.append(more)
        except BaseException:  # ForkError, cancellation: none of these forks will run
            for p in paths:
                self._discard(p.env)
            raise
        return [asyncio.create_task(self._episode(p, on_turn)) for p in paths]

    async def _disagree(self, turn: Turn, scoring: Any, deadline: float) -> bool:
        """Whether the judge's PRM votes on `turn` disagree (at=disagree): waits for its scoring."""
        if not isinstance(scoring, asyncio.Future):
            return False
        try:
            scored = await asyncio.wait_for(asyncio.shield(scoring), self._budget(deadline)[0])
        except Exception as e:  # no votes, no branch point; the trunk goes on
            log.warning("episode %s step %d: no votes to branch on: %s", turn.episode_id, turn.step_index, e)
            return False
        return scored.prm is not None and disagree(scored.prm.votes)

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
    def _turn(path: _Path, turns: list[Turn], action: Action, messages: list[dict[str, Any]],
              tools: list[dict[str, Any]], ns: NextState, status: Status) -> Turn:
        job = path.job
        return Turn(
            episode_id=job.episode_id, task_id=job.task_id, group_id=job.group_id, step_index=path.start + len(turns),
            policy_version=action.policy_version, prompt_ids=action.prompt_ids, response_ids=action.response_ids,
            rollout_logprobs=action.rollout_logprobs, action=action.text, next_state=ns, status=status,
            finish_reason=action.finish_reason, messages=list(messages), tools=tools, tree_id=path.tree_id,
            branch_id=path.branch_id, parent_turn=turns[-1].key if turns else path.parent,
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


async def _gathered(branches: list[asyncio.Task[list[Episode]]]) -> list[Episode]:
    """The continuations' episodes, once all have ended."""
    return [e for eps in await asyncio.gather(*branches) for e in eps]


def _harness_state(kind: str, message: str, **data: Any) -> NextState:
    return NextState(role="tool", content=f"[harness] {message}", kind=kind, data={"error": message, **data})


def _close_quietly(env: AgentEnv) -> None:
    try:
        env.close()
    except Exception as e:
        log.warning("env.close() raised: %s", e)
