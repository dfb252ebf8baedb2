"""MiniWoB++ pages in a pooled headless Chromium: start a task, act, read the page back.

We drive miniwob's own page API (core.startEpisodeReal, core.getDOMInfo, core.elementClick, the
WOB_* globals) and its Selenium action helpers, as `miniwob.MiniWoBEnvironment` does, but one
browser serves every task (a task switch only loads another page) and one script call reads
the whole state after each action.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import miniwob
from miniwob.constants import TASK_HEIGHT, TASK_WIDTH, WEBDRIVER_SPECIAL_KEYS
from miniwob.fields import get_field_extractor
from miniwob.screenshot import get_screenshot, pil_to_numpy_array
from miniwob.selenium_actions import execute_click_coords, execute_press_key, execute_type_text
from selenium.webdriver.common.action_chains import ActionChains

from envs.gui.browser import Browser, BrowserError, BrowserPool, driver_errors
from envs.gui.commands import ActionError, Command
from envs.gui.screen import Element, Screen

HTML_DIR = Path(miniwob.__file__).parent / "html" / "miniwob"
_READY = "return typeof core !== 'undefined' && !!document.getElementById('sync-task-cover');"
# Element ids: an element keeps the id it got earlier in the episode, and the page hands out
# new ones from a counter reset at each start; a page reused across episodes would also keep ids
# from the last one. They are dropped at each start, so an episode's ids depend only on its
# seed and actions, in any page: what a fork's replay in a page of its own relies on.
_START = (
    "core.endEpisode(0); document.querySelectorAll('[data-wob_ref]').forEach(function (e) { delete e.dataset.wob_ref; });"
    " Math.seedrandom(arguments[0]); core.setDataMode('train');"
    "core.EPISODE_MAX_TIME = arguments[1]; core.startEpisodeReal(); return WOB_TASK_READY;"
)
_STATE = (
    "return {done: WOB_DONE_GLOBAL, raw: WOB_RAW_REWARD_GLOBAL, reason: WOB_REWARD_REASON,"
    " utterance: core.getUtterance(), dom: core.getDOMInfo()};"
)
_ROLES = {
    "BUTTON": "button", "A": "link", "INPUT_checkbox": "checkbox", "INPUT_radio": "radio",
    "INPUT_submit": "button", "INPUT_button": "button", "TEXTAREA": "textbox", "SELECT": "combobox",
    "OPTION": "option", "LABEL": "label", "t": "text", "LI": "listitem", "IMG": "image",
    "H1": "heading", "H2": "heading", "H3": "heading", "H4": "heading",
}
_INTERACTIVE = {"button", "link", "checkbox", "radio", "textbox", "combobox", "option", "listitem"}
_KEY_ALIASES = {"return": "Enter", "esc": "Escape", "up": "ArrowUp", "down": "ArrowDown",
                "left": "ArrowLeft", "right": "ArrowRight", "del": "Delete", "pgup": "PageUp",
                "pgdn": "PageDown", "space": "Space", " ": "Space"}
_SPECIAL = {k.strip("<>").lower(): k for k in WEBDRIVER_SPECIAL_KEYS}
_MODIFIERS = {"ctrl": "C-", "control": "C-", "shift": "S-", "alt": "A-", "meta": "M-", "cmd": "M-"}


def key_to_miniwob(key: str) -> str:
    """'Enter' -> '<Enter>', 'ctrl+a' -> 'C-a', 'a' -> 'a'; ActionError for unknown keys."""
    *mods, base = key.split("+") if len(key) > 1 else [key]
    prefix = ""
    for mod in mods:
        if mod.strip().lower() not in _MODIFIERS:
            raise ActionError(f"unknown modifier {mod!r} in key {key!r} (use ctrl, shift, alt or meta)")
        prefix += _MODIFIERS[mod.strip().lower()]
    name = _KEY_ALIASES.get(base.lower(), base)
    if len(name) == 1 and 32 <= ord(name) < 127:
        return prefix + name
    if name.strip("<>").lower() in _SPECIAL:
        return prefix + _SPECIAL[name.strip("<>").lower()]
    raise ActionError(f"unknown key {key!r}: use a character or a key name such as Enter, Tab, Backspace, Escape, ArrowDown")


def elements_from_dom(dom: dict[str, Any], width: int, height: int) -> list[Element]:
    """The visible elements worth listing: text, values, controls and leaves, in page order."""
    out: list[Element] = []

    def visit(node: dict[str, Any], parent: dict[str, Any] | None) -> None:
        tag = node.get("tag", "")
        role = _ROLES.get(tag) or ("textbox" if tag.startswith("INPUT_") else tag.lower())
        x, y, w, h = (int(round(node.get(k, 0))) for k in ("left", "top", "width", "height"))
        visible = x < width and y < height and x + w > 0 and y + h > 0
        children = node.get("children") or []
        text = (node.get("text") or "").strip()
        value = node.get("value")
        checked = value if isinstance(value, bool) else None
        listed = visible and parent is not None and (
            text or role in _INTERACTIVE or value is not None or node.get("focused")
            or not children and w >= 8 and h >= 8  # shapes and swatches, not borders or handles
        )
        if listed:
            label = ""
            if checked is not None and parent is not None:  # <label><input>TEXT</label>
                label = " ".join((c.get("text") or "").strip() for c in parent.get("children") or [] if c is not node).strip()
            out.append(Element(
                ref=int(node["ref"]), role=role, text=text, box=(x, y, w, h),
                value=None if checked is not None or value is None else str(value),
                checked=checked, focused=bool(node.get("focused")), label=label,
            ))
        for child in children:
            visit(child, node)

    visit(dom, None)
    return out


class MiniwobBackend:
    """One MiniWoB page at a time in one leased browser."""

    screen_size = (TASK_WIDTH, TASK_HEIGHT)

    def __init__(self, pool: BrowserPool, episode_time_s: float = 3600.0) -> None:
        self.pool = pool
        self.episode_ms = int(episode_time_s * 1000)
        self.browser: Browser | None = None
        self.task: str | None = None
        self.fields: dict[str, str] = {}

    def start(self, task: str, seed: int) -> Screen:
        if self.browser is None:
            self.browser = self.pool.acquire()
        self.browser.open((HTML_DIR / f"{task}.html").as_uri(), _READY)
        self.task = task
        if not self.browser.run(_START, int(seed), self.episode_ms):
            self._wait_ready()
        self.fields = {}
        screen = self.observe()
        self.fields = screen.fields = self._fields(screen.instruction)
        return screen

    def _wait_ready(self, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.browser.run("return WOB_TASK_READY;"):
            if time.monotonic() > deadline:
                raise BrowserError(f"task {self.task} did not become ready in {timeout_s} s")
            time.sleep(0.02)

    def _fields(self, utterance: str) -> dict[str, str]:
        try:
            return {str(k): str(v) for k, v in get_field_extractor(self.task)(utterance)}
        except KeyError:  # miniwob has no extractor for this task
            return {}

    def observe(self) -> Screen:
        state = self.browser.run(_STATE)
        utterance = state["utterance"]
        if isinstance(utterance, dict):  # some tasks report their fields themselves
            utterance = utterance.get("utterance", "")
        width, height = self.screen_size
        with driver_errors("screenshot"):
            image = get_screenshot(self.browser.driver, *self.browser.inner_size, width, height)
        return Screen(
            instruction=utterance,
            elements=elements_from_dom(state["dom"], width, height),
            image=pil_to_numpy_array(image),
            fields=dict(self.fields),
            done=bool(state["done"]),
            raw_reward=float(state["raw"]) if state["done"] else None,
            reason=None if state["reason"] is None else str(state["reason"]),
        )

    def perform(self, cmd: Command, screen: Screen) -> None:
        """Carry a checked command out (refs exist, coordinates are on screen)."""
        driver = self.browser.driver
        width, height = self.screen_size
        with driver_errors(str(cmd)):
            if cmd.name in ("click", "type"):
                element = screen.find(cmd.args[0])
                x, y = element.center
                # A real pointer click at the element's center (focus and mouse events fire as
                # for a user); one whose center is off screen is clicked the way miniwob does.
                if 0 <= x < width and 0 <= y < height or element.ref < 0:
                    execute_click_coords(x, y, driver)
                elif self.browser.run("return core.elementClick(arguments[0]);", element.ref) is not True:
                    raise ActionError(f"element {element.ref} could not be clicked")
                if cmd.name == "type":
                    execute_type_text(cmd.args[1], driver)
            elif cmd.name == "click_xy":
                execute_click_coords(cmd.args[0], cmd.args[1], driver)
            elif cmd.name == "key":
                execute_press_key(key_to_miniwob(cmd.args[0]), driver)
            elif cmd.name == "scroll":
                chain = ActionChains(driver)
                chain.w3c_actions.wheel_action.scroll(x=width // 2, y=height // 2, delta_x=int(cmd.args[0]), delta_y=int(cmd.args[1]))
                chain.w3c_actions.perform()

    def finish(self) -> float:
        """The agent said done(): the outcome is the page's reward, or a failure if the task
        had not ended itself (MiniWoB tasks end when their goal is met or missed)."""
        state = self.browser.run(
            "if (!WOB_DONE_GLOBAL) core.endEpisode(-1, false, 'agent declared done'); return WOB_RAW_REWARD_GLOBAL;"
        )
        return float(state)

    def release(self, broken: bool = False) -> None:
        """Give the browser back to the pool (the next episode may get another one)."""
        if self.browser is not None:
            self.pool.release(self.browser, broken=broken)
            self.browser = None

    def close(self) -> None:
        """Give the browser back: all a backend holds (a fork's, dropped if its env's copy failed)."""
        self.release()
