"""The MiniWoB++ task families GuiEnv poses, their task ids, and scripted oracle solvers.

A family is a MiniWoB page; its generator draws a new instance from a seed, so a task is a
(family, seed) pair, id `family/seed` (`click-button/17`), and a bare family name is a fresh
instance each episode. A solver reads the current page (a `Screen`: elements, values,
miniwob's task fields) and the turn number, and returns the next command as text, written as
the system prompt asks a policy to write it (these become the warm start's demonstrations).
Families without a solver are still posed; their oracle is unknown.
"""
from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Sequence

from envs.gui.screen import Element, Screen, norm_text

Solver = Callable[[Screen, int], str]

#: Every family the env poses (MiniWoB page names). Chosen to need only clicks, typing and keys.
FAMILIES: tuple[str, ...] = (
    "click-test", "click-test-2", "click-button", "click-link", "unicode-test", "focus-text",
    "focus-text-2", "enter-text", "enter-text-2", "enter-password", "login-user", "click-option",
    "click-checkboxes", "click-button-sequence", "click-dialog", "click-dialog-2", "click-tab",
    "simple-arithmetic", "click-collapsible", "choose-list", "use-autocomplete", "enter-date",
    "click-widget", "navigate-tree", "identify-shape", "grid-coordinate", "click-tab-2",
    "click-menu", "search-engine", "email-inbox",
)


class NoSolution(RuntimeError):
    """The page does not look the way the solver expects."""


def check_families(families: Sequence[str] | str | None) -> tuple[str, ...]:
    """The families asked for: names, "oracle" (those with solvers) or None (all); an unknown
    name raises ValueError."""
    if families == "oracle":
        return tuple(SOLVERS)
    names = FAMILIES if families is None else (families,) if isinstance(families, str) else tuple(map(str, families))
    unknown = [f for f in names if f not in FAMILIES]
    if unknown or not names:
        raise ValueError(f"unknown GUI families {unknown or '[]'}; choose among oracle, {', '.join(FAMILIES)}")
    return tuple(dict.fromkeys(names))


def task_ids(families: Sequence[str], seeds_per_family: int | None) -> list[str]:
    """`family/seed` for seeds 0..seeds_per_family-1 of each family, or the bare family names
    (a fresh page each episode) when seeds_per_family is None."""
    if seeds_per_family is None:
        return list(families)
    if int(seeds_per_family) < 1:
        raise ValueError(f"seeds_per_family must be at least 1 (or null), got {seeds_per_family}")
    return [f"{f}/{s}" for s, f in itertools.product(range(int(seeds_per_family)), families)]


def parse_task_id(task_id: str) -> tuple[str, int | None]:
    """(family, page seed or None for a fresh page each episode); ValueError if malformed."""
    family, sep, seed = task_id.partition("/")
    if family not in FAMILIES or sep and not seed.isdigit():
        raise ValueError(f"malformed GUI task id {task_id!r}: ids look like 'click-button/17' or 'click-button' "
                         f"(families: {', '.join(FAMILIES)})")
    return family, int(seed) if sep else None


def _find(screen: Screen, pred: Callable[[Element], bool], what: str) -> Element:
    for e in screen.elements:
        if pred(e):
            return e
    raise NoSolution(f"no {what} on the page")


def _with_text(screen: Screen, text: str, roles: tuple[str, ...] | None = None) -> Element:
    """The element showing `text`: the same case first ("cancel" beside "Cancel"), then any case."""
    fits = [e for e in screen.elements if norm_text(e.text) == norm_text(text) and (roles is None or e.role in roles)]
    exact = [e for e in fits if " ".join(e.text.split()) == " ".join(text.split())]
    if not fits:
        raise NoSolution(f"no element {text!r} on the page")
    return (exact or fits)[0]


def _click(screen: Screen, target: Element) -> str:
    """click(id), or click_xy at a pixel of the target that no later element covers when its
    center is covered (pages may overlap buttons; the later one is drawn on top)."""
    x0, y0, w, h = target.box
    later = screen.elements[screen.elements.index(target) + 1:]
    covers = [e.box for e in later if not _inside(e.box, target.box)]

    def free(x: int, y: int) -> bool:
        return not any(bx <= x < bx + bw and by <= y < by + bh for bx, by, bw, bh in covers)

    cx, cy = (int(c) for c in target.center)
    if free(cx, cy):
        return f"click({target.ref})"
    points = sorted(((x, y) for x in range(x0 + 1, x0 + w - 1) for y in range(y0 + 1, y0 + h - 1)),
                    key=lambda p: (p[0] - cx) ** 2 + (p[1] - cy) ** 2)
    for x, y in points:
        if free(x, y):
            return f"click_xy({x}, {y})"
    raise NoSolution(f"element {target.ref} is covered by others")


