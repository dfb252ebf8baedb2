"""Run a repository's tests on many mutants quickly: one long-lived pytest process per copy of
the repository takes mutants one at a time (write the file, forget the repository's modules,
`pytest.main`), so pytest's start-up is paid once, not per mutant.

The worker is this file run as a script (`python -I`: nothing of this project on its path, only
the copy's root). A mutant that hangs or kills the worker costs that worker (restarted, after
the parent writes the copy's files back as they were: a killed worker may leave a mutant on disk)
and counts as not run. Results per test: its pytest id, PASSED / FAILED / ERROR / SKIPPED, and the
first lines of a failure's message (the assertion).
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

MESSAGE_LINES = 3


class TestRun(dict):
    """{pytest id: status}; `.messages` {id: failure message}; `.broken` why the run is not
    usable (collection error, timeout, crash), else ""."""

    def __init__(self, statuses: dict[str, str], messages: dict[str, str], broken: str = "") -> None:
        super().__init__(statuses)
        self.messages = messages
        self.broken = broken


class Worker:
    """One pytest process over `root` (a copy of the repository that this worker owns)."""

    def __init__(self, root: Path, tests: list[str], python: str = sys.executable) -> None:
        self.root, self.tests, self.python = root, tests, python
        self.proc: subprocess.Popen | None = None
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.originals: dict[str, str] = {}  # path -> its text before any mutant was written

    def _start(self) -> None:
        env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        self.proc = subprocess.Popen([self.python, "-I", __file__, str(self.root), *self.tests], cwd=self.root,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, env=env)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self.lines), daemon=True).start()

    @staticmethod
    def _read(proc: subprocess.Popen, lines: queue.Queue) -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def run(self, path: str, text: str | None, timeout: float) -> TestRun:
        """The tests with `path` holding `text` (None: the repository as it is)."""
        self.originals.setdefault(path, (self.root / path).read_text())
        if self.proc is None or self.proc.poll() is not None:
            self._restore()
            self._start()
        self.proc.stdin.write(json.dumps({"path": path, "text": text}) + "\n")
        self.proc.stdin.flush()
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            line = None
        if line is None:  # hung or died: the next run starts a fresh worker on the original files
            self.close()
            self._restore()
            return TestRun({}, {}, f"no result in {timeout:.0f} s")
        out = json.loads(line)
        return TestRun(out["statuses"], out["messages"], out["broken"])

    def _restore(self) -> None:
        for path, text in self.originals.items():
            (self.root / path).write_text(text)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None


def copy_repo(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc", ".pytest_cache"))


# ---- the worker process ----------------------------------------------------------------------
def _serve(root: str, tests: list[str]) -> None:
    import io

    sys.dont_write_bytecode = True
    sys.path.insert(0, root)
    os.chdir(root)
    import pytest

    originals: dict[str, str] = {}
    out = sys.stdout
    for line in sys.stdin:
        req = json.loads(line)
        target = Path(root) / req["path"]
        originals.setdefault(req["path"], target.read_text())
        target.write_text(originals[req["path"]] if req["text"] is None else req["text"])
        for name, mod in list(sys.modules.items()):  # the repository's modules load afresh
            f = getattr(mod, "__file__", None) or ""
            if f.startswith(root + os.sep):
                del sys.modules[name]
        collector = _Collector()
        sys.stdout = io.StringIO()
        try:
            pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", *tests], plugins=[collector])
        except BaseException as e:  # a mutant that raises SystemExit at import, ...
            collector.broken = collector.broken or f"pytest stopped: {type(e).__name__}"
        finally:
            sys.stdout = out
        target.write_text(originals[req["path"]])
        out.write(json.dumps({"statuses": collector.statuses, "messages": collector.messages,
                              "broken": collector.broken}) + "\n")
        out.flush()


class _Collector:
    def __init__(self) -> None:
        self.statuses: dict[str, str] = {}
        self.messages: dict[str, str] = {}
        self.broken = ""

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.broken = f"collection failed in {report.nodeid or '.'}"

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call" or (report.failed and report.when != "call") or report.skipped:
            status = ("FAILED" if report.when == "call" else "ERROR") if report.failed else report.outcome.upper()
            self.statuses[report.nodeid] = status
            if report.failed:
                crash = getattr(report.longrepr, "reprcrash", None)
                text = crash.message if crash is not None else str(report.longrepr)
                self.messages[report.nodeid] = "\n".join(text.splitlines()[:MESSAGE_LINES])


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2:])
