"""GuiEnv (`openclaw/GUI-v0`): web GUI tasks (MiniWoB++ in headless Chromium, or OSWorld
desktops through an adapter) as an AgentEnv.

The observation is a Dict: "screenshot" (uint8 array, height x width x 3) and "text" (the
instruction and a compact listing of visible elements with ids, roles, text, state and boxes).
The chat side (info["messages"], NextState.content) carries the text; a policy that takes
images adds the screenshot with `envs.gui.screen.image_content_part`. Actions are text
commands (envs/gui/commands.py). The reward is the backend's own at termination; `done()`
before the task ended itself counts as a failure; the turn limit truncates.
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces
from PIL import Image

from envs.base import AgentEnv, AnyText, ForkError, NextState, Status, StepResult, Task
from envs.gui.browser import BrowserError, BrowserPool
from envs.gui.commands import ActionError, Command, fmt_num, parse_command, tool_schemas
from envs.gui.screen import Screen, describe_changes, diff_listing
from envs.gui.tasks import SOLVERS, NoSolution, check_families, parse_task_id, task_ids
from envs.gui.verdict import field_progress, verdict

SYSTEM_PROMPT = """You operate a graphical user interface to complete the task in the instruction.
After each action you see the page again: the instruction and one line per visible element,
`[id] role "text" state @(x,y wxh)` (x, y: top-left corner in screenshot pixels).
End each reply with exactly one command:
  click(id)              click an element
  click_xy(x, y)         click at a pixel of the screenshot
  type(id, "text")       click an element, then type text
  key("Enter")           press a key or combination (Tab, Backspace, ctrl+a, ...)
  scroll(dx, dy)         scroll by pixels
  done()                 say the task is finished"""

_episodes = itertools.count()


class GuiEnv(AgentEnv):
    """A GUI env. `families`: MiniWoB task names, "oracle" (those with scripted solvers) or None
    (all); `seeds_per_family`: N poses tasks `family/seed` for seeds 0..N-1 (each a fixed page,
    so training and held-out tasks are instances of the same families), None poses the bare
    families (a fresh page from the episode's seed each reset); `backend="miniwob"` (default)
    or `"osworld"` (see envs/gui/osworld.py, whose tasks its own `osworld.tasks` names);
    `pool` shares browsers between envs (the env makes its own when None and closes it on
    close()); `screenshot_dir` saves each screenshot as PNG and puts its path in the data;
    `offer_tools=False` leaves the commands out of info["tools"] (the system prompt describes
    them; a chat template without native tools renders the schemas as ~500 more prompt tokens).

    `fork()` (MiniWoB only) replays the episode: the same task from the same seed in a page of
    its own, then every command that reached the page, and checks that the page came back as
    the original sees it (its listing, fields and end state; a page whose actions are not
    deterministic raises ForkError). A pool passed in is shared with the fork; an env's own pool
    is not (the fork starts one, closed with it)."""

    fork_shared = ("pool",)

    def __init__(
        self,
        max_turns: int = 15,
        families: list[str] | str | None = None,
        seeds_per_family: int | None = None,
        backend: str = "miniwob",
        pool: BrowserPool | None = None,
        episode_time_s: float = 3600.0,
        screenshot_dir: str | None = None,
        osworld: dict[str, Any] | None = None,
        offer_tools: bool = True,
    ) -> None:
        super().__init__(max_turns=max_turns)
        if backend == "miniwob":
            from envs.gui.miniwob_backend import MiniwobBackend

            self._families: tuple[str, ...] | None = check_families(families)
            self._task_ids = task_ids(self._families, seeds_per_family)
            self._own_pool = pool is None
            self.pool = BrowserPool(max_idle=1) if pool is None else pool
            self.backend = MiniwobBackend(self.pool, episode_time_s)
        elif backend == "osworld":
            from envs.gui.osworld import OSWorldBackend

            if families is not None:  # seeds_per_family has a default in env=gui; it means nothing here
                raise ValueError("families picks MiniWoB pages; OSWorld's tasks are osworld.tasks")
            self._own_pool, self.pool, self._families = False, None, None
            self.backend = OSWorldBackend(**(osworld or {}))
            self._task_ids = list(self.backend.task_ids())
        else:
            raise ValueError(f"unknown GUI backend {backend!r}; use miniwob or osworld")
        width, height = self.backend.screen_size
        self.observation_space = spaces.Dict({
            "screenshot": spaces.Box(0, 255, (height, width, 3), np.uint8),
            "text": AnyText(),
        })
        self.screenshot_dir = Path(screenshot_dir) if screenshot_dir else None
        self.offer_tools = bool(offer_tools)
        self.screen: Screen | None = None
        self.episode_id = ""
        self._seed = 0  # the page's seed this episode
        self._performed: list[Command] = []  # the commands that reached the page: what a fork replays

    # ---- AgentEnv hooks ------------------------------------------------------------------
    def task_ids(self) -> list[str]:
        return list(self._task_ids)

    def load_task(self, task_id: str) -> Task:
        """An OSWorld task, or a MiniWoB page: `family/seed` (any seed) or `family` of a posed family."""
        if self._families is None:
            if task_id not in self._task_ids:
                raise ValueError(f"unknown OSWorld task {task_id!r}; known: {', '.join(self._task_ids)}")
            return Task(task_id=task_id, prompt=f"GUI task {task_id}. The page:")
        family, page_seed = parse_task_id(task_id)
        if family not in self._families:
            raise ValueError(f"GUI task {task_id!r} is not of a posed family ({', '.join(self._families)})")
        return Task(task_id=task_id, prompt=f"GUI task {family}. The page:",
                    meta={"family": family, "page_seed": page_seed, "has_oracle": family in SOLVERS})

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def tools(self) -> list[dict[str, Any]]:
        return tool_schemas() if self.offer_tools else []

    def _start(self, task: Task) -> NextState:
        seed = task.meta.get("page_seed")
        if seed is None:  # a bare family (or an OSWorld task): a fresh page from the episode's seed
            seed = int(self.np_random.integers(2**31 - 1))
        self.episode_id = f"{self._page(task).replace('/', '-')}-{seed}-{next(_episodes)}"
        self._seed, self._performed = seed, []
        try:
            self.screen = self.backend.start(self._page(task), seed)
        except BrowserError:  # a browser that died between episodes: one retry on a fresh one
            self.backend.release(broken=True)
            self.screen = self.backend.start(self._page(task), seed)
        data = self._base_data(self.screen)
        data.update(screenshot=self._save(self.screen))
        return NextState(role="user", content=self.screen.text(), kind="screen", data=data)

    def _act(self, action: str) -> StepResult:
        before = self.screen
        cmd = parse_command(action)
        problem = cmd if isinstance(cmd, str) else self._check(cmd, before)
        if problem is not None:
            return self._invalid(problem, cmd if isinstance(cmd, Command) else None)
        target = before.find(cmd.args[0]) if cmd.name in ("click", "type") else None
        try:
            after, outcome = self._perform(self.backend, cmd, before)
            self._performed.append(cmd)
        except BrowserError as e:
            self.backend.release(broken=True)
            ns = NextState(role=self._role(cmd), content=f"The browser failed: {e}", kind="screen",
                           data={**self._base_data(before), "command": str(cmd), "error": str(e), "verdict": 0})
            return StepResult(ns, status=Status.INFRA_ERROR)
        except ActionError as e:
            return self._invalid(str(e), cmd)
        self.screen = after
        changes = diff_listing(before.listing(), after.listing())
        changed = bool(changes["added"] or changes["removed"]) or not np.array_equal(before.image, after.image)
        data = self._base_data(after)
        data.update(
            command=str(cmd), changes=changes, changed=changed, screenshot=self._save(after),
            progress=field_progress(before, after, target, changed),
        )
        if cmd.name == "done":
            data.update(done=True, raw_reward=outcome)
        ns = NextState(role=self._role(cmd), content=self._content(after, changes, outcome), kind="screen", data=data)
        ns.data["verdict"] = verdict(ns)
        return StepResult(ns, done=outcome is not None, outcome=outcome)

    def oracle_action(self) -> str:
        """The scripted solver's next command for the current page (NoSolution if the task has
        no solver or the page is not what the solver expects)."""
        assert self.task is not None and self.screen is not None, "call reset() first"
        solver = SOLVERS.get(self.task.meta.get("family", ""))
        if solver is None:
            raise NoSolution(f"task {self.task.task_id} has no scripted solver")
        return solver(self.screen, self.turn)

    def demonstrable(self, task_id: str) -> bool:
        """MiniWoB pages of a family with a scripted solver (OSWorld tasks have none)."""
        return self._families is not None and parse_task_id(task_id)[0] in SOLVERS

    def random_action(self, rng: np.random.Generator) -> str:
        """A random command: mostly plausible, sometimes malformed, off screen or unknown."""
        refs = [e.ref for e in self.screen.elements] if self.screen else []
        ref = int(rng.choice(refs)) if refs and rng.random() < 0.8 else int(rng.integers(-50, 200))
        width, height = self.backend.screen_size
        x, y = int(rng.integers(-20, width + 20)), int(rng.integers(-20, height + 20))
        word = "".join(rng.choice(list("abcXYZ019 '\"\\")) for _ in range(int(rng.integers(0, 8))))
        choices = [
            f"click({ref})", f"click_xy({x}, {y})", f"type({ref}, {word!r})",
            f'key("{rng.choice(["Enter", "Tab", "Backspace", "ctrl+a", "a", "F13", "shift+Tab"])}")',
            f"scroll({int(rng.integers(-100, 100))}, {int(rng.integers(-200, 200))})",
            f'type({ref}, "{word}', "click()", "drag(1, 2)", word, "done()",
        ]
        weights = np.array([6, 4, 4, 3, 2, 1, 1, 1, 1, 0.3])
        return choices[int(rng.choice(len(choices), p=weights / weights.sum()))]

    @staticmethod
    def _perform(backend: Any, cmd: Command, before: Screen) -> tuple[Screen, float | None]:
        """Carry a checked command out on `backend`'s page: the page after it, and the outcome if
        the episode ended."""
        if cmd.name == "done":
            outcome = backend.finish()
            return backend.observe(), outcome
        backend.perform(cmd, before)
        after = backend.observe()
        return after, after.raw_reward if after.done else None

    def _fork_resources(self) -> dict[int, Any]:
        """A backend of the fork's own whose page is this episode's page again: the task started
        from the same seed, then the same commands (see the class docstring)."""
        from envs.gui.miniwob_backend import MiniwobBackend

        if not isinstance(self.backend, MiniwobBackend):
            raise ForkError("the GUI env forks MiniWoB pages only (an OSWorld desktop cannot be replayed here)")
        if self.screen is None:
            raise ForkError("the GUI env forks mid-episode only: call reset() first")
        pool = BrowserPool(max_idle=1) if self._own_pool else None
        backend = MiniwobBackend(self.pool if pool is None else pool, self.backend.episode_ms / 1000)
        try:
            screen = backend.start(self._page(self.task), self._seed)
            for cmd in self._performed:
                screen, _ = self._perform(backend, cmd, screen)
            if (screen.text(), screen.fields, screen.done, screen.raw_reward) != (
                    self.screen.text(), self.screen.fields, self.screen.done, self.screen.raw_reward):
                raise ForkError(f"GUI task {self.task.task_id} is not deterministic: replaying its "
                                f"{len(self._performed)} commands from seed {self._seed} gave another page")
        except BaseException:
            backend.release()
            if pool is not None:
                pool.close()
            raise
        return {id(self.backend): backend, **({id(self.pool): pool} if pool is not None else {})}

    def _finish(self) -> None:
        """The browser stays leased to this env for its next episode (that is the reuse)."""

    def close(self) -> None:
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.release()
            if hasattr(backend, "close"):
                backend.close()
        if getattr(self, "_own_pool", False):
            self.pool.close()

    # ---- Dict observations ---------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        text, info = super().reset(seed=seed, options=options)
        return self._obs(text), info

    def step(self, action: str):
        text, reward, terminated, truncated, info = super().step(action)
        return self._obs(text), reward, terminated, truncated, info

    def _obs(self, text: str) -> dict[str, Any]:
        return {"screenshot": self.screen.image.copy(), "text": text}

    # ---- helpers -------------------------------------------------------------------------
    @staticmethod
    def _page(task: Task) -> str:
        """What the backend opens: the MiniWoB family, or the OSWorld task id."""
        return task.meta.get("family", task.task_id)

    def _check(self, cmd: Command, screen: Screen) -> str | None:
        """Why a parsed command cannot run on this screen, or None."""
        if cmd.name in ("click", "type") and screen.find(cmd.args[0]) is None:
            ids = ", ".join(str(e.ref) for e in screen.elements[:30])
            return f"There is no element with id {cmd.args[0]}. Visible ids: {ids or 'none'}."
        if cmd.name == "click_xy":
            width, height = self.backend.screen_size
            x, y = cmd.args
            if not (0 <= x < width and 0 <= y < height):
                return f"({fmt_num(x)}, {fmt_num(y)}) is off screen: x must be in [0, {width}), y in [0, {height})."
        return None

    def _invalid(self, message: str, cmd: Command | None) -> StepResult:
        data = {**self._base_data(self.screen), "invalid": True, "changed": False, "progress": [],
                "changes": {"added": [], "removed": []}, "error": message,
                "command": None if cmd is None else str(cmd)}
        ns = NextState(role=self._role(cmd), content=f"Invalid action: {message}\nThe page did not change.",
                       kind="screen", data=data)
        ns.data["verdict"] = verdict(ns)
        return StepResult(ns, status=Status.INVALID_ACTION)

    @staticmethod
    def _role(cmd: Command | str | None) -> str:
        return "tool" if isinstance(cmd, Command) and cmd.via_tool else "user"

    def _base_data(self, screen: Screen) -> dict[str, Any]:
        return {
            "task": self.task.task_id if self.task else None, "instruction": screen.instruction,
            "fields": dict(screen.fields), "done": screen.done, "raw_reward": screen.raw_reward,
            "reason": screen.reason, "screenshot_shape": list(screen.image.shape),
        }

    @staticmethod
    def _content(after: Screen, changes: dict[str, list[str]], outcome: float | None) -> str:
        if outcome is not None:
            return f"The episode ended with reward {outcome:g}.\n{describe_changes(changes)}"
        return f"{after.text()}\n\n{describe_changes(changes)}"

    def _save(self, screen: Screen) -> str | None:
        if self.screenshot_dir is None:
            return None
        self.screenshot_dir.mkdir(parents=True, exist_ok=True)
        path = self.screenshot_dir / f"{self.episode_id}-{self.turn:03d}.png"
        Image.fromarray(screen.image).save(path)
        return str(path)
