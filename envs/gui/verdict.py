"""The rules verdict on a GUI next state: did the action move the task forward?

    +1  the episode ended with a positive reward, or the action made progress toward the
        task's fields (a field's value newly appears in a text box or as the label of a newly
        checked box, or the element acted on carries a field's value and the page changed)
    -1  the episode ended with a reward <= 0, the action was invalid, or nothing on the page
        changed (no element and no pixel)
     0  the page changed, but not toward any field (navigation, a first click on a text box...)

The env stores the result in next_state.data["verdict"], which the generic rules judge reads.
"""
from __future__ import annotations

from envs.base import NextState
from envs.gui.screen import Element, Screen, norm_text



def _satisfied(screen: Screen) -> set[str]:
    present = {norm_text(e.value) for e in screen.elements if e.value}
    present |= {norm_text(e.label or e.text) for e in screen.elements if e.checked}
    return {key for key, value in screen.fields.items() if value and norm_text(value) in present}


def field_progress(before: Screen, after: Screen, target: Element | None, changed: bool) -> list[str]:
    """Field keys the action moved toward (see the module doc), sorted."""
    keys = _satisfied(after) - _satisfied(before)
    if target is not None and changed:
        text = norm_text(target.text or target.label)
        keys |= {k for k, v in before.fields.items() if v and norm_text(v) == text}
    return sorted(keys)


def verdict(next_state: NextState) -> int:
    """+1, 0 or -1 for a GUI next state (kind "screen"), from the data the env recorded."""
    data = next_state.data
    if data.get("done"):
        return 1 if (data.get("raw_reward") or 0) > 0 else -1
    if data.get("invalid") or not data.get("changed"):
        return -1
    return 1 if data.get("progress") else 0
