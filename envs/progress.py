"""The one progress display for every long wait: image builds, model conversion, rollouts,
held-out evaluation, training steps, benchmarks, `compare` and `view` (in envs/, the bottom
layer, because the sandbox image builds use it too).

On a terminal (stderr a TTY) the live bars share one status line, redrawn in place with \\r (a
training step's bar beside the rollouts' reads "rollouts 3/8 ... | train step 2 1/4 ..."); the
elapsed time ticks every second even when nothing advances (a docker build step, a conversion),
and a log record clears the line before it is written so the two never interleave. Anywhere
else (CI logs, pipes, files) it writes nothing: logs stay readable and the run's own log lines
say what finished. `configure(enabled=False)` (the run's `progress=false`) turns every bar off.
"""
from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
import time
from typing import Any, TextIO

_TICK_S = 1.0  # redraw at least this often while a bar is live (the elapsed time moves)
_MIN_REDRAW_S = 0.1  # and at most this often for a new status alone (a copy's MiB, a build's log lines)
_BAR = 20  # characters of the [====    ] part
_enabled = True
_boards: dict[int, "_Board"] = {}
_boards_lock = threading.Lock()


def configure(enabled: bool) -> None:
    """Turn every progress display of this process on or off (the run config's `progress`)."""
    global _enabled
    _enabled = bool(enabled)


def _elapsed(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


class Progress:
    """One task's bar: `advance(n)` as work finishes, `update(status=...)` for what it is doing
    now; `total=None` shows a count (or only the status) and the elapsed time. A context manager;
    `close()` removes the bar. Safe to call from any thread."""

    def __init__(self, label: str, total: int | None = None, *, status: str = "", enabled: bool = True,
                 stream: TextIO | None = None) -> None:
        self.label, self.total, self.done, self.status = label, total, 0, status
        self._t0 = time.monotonic()
        stream = sys.stderr if stream is None else stream
        self._board = _board(stream) if enabled and _enabled and _is_tty(stream) else None
        if self._board is not None:
            self._board.add(self)

    @property
    def live(self) -> bool:
        """Whether this bar is drawn (False off a terminal or when progress is off)."""
        return self._board is not None

    def advance(self, n: int = 1, status: str | None = None) -> None:
        self.update(done=self.done + n, status=status)

    def update(self, done: int | None = None, total: int | None = None, status: str | None = None) -> None:
        if done is not None:
            self.done = done
        if total is not None:
            self.total = total
        if status is not None:
            self.status = status
        if self._board is not None:  # a count is drawn at once; a status alone at most every _MIN_REDRAW_S
            self._board.draw(force=done is not None)

    def render(self) -> str:
        parts = [self.label]
        if self.total:
            filled = min(_BAR, _BAR * self.done // self.total)
            parts += [f"{self.done}/{self.total}", "[" + "=" * filled + " " * (_BAR - filled) + "]"]
        elif self.done:
            parts.append(str(self.done))
        parts.append(_elapsed(time.monotonic() - self._t0))
        if self.status:
            parts.append(self.status)
        return " ".join(parts)

    def close(self) -> None:
        board, self._board = self._board, None
        if board is not None:
            board.remove(self)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream
        return False


def _board(stream: TextIO) -> "_Board":
    with _boards_lock:
        board = _boards.get(id(stream))
        if board is None:
            board = _boards[id(stream)] = _Board(stream)
        return board


class _Board:
    """The status line of one terminal stream: every live bar, joined, cut to the width."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.bars: list[Progress] = []
        self.lock = threading.RLock()
        self.drawn = False
        self.last = 0.0
        self.stop = threading.Event()  # the live ticker's own, set when the last bar closes
        self.clearer = _ClearLine(self)

    def add(self, bar: Progress) -> None:
        with self.lock:
            self.bars.append(bar)
            if len(self.bars) == 1:  # the first bar: tick the clock, clear the line for log records
                self.stop = threading.Event()
                threading.Thread(target=self._tick, args=(self.stop,), name="progress", daemon=True).start()
                for h in _handlers():
                    h.addFilter(self.clearer)
            self.draw(force=True)

    def remove(self, bar: Progress) -> None:
        with self.lock:
            if bar in self.bars:
                self.bars.remove(bar)
            if self.bars:
                self.draw(force=True)
                return
            self.stop.set()
            for h in _handlers():
                h.removeFilter(self.clearer)
            self.clear()
        with _boards_lock:  # the next bar on this stream starts a new board
            if _boards.get(id(self.stream)) is self and not self.bars:
                del _boards[id(self.stream)]

    def _tick(self, stop: threading.Event) -> None:
        while not stop.wait(_TICK_S):
            self.draw(force=True)

    def draw(self, force: bool = False) -> None:
        with self.lock:
            now = time.monotonic()
            if not self.bars or (not force and now - self.last < _MIN_REDRAW_S):
                return
            self.last = now
            try:
                width = os.get_terminal_size(self.stream.fileno()).columns
            except (OSError, ValueError, AttributeError):
                width = 0
            width = width or shutil.get_terminal_size((100, 24)).columns  # 0: a terminal that never said
            line = " | ".join(b.render() for b in self.bars)[:max(width - 1, 10)]  # a wrapped line defeats \r
            self._write(f"\r{line}\x1b[K")
            self.drawn = True

    def clear(self) -> None:
        with self.lock:
            if self.drawn:
                self._write("\r\x1b[K")
                self.drawn = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: the work goes on without a bar
            pass


class _ClearLine(logging.Filter):
    """On a handler writing to a terminal (stderr, or stdout where the run logs): clear the status
    line before each record (the next tick or update draws it again below the record)."""

    def __init__(self, board: _Board) -> None:
        super().__init__()
        self.board = board

    def filter(self, record: logging.LogRecord) -> bool:
        self.board.clear()
        return True


def _handlers() -> list[logging.Handler]:
    return [h for h in logging.getLogger().handlers if _is_tty(getattr(h, "stream", None))]
