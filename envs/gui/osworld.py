"""OSWorld adapter (`GuiEnv(backend="osworld")`, config `env.backend=osworld`): drives an
OSWorld `desktop_env.DesktopEnv` VM with this env's commands and observations.

Install: `pip install desktop-env` (OSWorld's package; it is not in requirements.txt) plus a VM
provider (VMware/VirtualBox/Docker/a cloud; see OSWorld's README) and task JSONs
(evaluation_examples/). Nothing here runs without that VM; the translation functions below are
pure and tested without one.

Mapping:
  observation  {"screenshot": PNG bytes, "accessibility_tree": XML, "instruction": str}
               -> Screen (image, instruction, elements from the a11y tree with their boxes)
  click(ref)            -> pyautogui.click(x, y) at the element's center
  click_xy(x, y)        -> pyautogui.click(x, y)
  type(ref, "t")        -> click at the element, then pyautogui.write("t")
  key("ctrl+a")         -> pyautogui.hotkey('ctrl', 'a'); key("Enter") -> pyautogui.press('enter')
  scroll(dx, dy)        -> pyautogui.scroll / hscroll, one wheel click per 50 pixels (down = -)
  done()                -> "DONE", then DesktopEnv.evaluate(): outcome +1 if the score is 1,
                           else -1 (as OpenClaw-RL's GUI setting); the raw score is kept
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from envs.gui.commands import ActionError, Command
from envs.gui.screen import Element, Screen, png_to_array

PIXELS_PER_WHEEL_CLICK = 50
_KEY_NAMES = {"return": "enter", "escape": "esc", "arrowup": "up", "arrowdown": "down",
              "arrowleft": "left", "arrowright": "right", "control": "ctrl", "pageup": "pageup",
              "pagedown": "pagedown", "backspace": "backspace", "delete": "delete", "space": "space"}
#: a11y roles worth listing even without a name
_CONTROLS = {"push-button", "button", "check-box", "radio-button", "text", "entry", "combo-box",
             "menu-item", "toggle-button", "link", "list-item", "page-tab", "spin-button"}


def _attr(node: ET.Element, name: str) -> str | None:
    """An attribute by local name, whatever its namespace (OSWorld's changed over versions)."""
    for key, value in node.attrib.items():
        if key == name or key.endswith("}" + name):
            return value
    return None


def _pair(value: str | None) -> tuple[int, int] | None:
    if not value:
        return None
    try:
        a, b = (int(float(v)) for v in value.strip("()[] ").split(","))
    except ValueError:
        return None
    return a, b


def elements_from_a11y(xml: str, width: int, height: int) -> list[Element]:
    """Visible, named or interactive nodes of an OSWorld accessibility tree, numbered from 1."""
    if not xml:
        return []
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return []
    out: list[Element] = []
    for node in root.iter():
        role = node.tag.rsplit("}", 1)[-1]
        pos, size = _pair(_attr(node, "screencoord")), _pair(_attr(node, "size"))
        if pos is None or size is None or size[0] <= 0 or size[1] <= 0:
            continue
        if _attr(node, "showing") == "false" or _attr(node, "visible") == "false":
            continue
        x, y = pos
        if x >= width or y >= height or x + size[0] <= 0 or y + size[1] <= 0:
            continue
        editable = role in ("entry", "text")
        content = (node.text or "").strip()
        text = (_attr(node, "name") or ("" if editable else content)).strip()
        if not text and role not in _CONTROLS:
            continue
        checkable = role in ("check-box", "radio-button", "toggle-button")
        out.append(Element(
            ref=len(out) + 1, role=role, text=text, box=(x, y, size[0], size[1]),
            value=content if editable else None,
            checked=(_attr(node, "checked") == "true") if checkable else None,
            focused=_attr(node, "focused") == "true",
        ))
    return out


def screen_from_obs(obs: dict[str, Any], width: int, height: int, done: bool = False,
                    raw_reward: float | None = None) -> Screen:
    return Screen(
        instruction=str(obs.get("instruction") or ""),
        elements=elements_from_a11y(obs.get("accessibility_tree") or "", width, height),
        image=png_to_array(obs["screenshot"]),
        done=done, raw_reward=raw_reward,
    )


def pyautogui_key(key: str) -> str:
    """key("ctrl+a") -> pyautogui.hotkey('ctrl', 'a'); key("Enter") -> pyautogui.press('enter')."""
    parts = [p.strip() for p in key.split("+")] if len(key) > 1 else [key]
    names = [_KEY_NAMES.get(p.lower(), p.lower() if len(p) > 1 else p) for p in parts]
    if len(names) == 1:
        return f"pyautogui.press({names[0]!r})"
    return f"pyautogui.hotkey({', '.join(repr(n) for n in names)})"


def command_to_pyautogui(cmd: Command, screen: Screen) -> str:
    """The pyautogui code (or "DONE") OSWorld runs for one checked command."""
    if cmd.name == "done":
        return "DONE"
    if cmd.name in ("click", "type"):
        x, y = (int(round(v)) for v in screen.find(cmd.args[0]).center)
        code = f"pyautogui.click({x}, {y})"
        if cmd.name == "type":
            code += f"; pyautogui.write({cmd.args[1]!r}, interval=0.01)"
        return code
    if cmd.name == "click_xy":
        return f"pyautogui.click({int(round(cmd.args[0]))}, {int(round(cmd.args[1]))})"
    if cmd.name == "key":
        return pyautogui_key(cmd.args[0])
    if cmd.name == "scroll":
        dx, dy = (int(round(v / PIXELS_PER_WHEEL_CLICK)) for v in cmd.args)
        codes = ([f"pyautogui.scroll({-dy})"] if dy else []) + ([f"pyautogui.hscroll({dx})"] if dx else [])
        return "; ".join(codes) or "pass"
    raise ActionError(f"no OSWorld translation for {cmd}")


def load_task_configs(tasks: str | list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """OSWorld task JSONs: a folder (searched recursively), one file, or a list of dicts."""
    if isinstance(tasks, (str, Path)):
        path = Path(tasks)
        files = sorted(path.rglob("*.json")) if path.is_dir() else [path]
        configs = [json.loads(f.read_text()) for f in files]
    else:
        configs = list(tasks)
    return {str(c["id"]): c for c in configs if isinstance(c, dict) and "id" in c}


class OSWorldBackend:
    """One OSWorld VM. `desktop_env` is imported only here, when the backend is built."""

    def __init__(self, tasks: str | list[dict[str, Any]], provider_name: str = "vmware",
                 path_to_vm: str | None = None, screen_size: tuple[int, int] = (1920, 1080),
                 pause_s: float = 0.5, **desktop_env_kwargs: Any) -> None:
        try:
            from desktop_env.desktop_env import DesktopEnv
        except ImportError as e:
            raise ImportError("backend=osworld needs OSWorld's package: pip install desktop-env (see docs/gui.md)") from e
        self.configs = load_task_configs(tasks)
        if not self.configs:
            raise ValueError(f"no OSWorld task configs found in {tasks!r}")
        self.screen_size = tuple(screen_size)
        self.pause_s = pause_s
        self.env = DesktopEnv(provider_name=provider_name, path_to_vm=path_to_vm, action_space="pyautogui",
                              screen_size=self.screen_size, require_a11y_tree=True, **desktop_env_kwargs)
        self._obs: dict[str, Any] | None = None
        self._done = False

    def task_ids(self) -> list[str]:
        return sorted(self.configs)

    def start(self, task: str, seed: int) -> Screen:
        self._obs = self.env.reset(task_config=self.configs[task], seed=seed)
        self._done = False
        return self.observe()

    def observe(self) -> Screen:
        return screen_from_obs(self._obs, *self.screen_size, done=self._done)

    def perform(self, cmd: Command, screen: Screen) -> None:
        self._obs, _, self._done, _ = self.env.step(command_to_pyautogui(cmd, screen), self.pause_s)

    def finish(self) -> float:
        self._obs, _, self._done, _ = self.env.step("DONE", self.pause_s)
        score = float(self.env.evaluate())
        return 1.0 if score >= 1.0 else -1.0

    def release(self, broken: bool = False) -> None:
        """The VM stays with the env between episodes (OSWorld resets it to a snapshot)."""

    def close(self) -> None:
        self.env.close()
