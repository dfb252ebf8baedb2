"""BrowserGym tasks bundled with env=browsergym: BrowserGym's own benchmarks (MiniWoB, WebArena)
need data or servers that are not on PyPI, so these run with browsergym-core alone.

`openclaw.form` (`browsergym/openclaw.form` once this module is imported): a local page
(browsergym_form.html beside this file) with a Name box and the buttons Submit, Cancel and Clear
in a seeded order; the goal names a seeded word. Pressing Submit with that word in the box earns
reward 1, pressing Submit with anything else or Cancel ends the task with 0, Clear empties the box.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from envs.ecosystem import require

require("browsergym.core", "browsergym-core")
from browsergym.core.registration import register_task  # noqa: E402
from browsergym.core.task import AbstractBrowserTask  # noqa: E402

PAGE = Path(__file__).with_name("browsergym_form.html")
WORDS = ("apple", "river", "stone", "cloud", "maple", "ember", "north", "quartz", "violet", "harbor")
BUTTONS = ("Submit", "Cancel", "Clear")


class FormTask(AbstractBrowserTask):
    """Type the goal's word into the Name box and press Submit; see the module docstring."""

    @classmethod
    def get_task_id(cls) -> str:
        return "openclaw.form"

    def __init__(self, seed: int | None) -> None:
        super().__init__(seed)
        self.word = str(self.random.choice(WORDS))
        self.buttons = [str(b) for b in self.random.permutation(BUTTONS)]
        self.url = PAGE.as_uri()
        self.viewport = {"width": 800, "height": 600}
        self.slow_mo = 0  # BrowserGym's default (1 s per Playwright call) is for watching a run

    def setup(self, page: Any) -> tuple[str, dict[str, Any]]:
        page.goto(self.url)
        page.evaluate("buttons => build(buttons)", self.buttons)
        return f'Type "{self.word}" into the Name box, then press Submit.', {"word": self.word, "buttons": self.buttons}

    def validate(self, page: Any, chat_messages: list[dict[str, Any]]) -> tuple[float, bool, str, dict[str, Any]]:
        # The state is read only from this form (another URL or tab is a page the agent made),
        # where only the page's own button handlers write it: BrowserGym's actions run no script.
        if page.url != self.url:
            return 0.0, False, "", {}
        state = page.evaluate("() => ({...document.body.dataset})")
        pressed, name = state.get("pressed"), state.get("name", "")
        if not pressed:
            return 0.0, False, "", {}
        solved = pressed == "Submit" and name == self.word
        if solved:
            message = "Thank you, that is right."
        elif pressed == "Submit":
            message = f"Submitted {name!r}, but the Name box had to say {self.word!r}."
        else:
            message = "The form was cancelled."
        return (1.0 if solved else 0.0), True, message, {"pressed": pressed, "name": name}

    def oracle_action(self, page_text: str) -> str:
        """The next action that solves the form, read off the page as the agent sees it (so a
        step that failed under load is simply tried again)."""
        box = re.search(r"\[(\w+)\] textbox 'Name'([^\n]*)", page_text)
        submit = re.search(r"\[(\w+)\] button 'Submit'", page_text)
        if box is None or submit is None:
            raise IndexError("the form's Name box or Submit button is not on the page")
        if f"value='{self.word}'" in box.group(2):
            return f"click('{submit.group(1)}')"
        return f"fill('{box.group(1)}', '{self.word}')"


register_task(FormTask.get_task_id(), FormTask)
