"""Where the live-user proxy's finished turns go: one JSONL file per policy version (appended,
never truncated, so history survives weight updates) and either an `on_turn` callback or a buffer
that `turns()` iterates from any event loop.

A finished turn is never dropped: its record is agent/turn.py's `turn_line`, which escapes what
JSON cannot encode (with a warning); a record that cannot be written (a disk error) is logged and
the turn still goes to the consumer.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import threading
from pathlib import Path
from typing import AsyncIterator, Callable, TextIO

from agent.turn import Turn, turn_line

log = logging.getLogger(__name__)


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
                    f.write(turn_line(turn))
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
