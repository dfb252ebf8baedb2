"""The live-user proxy's session book: the life of a turn, from a served main request to a
finished Turn handed to the sink (agent/proxy/sink.py).

A turn's next state is what the user (or a tool) sent next, so a main turn stays *pending*
until the session's next main request arrives; that request's last message closes it. A pending
turn is also closed, with no next state, when the session says it is done, when it waits longer
than the TTL, or when the proxy stops: nothing is dropped. "No next state" is `no_next_state()`,
a NextState with empty content and data (kind "none"), which the learner reads as no next
state; `meta["closed"]` says why. Main requests of one session run in order (its lock); a
failure while closing one session never stops the others (the TTL sweep and shutdown go on to
the next).

Opted-out sessions (`SessionBook.opt_out`) are served but never recorded; their ids are
remembered (the last OPTED_OUT_KEPT of them) so a request after their expiry is not recorded either.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import time
import uuid
from typing import Any, Awaitable, Callable

from agent.policy.base import GenerateResult
from agent.proxy.sink import TurnSink
from agent.turn import Turn
from envs.base import NextState

log = logging.getLogger(__name__)

NEXT_STATE_KINDS = {"user": "user_reply", "tool": "tool_result"}
OPTED_OUT_KEPT = 100_000


def no_next_state() -> NextState:
    return NextState(role="user", content="", kind="none")


def next_state_of(message: dict[str, Any]) -> NextState | None:
    """The next state a request's last message gives the pending turn (None: not a user/tool message)."""
    kind = NEXT_STATE_KINDS.get(message.get("role", ""))
    if kind is None:
        return None
    data = {k: message[k] for k in ("tool_call_id", "name") if message.get(k)}
    return NextState(role=message["role"], content=message.get("content") or "", kind=kind, data=data)


@dataclasses.dataclass
class Prompt:
    """A request as its turn records it: the rendered ids, the messages (redacted when recorded)
    and tools they were rendered from, the model the client asked for."""

    ids: list[int]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    model: str


@dataclasses.dataclass
class Reply:
    """A sampled reply: the sampler's result, its text as served and as recorded (redacted), the
    indices of its tokens that carry a private value, and the seconds the policy took."""

    result: GenerateResult
    text: str
    action: str
    private_tokens: list[int]
    policy_s: float


@dataclasses.dataclass
class Session:
    """One live conversation, from its first request to done / expiry (one learner episode)."""

    session_id: str
    episode_id: str
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)  # main turns of a session run in order
    steps: int = 0
    pending: Turn | None = None
    touched: float = dataclasses.field(default_factory=time.monotonic)
    train: bool = True  # False: opted out, nothing of it is recorded