def _inside(inner: tuple[int, int, int, int], outer: tuple[int, int, int, int]) -> bool:
    return outer[0] <= inner[0] and outer[1] <= inner[1] and inner[0] + inner[2] <= outer[0] + outer[2] \
        and inner[1] + inner[3] <= outer[1] + outer[3]


def _type(box: Element, value: str) -> str:
    """type(id, "text") with double quotes, as the system prompt writes it."""
    return f"type({box.ref}, {json.dumps(value, ensure_ascii=False)})"


def _textboxes(screen: Screen) -> list[Element]:
    return [e for e in screen.elements if e.role == "textbox"]


def _click_target(screen: Screen, turn: int) -> str:
    return _click(screen, _with_text(screen, screen.fields["target"]))


def _click_only_button(screen: Screen, turn: int) -> str:
    return _click(screen, _find(screen, lambda e: e.role == "button", "button"))


def _fill_then_submit(values: Callable[[Screen], list[str]], submit: str) -> Solver:
    """Type each value into the text boxes in page order (skipping done ones), then submit."""

    def solve(screen: Screen, turn: int) -> str:
        boxes = _textboxes(screen)
        wanted = values(screen)
        if len(boxes) < len(wanted):
            raise NoSolution(f"expected {len(wanted)} text boxes, found {len(boxes)}")
        for box, value in zip(boxes, wanted):
            if box.value != value:
                if box.value:
                    raise NoSolution(f"text box {box.ref} already holds {box.value!r}")
                return _type(box, value)
        return _click(screen, _with_text(screen, submit, ("button",)))

    return solve


def _enter_text_2(screen: Screen) -> list[str]:
    text = screen.fields["text"]
    return [text.lower() if screen.fields["case"] == "lower" else text.upper()]


def _focus_nth(screen: Screen, turn: int) -> str:
    boxes = _textboxes(screen)
    n = int(screen.fields["target"])
    if not 1 <= n <= len(boxes):
        raise NoSolution(f"no text box number {n}")
    return _click(screen, boxes[n - 1])


def _check_then_submit(targets: Callable[[Screen], set[str]], role: str) -> Solver:
    """Set every box/radio whose label is a target (and clear the others), then submit."""

    def solve(screen: Screen, turn: int) -> str:
        want = {norm_text(t) for t in targets(screen)}
        for e in screen.elements:
            if e.role == role and bool(e.checked) != (norm_text(e.label) in want):
                return _click(screen, e)
        return _click(screen, _with_text(screen, "Submit", ("button",)))

    return solve


def _checkbox_targets(screen: Screen) -> set[str]:
    return {v for k, v in screen.fields.items() if k.startswith("target")}


def _sequence(screen: Screen, turn: int) -> str:
    return _click(screen, _with_text(screen, "ONE" if turn == 0 else "TWO", ("button",)))


def _close_dialog(screen: Screen, turn: int) -> str:
    return _click(screen, _find(screen, lambda e: e.role == "button" and not e.text, "close button"))


def _dialog_button(screen: Screen, turn: int) -> str:
    target = screen.fields["target"]
    if target.lower() == "x":  # the title bar's close button has an icon, not text
        return _close_dialog(screen, turn)
    return _click(screen, _with_text(screen, target, ("button",)))


def _tab(screen: Screen, turn: int) -> str:
    return _click(screen, _with_text(screen, "Tab #" + screen.fields["target"], ("link",)))


_ARITH = re.compile(r"^\s*(-?\d+)\s*([-+*x/])\s*(-?\d+)\s*=\s*$")


def _arithmetic(screen: Screen) -> list[str]:
    for e in screen.elements:
        m = _ARITH.match(e.text)
        if m:
            a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
            return [str({"+": a + b, "-": a - b, "*": a * b, "x": a * b, "/": a // b if b else 0}[op])]
    raise NoSolution("no arithmetic problem on the page")


SOLVERS: dict[str, Solver] = {
    "click-test": _click_only_button,
    "click-test-2": _click_target,
    "click-button": _click_target,
    "unicode-test": _click_target,
    "click-link": _click_target,
    "click-dialog-2": _dialog_button,
    "focus-text": lambda screen, turn: _click(screen, _textboxes(screen)[0]),
    "focus-text-2": _focus_nth,
    "enter-text": _fill_then_submit(lambda s: [s.fields["target"]], "Submit"),
    "enter-text-2": _fill_then_submit(_enter_text_2, "Submit"),
    "enter-password": _fill_then_submit(lambda s: [s.fields["target"]] * 2, "Submit"),
    "login-user": _fill_then_submit(lambda s: [s.fields["username"], s.fields["password"]], "Login"),
    "simple-arithmetic": _fill_then_submit(_arithmetic, "Submit"),
    "click-option": _check_then_submit(lambda s: {s.fields["target"]}, "radio"),
    "click-checkboxes": _check_then_submit(_checkbox_targets, "checkbox"),
    "click-button-sequence": _sequence,
    "click-dialog": _close_dialog,
    "click-tab": _tab,
}
