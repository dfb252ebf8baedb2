"""`env.via_proxy=true`: simulated users reach the policy through the live-user proxy over HTTP,
and the learner trains on the proxy's records, exactly as it would with real users.

Each episode is one proxy session (X-Session-Id = the episode id). `ProxyActor` is the user's
side: it sends the conversation so far with the official `openai` client, one chat-completions
request per turn, and at the episode's end posts the user's closing words to
/v1/sessions/{id}/end (they need no reply), so the last turn gets its next state too.

`ProxyRollouts` wraps a Runner (`ProxyTurns` joins the two sides of each turn). The runner still drives the env (the simulator decides the user's
reply); the turns that reach the scorer and the learner are the proxy's: the sampler's exact
token ids and log-probs, the policy version, and the next state as the proxy saw it (the last
message of the session's next request). What only the simulator knows is joined to the proxy's
turn by (session, step): the task and group ids, the env's status and outcome, and the user's
verdict and hint in `next_state.data` (which `judge=rules` reads; `judge=llm` reads only the
text, as with live users). Chat envs only: a reply with tool calls has no way back to the env.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
from typing import Any

import httpx
import openai

from agent.actors import Action
from agent.policy.base import SamplingParams
from agent.proxy import Proxy
from agent.rollout import Episode, EpisodeJob, OnTurn, Runner
from agent.turn import Turn
from envs.base import AgentEnv, NextState, TaskSplit

log = logging.getLogger(__name__)


class ProxyLink:
    """The HTTP clients every ProxyActor of a run shares (made on the run's event loop)."""

    def __init__(self, url: str, api_key: str, model: str, timeout_s: float, max_connections: int) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10.0),
                                      limits=httpx.Limits(max_connections=max_connections),
                                      headers={"Authorization": f"Bearer {api_key}"})
        # no retries: a retried request would be a second recorded turn
        self.openai = openai.AsyncOpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0,
                                         timeout=timeout_s, http_client=self.http)

    async def end_session(self, session_id: str, message: dict[str, Any] | None) -> None:
        body = {"message": message} if message is not None else {}
        r = await self.http.post(f"{self.url}/v1/sessions/{session_id}/end", json=body)
        if r.status_code != 200:
            raise RuntimeError(f"ending session {session_id}: HTTP {r.status_code} {r.text[:200]}")

    async def aclose(self) -> None:
        await self.openai.close()  # closes the shared httpx client too


