"""BrowserGymEnv: BrowserGym's web tasks (`browsergym-core` on PyPI) as an AgentEnv.

`task` is a BrowserGym task id: `openclaw.form` (bundled, envs/ecosystem/browsergym_tasks.py;
BrowserGym's own benchmarks need data that is not on PyPI) or any task a user has installed,
such as `miniwob.click-test` (its package `browsergym.miniwob` is imported to register it, as
BrowserGym's packages register their tasks on import). Task `seed-00042` is the task reset with
seed 42 (+ `seed`). The env is BrowserGym's own (`gym.make("browsergym/<task>")`), driven
unchanged: actions are its high-level action strings (`click('12')`, `fill('5', 'text')`, ...,
`action_subsets` picks BrowserGym's subsets; the default is BrowserGym's default set without
`goto`, which would let an agent open any host file as a `file://` page), each next state is the page as BrowserGym's agents
read it (URL, the error of the last action, new chat messages from the task, open tabs and the
accessibility tree from `flatten_axtree_to_str`, where `[bid]` names what actions take). An
action BrowserGym could not carry out is status invalid_action (verdict -1). The outcome is the
sum of the task's rewards (1 for a solved task in BrowserGym's benchmarks, else 0), also when the
turn limit ends the episode.

Playwright drives Debian's Chromium (the GUI env's, no `playwright install`), offline, each
browser marked so the GUI env's reaper kills it if the runner dies; Playwright's node driver
runs in a session of its own (playwright_node.sh), so Ctrl-C reaches only the runner, which
closes it. Playwright's sync API works only on the thread that started it, so each env makes
every Playwright call on a thread of its own, and BrowserGym's one process-wide Playwright
becomes one per thread: the env's own.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib
import itertools
import json
import os
import queue
import re
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

import gymnasium
import numpy as np

from envs.base import AgentEnv, NextState, Status, StepResult, Task
from envs.ecosystem import require
from envs.gui import reaper
from envs.gui.browser import OFFLINE_ARGS, BrowserError, configure_env
from envs.gui.procs import MARKER_VAR, kill_marked, marker

bgym_core = require("browsergym.core", "browsergym-core")
playwright_sync = require("playwright.sync_api", "playwright")
from browsergym.core.action.highlevel import ACTION_SUBSETS, HighLevelActionSet  # noqa: E402
from browsergym.utils.obs import flatten_axtree_to_str  # noqa: E402

from envs.ecosystem import browsergym_tasks  # noqa: E402,F401  (registers openclaw.form)

NODE = Path(__file__).with_name("playwright_node.sh")
CALL_TIMEOUT_S = 300.0  # one BrowserGym reset or step (BrowserGym's own Playwright timeouts are shorter)
CLOSE_TIMEOUT_S = 30.0
SYSTEM_PROMPT = """You operate a web browser to reach the goal the user gives. After each action you
see the page: its URL, any error from your last action, and its accessibility tree, one element
a line; `[bid]` is the id that actions take. Reply with BrowserGym actions, one a line:
"""
_BID = re.compile(r"^\s*\[(\w+)\] ", re.M)  # an element's line in flatten_axtree_to_str's tree
_numbers = itertools.count(1)


class _Chromium:
    """Playwright's Chromium launcher as BrowserGym calls it (its task browser and its chat
    browser), pointed at Debian's Chromium, offline, with the marker the GUI env's reaper kills."""

    def __init__(self, chromium: Any, marker: str) -> None:
        self._chromium, self._marker = chromium, marker

    def launch(self, **options: Any) -> Any:
        options["args"] = [*OFFLINE_ARGS, *(options.get("args") or [])]
        return self._chromium.launch(executable_path=os.environ["MINIWOB_CHROME_BINARY"],
                                     env={**os.environ, MARKER_VAR: self._marker}, **options)


class _PerThread(threading.local):
    """BrowserGym's global Playwright (it uses `selectors` and `chromium.launch`), set by each
    env's thread to its own Playwright."""

    selectors: Any = None
    chromium: _Chromium | None = None


_PLAYWRIGHT = _PerThread()