class SessionBook:
    """Sessions by id, owned by the proxy's event loop (no other thread touches them)."""

    def __init__(self, sink: TurnSink, ttl_s: float) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s}")
        self.sink = sink
        self.ttl_s = ttl_s
        self.sessions: dict[str, Session] = {}
        self.opted_out: collections.OrderedDict[str, None] = collections.OrderedDict()

    def get(self, session_id: str) -> Session:
        s = self.sessions.get(session_id)
        if s is None:
            # A fresh episode id per incarnation: an id reused after done/expiry starts a new episode.
            s = self.sessions[session_id] = Session(session_id, f"{session_id}#{uuid.uuid4().hex[:8]}",
                                                    train=session_id not in self.opted_out)
        s.touched = time.monotonic()
        return s

    def opt_out(self, s: Session) -> None:
        """Nothing of this session is recorded from now on; its pending turn is dropped unrecorded."""
        s.train, s.pending = False, None
        self.opted_out[s.session_id] = None
        self.opted_out.move_to_end(s.session_id)
        while len(self.opted_out) > OPTED_OUT_KEPT:
            self.opted_out.popitem(last=False)

    async def main_turn(self, s: Session, prompt: Prompt, record: bool, done: bool,
                        sample: Callable[[], Awaitable[Reply]]) -> Reply:
        """One main request of `s`, in the session's order: its last message closes the pending
        turn (when `record`; an unrecorded request's words are no one's next state), `sample()`
        replies, and the reply becomes the session's pending turn (when recorded and the session
        did not opt out meanwhile); `done` then ends the session."""
        async with s.lock:
            if s.pending is not None:
                ns = next_state_of(prompt.messages[-1]) if record else None
                self._close_pending(s, ns, "next_request" if ns else
                                    "next_request_without_reply" if record else "next_request_not_recorded")
            try:
                reply = await sample()
            finally:
                s.touched = time.monotonic()
            if record and s.train:
                self._add(s, self._turn(s, prompt, reply))
            if done:
                self.end(s, "session_done")
        return reply

    async def close(self, s: Session, message: dict[str, Any] | None) -> bool:
        """End `s` at the client's word; `message` (the user's closing words, or None) is the next
        state of its pending turn. True when there was a pending turn to close."""
        async with s.lock:
            had_turn = s.pending is not None
            self._close_pending(s, next_state_of(message) if message is not None else None, "session_end",
                                done=True)
            self.end(s, "session_done")
        return had_turn

    def end_id(self, session_id: str, closed: str) -> None:
        """End the session of this id, if one is open."""
        s = self.sessions.get(session_id)
        if s is not None:
            self.end(s, closed)

    def end(self, s: Session, closed: str) -> None:
        self._close_pending(s, None, closed, done=True)
        if self.sessions.get(s.session_id) is s:
            del self.sessions[s.session_id]

    def expire(self, now: float | None = None) -> int:
        """Close sessions idle longer than the TTL (their pending turn without next state)."""
        now = time.monotonic() if now is None else now
        stale = [s for s in self.sessions.values() if not s.lock.locked() and now - s.touched > self.ttl_s]
        self._end_each(stale, "expired")
        return len(stale)

    def end_all(self, closed: str) -> None:
        self._end_each(list(self.sessions.values()), closed)

    def _end_each(self, sessions: list[Session], closed: str) -> None:
        """End each session; one that fails is logged and forgotten, the others still end."""
        for s in sessions:
            try:
                self.end(s, closed)
            except Exception:
                log.exception("closing session %s failed", s.session_id)
                if self.sessions.get(s.session_id) is s:
                    del self.sessions[s.session_id]

    @staticmethod
    def _turn(s: Session, prompt: Prompt, reply: Reply) -> Turn:
        """The session's next turn, pending: its next state is set when it is closed."""
        r = reply.result
        return Turn(episode_id=s.episode_id, task_id="live", group_id=f"{s.episode_id}/{s.steps}",
                    step_index=s.steps, policy_version=r.weight_version, prompt_ids=prompt.ids,
                    response_ids=list(r.output_ids), rollout_logprobs=list(r.logprobs), action=reply.action,
                    next_state=no_next_state(), status="ok", finish_reason=r.finish_reason,
                    messages=prompt.messages, tools=prompt.tools,
                    meta={"session_id": s.session_id, "model": prompt.model, "private_tokens": reply.private_tokens})

    def _add(self, s: Session, turn: Turn) -> None:
        s.steps += 1
        s.pending = turn
        s.touched = time.monotonic()
        if self.sessions.get(s.session_id) is not s:  # ended while this turn was sampled (stop, a side "done")
            self._close_pending(s, None, "session_ended", done=True)

    def _close_pending(self, s: Session, next_state: NextState | None, closed: str, done: bool = False) -> None:
        """Give the pending turn its next state (None: it has none) and hand it on."""
        turn, s.pending = s.pending, None
        if turn is None or not s.train:
            return
        turn.next_state = next_state if next_state is not None else no_next_state()
        turn.episode_done = done
        turn.meta["closed"] = closed
        self.sink.put(turn)
