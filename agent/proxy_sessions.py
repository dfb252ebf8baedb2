"""Session bookkeeping of the live-user proxy: when a served turn becomes a finished Turn, and
where finished Turns go.

A turn's next state is what the user (or a tool) sent next, so a main turn stays *pending*
until the session's next main request arrives; that request's last message closes it. A pending
turn is also closed, with no next state, when the session says it is done, when it waits longer
than the TTL, or when the proxy stops: nothing is dropped. "No next state" is a NextState with
empty content and data (kind "none"), which the learner reads as no next state; `meta["closed"]`
says why.

Finished turns go to `TurnSink`: one JSONL file per policy version (appended, never
truncated, so history survives weight updates) and either an `on_turn` callback or a buffer
that `turns()` iterates from any event loop. A finished turn is never dropped: content JSON
cannot encode (a lone surrogate, an object) is escaped with a warning, a record that cannot be
written (a disk error) is logged and the turn still goes to the consumer, and a failure while
closing one session never stops the others (the TTL sweep and shutdown go on to the next).

Opted-out sessions (`SessionBook.opt_out`) are served but never recorded; their ids are
remembered (the last OPTED_OUT_KEPT of them) so a request after their expiry is not recorded either.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any, AsyncIterator, Callable, TextIO

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


def _plain(x: Any, depth: int = 0) -> Any:
    """`x` as JSON can always hold it: strings made UTF-8-encodable (a lone surrogate becomes its
    \\udXXX escape), other objects by their repr, nesting (and so any cycle) cut at 64 levels."""
    if isinstance(x, str):
        return x.encode("utf-8", "backslashreplace").decode("utf-8")
    if x is None or isinstance(x, (bool, int, float)):
        return x
    if depth > 64:
        return "<nested too deeply>"
    if isinstance(x, dict):
        return {k if isinstance(k, (int, float, bool)) or k is None else _plain(str(k)): _plain(v, depth + 1)
                for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v, depth + 1) for v in x]
    return _plain(repr(x))


def record_line(turn: Turn) -> str:
    """The turn's JSONL line; never fails on content: what JSON or UTF-8 cannot hold is escaped."""
    try:
        line = json.dumps(turn.to_json(), ensure_ascii=False)
        line.encode("utf-8")
    except (UnicodeEncodeError, TypeError, ValueError, RecursionError) as e:
        log.warning("turn %s step %d: unencodable content escaped in its record (%s)", turn.episode_id,
                    turn.step_index, str(e)[:200])
        d = {f.name: getattr(turn, f.name) for f in dataclasses.fields(turn)}  # no deep copy: it may be cyclic
        ns = turn.next_state
        d["next_state"] = {f.name: getattr(ns, f.name) for f in dataclasses.fields(ns)} if ns is not None else None
        line = json.dumps(_plain(d), ensure_ascii=False)
    return line + "\n"


class TurnSink:
    """Where finished turns go: JSONL records per policy version, and a callback or a buffer."""

    def __init__(self, record_dir: str | Path | None, on_turn: Callable[[Turn], None] | None = None) -> None:
        self.record_dir = Path(record_dir) if record_dir is not None else None
        if self.record_dir is not None:
            self.record_dir.mkdir(parents=True, exist_ok=True)
        self.on_turn = on_turn
        self._files: dict[int, TextIO] = {}
        self._buffer: collections.deque[Turn] = collections.deque()
        self._wakers: set[Callable[[], None]] = set()
        self._lock = threading.Lock()  # records are written from the proxy thread, closed from the caller's
        self._closed = False

    def record_path(self, version: int) -> Path:
        assert self.record_dir is not None
        return self.record_dir / f"turns-v{version}.jsonl"

    def put(self, turn: Turn) -> None:
        with self._lock:
            if self.record_dir is not None:
                f = self._files.get(turn.policy_version)
                if f is None:
                    try:
                        f = self._files[turn.policy_version] = open(self.record_path(turn.policy_version), "a",
                                                                    encoding="utf-8")
                    except OSError:
                        log.exception("could not open %s", self.record_path(turn.policy_version))
                try:
                    if f is None:
                        raise OSError(f"{self.record_path(turn.policy_version)} is not open")
                    f.write(record_line(turn))
                    f.flush()
                except OSError:  # the disk, not the content: the consumer still gets the turn
                    log.exception("could not write the record of %s step %d", turn.episode_id, turn.step_index)
        if self.on_turn is not None:
            try:
                self.on_turn(turn)
            except Exception:  # a consumer's bug must not break serving; the record is on disk
                log.exception("on_turn callback failed")
            return
        self._buffer.append(turn)
        self._wake()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for f in self._files.values():
                f.close()
            self._files.clear()
        self._wake()

    def _wake(self) -> None:
        for wake in list(self._wakers):
            wake()

    async def turns(self, poll_s: float = 1.0) -> AsyncIterator[Turn]:
        """Finished turns in order, from any event loop; ends once the sink is closed and drained."""
        loop = asyncio.get_running_loop()
        event = asyncio.Event()

        def wake() -> None:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # the consumer's loop is gone
                pass

        self._wakers.add(wake)
        try:
            while True:
                event.clear()
                while self._buffer:
                    yield self._buffer.popleft()
                if self._closed:
                    if not self._buffer:
                        return
                    continue
                try:
                    await asyncio.wait_for(event.wait(), poll_s)
                except asyncio.TimeoutError:
                    pass
        finally:
            self._wakers.discard(wake)


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

    def close_pending(self, s: Session, next_state: NextState | None, closed: str, done: bool = False) -> None:
        """Give the pending turn its next state (None: it has none) and hand it on."""
        turn, s.pending = s.pending, None
        if turn is None or not s.train:
            return
        turn.next_state = next_state if next_state is not None else no_next_state()
        turn.episode_done = done
        turn.meta["closed"] = closed
        self.sink.put(turn)

    def add(self, s: Session, turn: Turn) -> None:
        s.steps += 1
        s.pending = turn
        s.touched = time.monotonic()
        if self.sessions.get(s.session_id) is not s:  # ended while this turn was sampled (stop, a side "done")
            self.close_pending(s, None, "session_ended", done=True)

    def end(self, s: Session, closed: str) -> None:
        self.close_pending(s, None, closed, done=True)
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