class _Thread:
    """One daemon thread that runs calls in order: a Playwright call stuck on a dead driver must
    not hold up the interpreter's exit (a ThreadPoolExecutor's threads are joined at exit)."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self.stopped = False
        threading.Thread(target=self._run, name="browsergym", daemon=True).start()

    def _run(self) -> None:
        while (call := self._calls.get()) is not None:
            future, fn, args = call
            try:
                future.set_result(fn(*args))
            except BaseException as e:  # the caller gets it
                future.set_exception(e)

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        if self.stopped:
            raise BrowserError("the env is closed")
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._calls.put((future, fn, args))
        return future

    def stop(self) -> None:
        self.stopped = True
        self._calls.put(None)


def default_actions() -> HighLevelActionSet:
    """BrowserGym's default action set (chat, infeas, bid, nav, tab) without `goto`: the task
    pages are files on the host, so a `goto('file:///...')` would read any host file into the
    page. A user who wants it names the subsets (`env.action_subsets=[bid,nav]`)."""
    kept = [f for name in ("nav", "tab") for f in ACTION_SUBSETS[name] if f.__name__ != "goto"]
    return HighLevelActionSet(subsets=["chat", "infeas", "bid", "custom"], custom_actions=kept)


class BrowserGymEnv(AgentEnv):
    """A BrowserGym task; see the module docstring."""

    def __init__(self, task: str = "openclaw.form", n_tasks: int = 500, seed: int = 0, task_kwargs: dict | None = None,
                 action_subsets: list[str] | None = None, env_kwargs: dict | None = None, max_turns: int = 10):
        super().__init__(max_turns=max_turns)
        self.name = task.removeprefix("browsergym/")
        self.env_id = f"browsergym/{self.name}"
        _register(self.name, self.env_id)
        self.n_tasks, self.seed = int(n_tasks), int(seed)
        self.actions = HighLevelActionSet(subsets=list(action_subsets)) if action_subsets else default_actions()
        self._kwargs = {**dict(env_kwargs or {}), "task_kwargs": dict(task_kwargs or {}), "headless": True,
                        "action_mapping": self.actions.to_python_code}
        configure_env()  # MINIWOB_CHROME_BINARY: Debian's chromium, as the GUI env finds it
        os.environ.setdefault("PLAYWRIGHT_NODEJS_PATH", str(NODE))
        reaper.start()
        self.marker = marker(f"browsergym-{next(_numbers)}")
        self._thread = _Thread()
        self._driver: Any = None  # Playwright, started on the env's thread (with its node driver process)
        self._env: Any = None
        self._page = ""  # the page as the agent last saw it
        self._chat_seen = 0
        self._rewards: list[float] = []

    # ---- Playwright's thread -------------------------------------------------------------
    def _call(self, fn: Callable[..., Any], *args: Any, timeout_s: float = CALL_TIMEOUT_S) -> Any:
        future = self._thread.submit(fn, *args)
        try:
            return future.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            kill_marked(self.marker)  # the browsers go, so the stuck call returns with an error
            raise BrowserError(f"BrowserGym did not answer within {timeout_s:g} s; its browsers were killed") from None

    def _reset_inner(self, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
        if self._driver is None:
            self._driver = playwright_sync.sync_playwright().start()
            _PLAYWRIGHT.selectors = self._driver.selectors
            _PLAYWRIGHT.chromium = _Chromium(self._driver.chromium, self.marker)
            bgym_core._set_global_playwright(_PLAYWRIGHT)
        if self._env is None:
            self._env = gymnasium.make(self.env_id, disable_env_checker=True, **self._kwargs)
        return self._env.reset(seed=seed)

    # ---- tasks ---------------------------------------------------------------------------
    def task_ids(self) -> list[str]:
        return [f"seed-{i:05d}" for i in range(self.n_tasks)]

    def load_task(self, task_id: str) -> Task:
        try:
            index = int(task_id.removeprefix("seed-"))
        except ValueError:
            raise KeyError(f"unknown BrowserGym task id {task_id!r} (ids look like 'seed-00042')") from None
        return Task(task_id=task_id, prompt="", meta={"task": self.name, "seed": self.seed + index})

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT + self.actions.describe(with_long_description=False, with_examples=True)

    # ---- one episode ---------------------------------------------------------------------
    def _start(self, task: Task) -> NextState:
        obs, info = self._call(self._reset_inner, task.meta["seed"])
        self._rewards = []
        self._chat_seen = len(obs["chat_messages"])
        self._page = page_text(obs)
        # The goal exists only once the task is set up.
        self.task = dataclasses.replace(task, prompt=f"Goal: {obs['goal']}")
        return NextState("user", self._page, "screen", {"url": obs["url"], "task_info": _plain(info.get("task_info"))})

    def _act(self, action: str) -> StepResult:
        try:
            obs, reward, terminated, truncated, info = self._call(self._env.step, action)
        except (BrowserError, playwright_sync.Error) as e:
            ns = NextState("user", f"The browser failed: {e}", "screen", {"error": str(e), "verdict": 0})
            return StepResult(ns, Status.INFRA_ERROR)
        self._rewards.append(float(reward))
        error = obs["last_action_error"]
        said = [m["message"] for m in obs["chat_messages"][self._chat_seen:] if m["role"] == "user"]
        self._chat_seen = len(obs["chat_messages"])
        self._page = page_text(obs, said)
        data: dict[str, Any] = {"url": obs["url"], "reward": float(reward), "task_info": _plain(info.get("task_info"))}
        if error:
            data["error"] = error
        # A reward says the action worked, even one BrowserGym reports as timed out (its actions
        # wait 500 ms, which a loaded machine can exceed after the click landed).
        failed = bool(error) and reward <= 0
        if reward > 0 or failed:
            data["verdict"] = 1 if reward > 0 else -1
        done = bool(terminated or truncated) or self.turn + 1 >= self.max_turns
        ns = NextState("user", self._page, "screen", data)
        status = Status.INVALID_ACTION if failed else Status.OK
        if not done:
            return StepResult(ns, status)
        outcome = float(sum(self._rewards))
        if outcome <= 0:
            data.setdefault("verdict", -1)
        return StepResult(ns, status, done=True, outcome=outcome)

    def oracle_action(self) -> str:
        """The bundled tasks' scripted solution for the page as it is now."""
        assert self._env is not None and self.task is not None, "call reset() first"
        solve = getattr(self._env.unwrapped.task, "oracle_action", None)
        if solve is None:
            raise IndexError(f"BrowserGym task {self.name} has no scripted solution (the bundled openclaw.* tasks have)")
        return solve(self._page)

    def random_action(self, rng: np.random.Generator) -> str:
        """A BrowserGym action on an element of the page, sometimes one that cannot run."""
        bids = _BID.findall(self._page)
        bid = str(rng.choice(bids)) if bids and rng.random() < 0.9 else str(int(rng.integers(1000, 2000)))
        word = str(rng.choice(["hello", "test", "42", ""]))
        choices = [f"click('{bid}')", f"fill('{bid}', '{word}')", f"hover('{bid}')", "scroll(0, 200)", "noop()", word]
        return choices[int(rng.choice(len(choices), p=[0.4, 0.3, 0.1, 0.08, 0.07, 0.05]))]

    def _finish(self) -> None:
        """Close the episode's browsers (BrowserGym starts new ones at every reset anyway)."""
        if self._env is not None:
            try:
                self._call(self._env.close, timeout_s=CLOSE_TIMEOUT_S)
            except Exception:  # a dead browser: the kill below does the job
                pass
        kill_marked(self.marker)

    def close(self) -> None:
        """Stop the browsers, Playwright's driver and the thread (again: nothing to do)."""
        if self._thread.stopped:
            return

        def stop() -> None:
            try:
                if self._env is not None:
                    self._env.close()
            finally:
                if self._driver is not None:
                    self._driver.stop()
                    self._driver = None

        try:
            self._call(stop, timeout_s=CLOSE_TIMEOUT_S)
        except Exception:  # dead or stuck: the kill below does the job, and the driver exits with us
            pass
        kill_marked(self.marker)
        self._thread.stop()


