"""The progress display: a status line redrawn with \\r on a terminal, nothing anywhere else.

Its main caller, the runner, runs three episodes with stderr a pipe (pytest's capture, as in a CI
log) or a pseudo-terminal (as in a person's shell), and a log record arrives while a bar is live.
"""
from __future__ import annotations

import asyncio
import logging
import os
import pty
import sys
import threading

from agent.actors import OracleActor
from envs.progress import Progress
from agent.rollout import EpisodeJob, Runner
from tests.toy_envs import CountdownEnv


def _work() -> None:
    runner = Runner(CountdownEnv, lambda job: OracleActor(), n_envs=1)
    try:
        asyncio.run(runner.run([EpisodeJob(f"e{i}", "n2", f"g{i}", i) for i in range(3)]))
    finally:
        runner.close()
    with Progress("second", total=2) as bar:
        bar.advance(status="halfway")
        logging.getLogger("test_progress").warning("a record mid-bar")
    with Progress("hidden", total=1, enabled=False) as bar:
        bar.advance()


def _with_stderr(stream, monkeypatch) -> None:
    """_work with `stream` as sys.stderr and as the stream of a root log handler."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("LOG %(message)s"))
    monkeypatch.setattr(sys, "stderr", stream)
    logging.getLogger().addHandler(handler)
    try:
        _work()
    finally:
        logging.getLogger().removeHandler(handler)
    assert not handler.filters  # the line-clearing filter leaves with the last bar


def test_not_a_terminal_gets_no_bar(capfd, monkeypatch):
    _with_stderr(sys.stderr, monkeypatch)
    err = capfd.readouterr().err
    assert "LOG a record mid-bar" in err  # the log itself is untouched
    assert "\r" not in err and "rollouts" not in err and "second" not in err


def test_a_terminal_gets_a_status_line_redrawn_in_place(monkeypatch):
    master, slave = pty.openpty()
    tty = os.fdopen(slave, "w", buffering=1)
    assert tty.isatty()
    monkeypatch.setenv("COLUMNS", "120")
    chunks: list[bytes] = []

    def drain() -> None:  # the terminal's reader: a full pty buffer would block the writer
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the writing side is closed
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        _with_stderr(tty, monkeypatch)
    finally:
        tty.close()
        reader.join(timeout=10)
        os.close(master)
    out = b"".join(chunks).decode()
    frames = [f.replace("\x1b[K", "") for f in out.replace("\r\n", "\n").split("\r")]
    assert any(f.startswith("rollouts 1/3 [======      ") for f in frames), frames
    assert any(f.startswith("rollouts 3/3 [====================] 0:0") and f.endswith("ok=3") for f in frames), frames
    assert "second 1/2 [==========          ] 0:00 halfway" in frames, frames
    # the line is cleared before a record, which so starts a line of its own
    assert "\r\x1b[KLOG a record mid-bar" in out
    assert "hidden" not in out
    assert out.rsplit("\n", 1)[-1] in ("", "\r\x1b[K")  # no bar is left on the line after the last closes
