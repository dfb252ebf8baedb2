"""Headless Chromium driven by Selenium: launch settings, one browser, and a pool of them.

Browsers are expensive to start (about 1.3 s) and cheap to reuse (opening another MiniWoB page
takes about 0.2 s), so envs lease one from a `BrowserPool` and keep it across episodes. Every
browser is killed by `Browser.quit`, by `BrowserPool.close`, at interpreter exit, and, if the
runner dies without running any of those, by the reaper process (envs/gui/reaper.py).
"""
from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shutil
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import urllib3
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service

from envs.gui import reaper
from envs.gui.procs import MARKER_VAR, kill_marked, marker, sweep_orphans

#: The machine has no network: no first-run, sync, update or background fetches (BrowserGym's
#: Chromium, envs/ecosystem/browsergym.py, starts with these too).
OFFLINE_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)
CHROMIUM_ARGS = (
    "--headless",
    *OFFLINE_ARGS,
    "--window-size=500,500",  # the viewport must hold MiniWoB's 160x210 task area
)


def configure_env() -> None:
    """Point miniwob and Selenium at Debian's chromium and chromedriver, offline (docs/architecture.md, "Machines")."""
    os.environ.setdefault("MINIWOB_CHROME_BINARY", shutil.which("chromium") or "/usr/bin/chromium")
    os.environ.setdefault("MINIWOB_CHROMEDRIVER", shutil.which("chromedriver") or "/usr/bin/chromedriver")
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not try to download drivers


class BrowserError(RuntimeError):
    """The browser or its driver failed (the env reports infra_error)."""


@contextlib.contextmanager
def driver_errors(what: str) -> Iterator[None]:
    """Turn a failing driver into BrowserError: an error it reports, or (when chromedriver is
    dead) the refused HTTP connection underneath."""
    try:
        yield
    except (WebDriverException, urllib3.exceptions.HTTPError, OSError) as e:
        msg = getattr(e, "msg", None) or f"{type(e).__name__}: {e}"
        raise BrowserError(f"{what} failed: {msg}") from e


_counter = itertools.count(1)
_swept = False


class Browser:
    """One Chromium + chromedriver pair. `run` executes JavaScript in the current page."""

    def __init__(self, command_timeout_s: float = 30.0, console_log: bool = False) -> None:
        global _swept
        configure_env()
        if not _swept:  # browsers left by a runner that died with its reaper
            sweep_orphans()
            _swept = True
        reaper.start()
        self.marker = marker(str(next(_counter)))
        self.profile = tempfile.mkdtemp(prefix="openclaw-gui-")
        self.url: str | None = None
        options = webdriver.ChromeOptions()
        for arg in CHROMIUM_ARGS:
            options.add_argument(arg)
        options.add_argument(f"--user-data-dir={self.profile}")
        options.binary_location = os.environ["MINIWOB_CHROME_BINARY"]
        if console_log:  # the page's console messages, for driver.get_log("browser")
            options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        service = Service(
            executable_path=os.environ["MINIWOB_CHROMEDRIVER"],
            env={**os.environ, MARKER_VAR: self.marker},
            log_output=subprocess.DEVNULL,
            popen_kw={"start_new_session": True},  # Ctrl-C goes to the runner, which closes us
        )
        self._service = service
        try:
            self.driver = webdriver.Chrome(service=service, options=options)
            self.driver.command_executor.client_config.timeout = command_timeout_s
            self.driver.set_script_timeout(command_timeout_s)
            self.driver.set_page_load_timeout(command_timeout_s)
        except Exception as e:
            self._kill()
            raise BrowserError(f"could not start chromium: {type(e).__name__}: {e}") from e
        self.inner_size = tuple(self.run("return [window.innerWidth, window.innerHeight];"))

    def run(self, script: str, *args: Any) -> Any:
        """Run JavaScript in the page; a driver failure becomes BrowserError."""
        with driver_errors("browser command"):
            return self.driver.execute_script(script, *args)

    def open(self, url: str, ready_script: str, timeout_s: float = 10.0) -> None:
        """Load `url` (if not already there) and wait until `ready_script` returns true."""
        if url != self.url:
            self.url = None
            with driver_errors(f"opening {url}"):
                self.driver.get(url)
        deadline = time.monotonic() + timeout_s
        while not self.run(ready_script):
            if time.monotonic() > deadline:
                raise BrowserError(f"page {url} was not ready after {timeout_s} s")
            time.sleep(0.02)
        self.url = url

    def alive(self) -> bool:
        try:
            self.run("return 1;")
            return True
        except BrowserError:
            return False

    def quit(self) -> None:
        """Stop the browser and every helper it forked; remove its profile."""
        driver = getattr(self, "driver", None)
        if driver is not None:
            try:
                driver.quit()
            except Exception:  # a dead or wedged driver: the kill below does the job
                pass
            self.driver = None
        self._kill()

    def _kill(self) -> None:
        kill_marked(self.marker)
        service = getattr(self, "_service", None)
        if service is not None and service.process is not None:
            try:
                service.process.wait(timeout=5)  # reap chromedriver so no zombie is left
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


_pools: weakref.WeakSet[BrowserPool] = weakref.WeakSet()


class BrowserPool:
    """Idle browsers kept for reuse. `acquire` hands one out (starting one if none is idle);
    `release` takes it back (or quits it when it is broken or the pool is full); `close` quits
    every browser the pool started, leased or idle."""

    def __init__(self, max_idle: int = 8, command_timeout_s: float = 30.0) -> None:
        self.max_idle = max_idle
        self.command_timeout_s = command_timeout_s
        self._idle: list[Browser] = []
        self._all: set[Browser] = set()
        self._lock = threading.Lock()
        self.closed = False
        self._owner = os.getpid()  # a forked child must not close its parent's browsers
        _pools.add(self)

    def acquire(self) -> Browser:
        with self._lock:
            if self.closed:
                raise BrowserError("the browser pool is closed")
            while self._idle:
                browser = self._idle.pop()
                if browser.alive():
                    return browser
                self._all.discard(browser)
                browser.quit()
        browser = Browser(self.command_timeout_s)  # outside the lock: starting takes a second
        with self._lock:
            if self.closed:
                browser.quit()
                raise BrowserError("the browser pool is closed")
            self._all.add(browser)
        return browser

    def release(self, browser: Browser, broken: bool = False) -> None:
        with self._lock:
            keep = not broken and not self.closed and len(self._idle) < self.max_idle
            if keep:
                self._idle.append(browser)
                return
            self._all.discard(browser)
        browser.quit()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            browsers, self._all, self._idle = list(self._all), set(), []
        for browser in browsers:
            browser.quit()

    def __len__(self) -> int:
        return len(self._all)


@atexit.register
def _close_all_pools() -> None:
    for pool in list(_pools):
        if pool._owner == os.getpid():
            pool.close()