class ProxyActor:
    """One simulated user's HTTP conversation with the proxy (one session per episode)."""

    def __init__(self, link: ProxyLink, session_id: str, sampling: SamplingParams) -> None:
        self.link = link
        self.session_id = session_id
        self.sampling = sampling
        self.messages: list[dict[str, Any]] = []
        self.unsent: dict[str, Any] | None = None  # the user's last words, not yet sent

    def begin(self, env: AgentEnv, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        if tools:
            raise ValueError("env.via_proxy=true runs chat envs only: this env gives the agent tools")
        self.messages = list(messages)

    async def act(self) -> Action:
        s = self.sampling
        try:
            resp = await self.link.openai.chat.completions.create(
                model=self.link.model, messages=self.messages, max_tokens=s.max_new_tokens, temperature=s.temperature,
                top_p=s.top_p, seed=s.seed, extra_headers={"X-Session-Id": self.session_id, "X-Turn-Type": "main"})
        except openai.BadRequestError as e:
            if e.code == "context_length_exceeded":  # as the model actor: the episode ends, failed
                return Action(text="", context_full=True, finish_reason="context")
            raise
        self.unsent = None
        choice = resp.choices[0]
        if choice.message.tool_calls:
            raise ValueError("the reply holds tool calls; env.via_proxy=true runs chat envs only")
        return Action(text=choice.message.content or "", finish_reason=choice.finish_reason or "")

    def observe(self, action: Action, next_state: NextState) -> None:
        self.unsent = {"role": next_state.role, "content": next_state.content}
        self.messages = self.messages + [{"role": "assistant", "content": action.text}, self.unsent]

    async def end(self) -> None:
        await self.link.end_session(self.session_id, self.unsent)
        self.unsent = None


def _join(proxy_turn: Turn, env_turn: Turn) -> Turn:
    """The proxy's turn with what only the simulator knows (see the module doc)."""
    t = proxy_turn
    t.meta["proxy_episode_id"] = t.episode_id
    t.episode_id, t.task_id, t.group_id = env_turn.episode_id, env_turn.task_id, env_turn.group_id
    t.status = env_turn.status
    env_ns, ns = env_turn.next_state, t.next_state
    if ns.kind == "none":  # the proxy never heard a next state (a deadline): the env's says why
        t.next_state = env_ns
    elif ns.content == env_ns.content:
        t.next_state = dataclasses.replace(ns, data=dict(env_ns.data))
    else:  # the proxy and the env disagree on what the user said: keep the proxy's words, say so
        log.warning("session %s step %d: proxy next state differs from the env's", t.episode_id, t.step_index)
        t.meta["next_state_mismatch"] = True
    return t


class ProxyTurns:
    """The join of the proxy's turns with the env's, by (session, step). Built before the proxy,
    whose `on_turn` is `from_proxy`; `ProxyRollouts` feeds it the env's side of each run."""

    def __init__(self, wait_s: float = 60.0) -> None:
        self.wait_s = wait_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sink: OnTurn | None = None  # the current run's
        self._env: dict[tuple[str, int], Turn] = {}
        self._proxy: dict[tuple[str, int], Turn] = {}
        self._joined: dict[tuple[str, int], Turn] = {}
        self._arrival = asyncio.Event()
        self._tasks: set[asyncio.Future] = set()
        self.orphans = 0  # proxy turns whose env step never happened (a reply cut by a deadline)

    def from_proxy(self, turn: Turn) -> None:
        """The proxy's on_turn (called on the proxy's thread)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._proxy_turn, turn)

    def _proxy_turn(self, turn: Turn) -> None:
        key = (turn.meta["session_id"], turn.step_index)
        self._proxy[key] = turn
        self._try_join(key)
        self._arrival.set()

    def _env_turn(self, turn: Turn) -> None:
        key = (turn.episode_id, turn.step_index)
        self._env[key] = turn
        self._try_join(key)

    def _try_join(self, key: tuple[str, int]) -> None:
        """Both halves of a turn are here (in either order): join them and hand the turn on."""
        if key not in self._env or key not in self._proxy:
            return
        joined = self._joined[key] = _join(self._proxy.pop(key), self._env.pop(key))
        if self._sink is not None:
            r = self._sink(joined)
            if asyncio.iscoroutine(r):
                task = asyncio.ensure_future(r)
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def run(self, runner: Runner, jobs: list[EpisodeJob], on_turn: OnTurn | None) -> list[Episode]:
        self._loop = asyncio.get_running_loop()
        self._sink = on_turn
        episodes = await runner.run(jobs, on_turn=self._env_turn)
        # each env turn came from one served request; its proxy record arrives when the session moves on or ends
        want = [(ep.job.episode_id, i) for ep in episodes for i in range(len(ep.turns))]
        deadline = self._loop.time() + self.wait_s
        while not all(k in self._joined or k in self._proxy for k in want):
            self._arrival.clear()
            left = deadline - self._loop.time()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(self._arrival.wait(), left)
            except asyncio.TimeoutError:
                break
        for ep in episodes:
            ep.turns = self._collect(ep)
        ids = {ep.job.episode_id for ep in episodes}
        for k in [k for k in self._proxy if k[0] in ids]:  # served, but the env never saw the reply
            del self._proxy[k]
            self.orphans += 1
        return episodes

    def _collect(self, ep: Episode) -> list[Turn]:
        out = []
        for i, env_turn in enumerate(ep.turns):
            key = (ep.job.episode_id, i)
            self._env.pop(key, None)
            turn = self._joined.pop(key, None)
            if turn is None and key in self._proxy:  # a step the runner recorded but did not hand on (a deadline)
                turn = _join(self._proxy.pop(key), env_turn)
            if turn is None:
                log.warning("episode %s step %d: no proxy record; the turn is dropped", ep.job.episode_id, i)
                continue
            turn.outcome, turn.episode_done = env_turn.outcome, env_turn.episode_done
            out.append(turn)
        return out


class ProxyRollouts:
    """A rollout source (`run`, `task_ids`, `task_split`, `close`, as a Runner) whose turns are
    the proxy's records, joined by `turns` with what `runner`'s envs saw."""

    def __init__(self, runner: Runner, turns: ProxyTurns) -> None:
        self.runner = runner
        self.turns = turns

    async def task_ids(self) -> list[str]:
        return await self.runner.task_ids()

    async def task_split(self, n_held_out: int, seed: int) -> TaskSplit:
        return await self.runner.task_split(n_held_out, seed)

    async def run(self, jobs: list[EpisodeJob], on_turn: OnTurn | None = None) -> list[Episode]:
        return await self.turns.run(self.runner, jobs, on_turn)

    def close(self) -> None:
        self.runner.close()


def new_api_key() -> str:
    return "sk-run-" + secrets.token_urlsafe(24)