def page_text(obs: dict[str, Any], said: Sequence[str] = ()) -> str:
    """A BrowserGym observation as the agent reads it."""
    parts = [f"URL: {obs['url']}"]
    if obs["last_action_error"]:
        parts.append(f"Error from your last action: {obs['last_action_error']}")
    parts.extend(f"Message from the user: {m}" for m in said)
    if len(obs["open_pages_urls"]) > 1:
        active = int(obs["active_page_index"][0])
        parts.append("Open tabs: " + ", ".join(f"{i}{' (active)' if i == active else ''}: {u}"
                                                for i, u in enumerate(obs["open_pages_urls"])))
    parts.append(flatten_axtree_to_str(obs["axtree_object"]))
    return "\n".join(parts)


def _register(name: str, env_id: str) -> None:
    """Make sure `env_id` is registered: BrowserGym's benchmark packages (browsergym.miniwob, ...)
    register their tasks when imported."""
    if env_id not in gymnasium.registry:
        module = f"browsergym.{name.split('.')[0]}"
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:  # the package is there but lacks something of its own
                raise ValueError(f"BrowserGym task {name!r}: cannot import {module} ({e})") from None
    if env_id not in gymnasium.registry:
        known = sorted(k.removeprefix("browsergym/") for k in gymnasium.registry if k.startswith("browsergym/"))
        raise ValueError(f"unknown BrowserGym task {name!r}; registered: {', '.join(known)} (other benchmarks need "
                         "their package, e.g. pip install browsergym-miniwob for miniwob.*)")


def _plain(value: Any) -> Any:
    """A task's info as JSON data (what a task puts there is its own business)."""
    return json.loads(json.dumps(value, default=str))
