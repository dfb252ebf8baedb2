"""The MiniWoB++ tasks GuiEnv poses, and scripted oracle solvers for some of them.

A solver reads the current page (a `Screen`: elements, values, miniwob's task fields) and the
turn number, and returns the next command as text, so the oracle works on every random
instance of its task. Tasks without a solver are still posed; their oracle is unknown.
"""
from __future__ import annotations

import re
from collections.abc import Callable

from envs.gui.screen import Element, Screen, norm_text

Solver = Callable[[Screen, int], str]

#: Every task the env poses (MiniWoB page names). Chosen to need only clicks, typing and keys.
TASKS: tuple[str, ...] = (
    "click-test", "click-test-2", "click-button", "click-link", "unicode-test", "focus-text",
    "focus-text-2", "enter-text", "enter-text-2", "enter-password", "login-user", "click-option",
    "click-checkboxes", "click-button-sequence", "click-dialog", "click-dialog-2", "click-tab",
    "simple-arithmetic", "click-collapsible", "choose-list", "use-autocomplete", "enter-date",
    "click-widget", "navigate-tree", "identify-shape", "grid-coordinate", "click-tab-2",
    "click-menu", "search-engine", "email-inbox",
)


class NoSolution(RuntimeError):
    """The page does not look the way the solver expects."""



def _find(screen: Screen, pred: Callable[[Element], bool], what: str) -> Element:
    for e in screen.elements:
        if pred(e):
            return e
    raise NoSolution(f"no {what} on the page")


def _with_text(screen: Screen, text: str, roles: tuple[str, ...] | None = None) -> Element:
    return _find(screen, lambda e: norm_text(e.text) == norm_text(text) and (roles is None or e.role in roles), f"element {text!r}")


def _textboxes(screen: Screen) -> list[Element]:
    return [e for e in screen.elements if e.role == "textbox"]


def _click_target(screen: Screen, turn: int) -> str:
    return f"click({_with_text(screen, screen.fields['target']).ref})"


def _click_only_button(screen: Screen, turn: int) -> str:
    return f"click({_find(screen, lambda e: e.role == 'button', 'button').ref})"


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
                return f"type({box.ref}, {value!r})"
        return f"click({_with_text(screen, submit, ('button',)).ref})"

    return solve


def _enter_text_2(screen: Screen) -> list[str]:
    text = screen.fields["text"]
    return [text.lower() if screen.fields["case"] == "lower" else text.upper()]


def _focus_nth(screen: Screen, turn: int) -> str:
    boxes = _textboxes(screen)
    n = int(screen.fields["target"])
    if not 1 <= n <= len(boxes):
        raise NoSolution(f"no text box number {n}")
    return f"click({boxes[n - 1].ref})"


def _check_then_submit(targets: Callable[[Screen], set[str]], role: str) -> Solver:
    """Set every box/radio whose label is a target (and clear the others), then submit."""

    def solve(screen: Screen, turn: int) -> str:
        want = {norm_text(t) for t in targets(screen)}
        for e in screen.elements:
            if e.role == role and bool(e.checked) != (norm_text(e.label) in want):
                return f"click({e.ref})"
        return f"click({_with_text(screen, 'Submit', ('button',)).ref})"

    return solve


def _checkbox_targets(screen: Screen) -> set[str]:
    return {v for k, v in screen.fields.items() if k.startswith("target")}


def _sequence(screen: Screen, turn: int) -> str:
    return f"click({_with_text(screen, 'ONE' if turn == 0 else 'TWO', ('button',)).ref})"


def _close_dialog(screen: Screen, turn: int) -> str:
    return f"click({_find(screen, lambda e: e.role == 'button' and not e.text, 'close button').ref})"


def _dialog_button(screen: Screen, turn: int) -> str:
    target = screen.fields["target"]
    if target.lower() == "x":  # the title bar's close button has an icon, not text
        return _close_dialog(screen, turn)
    return f"click({_with_text(screen, target, ('button',)).ref})"


def _tab(screen: Screen, turn: int) -> str:
    return f"click({_with_text(screen, 'Tab #' + screen.fields['target'], ('link',)).ref})"


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
    "focus-text": lambda screen, turn: f"click({_textboxes(screen)[0].ref})",
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
