"""What a GUI page looks like to the agent: elements, their compact listing, what changed.

Both backends (MiniWoB pages, OSWorld desktops) turn their raw observation into a `Screen`;
the env renders it as text (instruction + one line per visible element) and an image.
"""
from __future__ import annotations

import base64
import dataclasses
import io
from typing import Any

import numpy as np
from PIL import Image


@dataclasses.dataclass
class Element:
    """One visible element. `ref` is the id actions name; `box` is (x, y, width, height) in
    screenshot pixels."""

    ref: int
    role: str
    text: str = ""
    box: tuple[int, int, int, int] = (0, 0, 0, 0)
    value: str | None = None  # text fields
    checked: bool | None = None  # checkboxes and radio buttons
    focused: bool = False
    label: str = ""  # the text around a checkbox or radio button (its <label>)

    @property
    def center(self) -> tuple[float, float]:
        x, y, w, h = self.box
        return x + w / 2, y + h / 2

    def line(self) -> str:
        parts = [f"[{self.ref}] {self.role}"]
        if self.text:
            parts.append(_quote(self.text))
        if self.label and self.label != self.text:
            parts.append(f"label={_quote(self.label)}")
        if self.value is not None:
            parts.append(f"value={_quote(self.value)}")
        if self.checked is not None:
            parts.append("checked" if self.checked else "unchecked")
        if self.focused:
            parts.append("focused")
        x, y, w, h = self.box
        parts.append(f"@({x},{y} {w}x{h})")
        return " ".join(parts)


def norm_text(s: str) -> str:
    """Text as compared with task fields: whitespace collapsed, lower case."""
    return " ".join(s.split()).lower()


def _quote(s: str, limit: int = 80) -> str:
    s = " ".join(s.split())
    return '"' + (s if len(s) <= limit else s[: limit - 3] + "...") + '"'


@dataclasses.dataclass
class Screen:
    """One observation of a GUI: instruction, task fields, elements, pixels, episode end."""

    instruction: str
    elements: list[Element]
    image: np.ndarray  # (height, width, 3) uint8
    fields: dict[str, str] = dataclasses.field(default_factory=dict)
    done: bool = False
    raw_reward: float | None = None  # the backend's own reward once done
    reason: str | None = None

    def find(self, ref: int) -> Element | None:
        for e in self.elements:
            if e.ref == ref:
                return e
        return None

    def listing(self) -> list[str]:
        return [e.line() for e in self.elements]

    def text(self) -> str:
        body = "\n".join(self.listing()) or "(no visible elements)"
        return f"Instruction: {self.instruction}\nElements (id role text state @(x,y wxh)):\n{body}"


def diff_listing(before: list[str], after: list[str]) -> dict[str, list[str]]:
    """Lines added and removed between two listings (an element that changed shows in both)."""
    old, new = set(before), set(after)
    return {"added": [l for l in after if l not in old], "removed": [l for l in before if l not in new]}


def describe_changes(changes: dict[str, list[str]], limit: int = 40) -> str:
    if not changes["added"] and not changes["removed"]:
        return "No element changed."
    lines = ["Changes since your last action:"]
    lines += [f"- {l}" for l in changes["removed"][:limit]]
    lines += [f"+ {l}" for l in changes["added"][:limit]]
    return "\n".join(lines)


def png_to_array(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.uint8)


def image_content_part(image: np.ndarray) -> dict[str, Any]:
    """A screenshot as an OpenAI-style image content part, for policies that take images:
    {"role": "user", "content": [{"type": "text", ...}, image_content_part(obs["screenshot"])]}."""
    buf = io.BytesIO()
    Image.fromarray(np.asarray(image, dtype=np.uint8)).save(buf, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    return {"type": "image_url", "image_url": {"url": url}}
