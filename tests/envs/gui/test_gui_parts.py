"""GUI env parts that need no browser: command parsing, keys, listings, verdicts, process
cleanup, and the OSWorld adapter's translation of observations and actions (no VM)."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from envs.base import NextState
from envs.gui.commands import ActionError, Command, parse_command, tool_schemas
from envs.gui.miniwob_backend import elements_from_dom, key_to_miniwob
from envs.gui.osworld import command_to_pyautogui, elements_from_a11y, load_task_configs, screen_from_obs
from envs.gui.procs import MARKER_VAR, browser_pids, kill_marked, marker
from envs.gui.screen import Element, Screen, describe_changes, diff_listing, image_content_part
from envs.gui.verdict import field_progress, verdict


@pytest.mark.parametrize("raw, expected", [
    ("click(3)", Command("click", (3,))),
    ("I will press it.\nclick( 12 )", Command("click", (12,))),
    ('type(5, "hello, world")', Command("type", (5, "hello, world"))),
    ("type(5, 'it''s')", None),  # adjacent literals: still a string, parsed by Python's rules
    ('key("Enter")', Command("key", ("Enter",))),
    ("click_xy(10.5, 20)", Command("click_xy", (10.5, 20.0))),
    ("scroll(0, -120)", Command("scroll", (0.0, -120.0))),
    ("done()", Command("done", ())),
    ("click(ref=4)", Command("click", (4,))),
    ("<think>click(1) looks wrong</think>Better: click(2)", Command("click", (2,))),
    ('<tool_call>{"name": "type", "arguments": {"ref": 7, "text": "x"}}</tool_call>', Command("type", (7, "x"))),
])
def test_parse_valid_commands(raw, expected):
    cmd = parse_command(raw)
    assert isinstance(cmd, Command), cmd
    if expected is not None:
        assert cmd == expected
    assert cmd.via_tool == ("<tool_call>" in raw)


@pytest.mark.parametrize("raw, needle", [
    ("drag(1, 2)", "Unknown command 'drag'"),
    ("nothing to do here", "No command found"),
    ('type(5, "unterminated)', "Unbalanced quotes"),
    ("click(3", "Missing closing parenthesis"),
    ('click("three")', "integer element id"),
    ("click(2.5)", "integer element id"),
    ("click_xy(1)", "takes 2 argument(s)"),
    ("type(5, 6)", "quoted string"),
    ("click(x)", "must be literals"),
    ('<tool_call>{"name": "fly", "arguments": {}}</tool_call>', "Unknown command 'fly'"),
    ('<tool_call>{"name": "click", "arguments": {}}</tool_call>', "needs argument(s) ref"),
    ('<tool_call>{"name": "click", "arguments": {"ref": 1}', "never closed"),
])
def test_parse_bad_commands_explain(raw, needle):
    out = parse_command(raw)
    assert isinstance(out, str) and needle in out, out


def test_tool_schemas_cover_every_command():
    names = {s["function"]["name"] for s in tool_schemas()}
    assert names == {"click", "click_xy", "type", "key", "scroll", "done"}


@pytest.mark.parametrize("key, expected", [
    ("Enter", "<Enter>"), ("enter", "<Enter>"), ("Return", "<Enter>"), ("<Tab>", "<Tab>"),
    ("a", "a"), ("+", "+"), ("ctrl+a", "C-a"), ("shift+Tab", "S-<Tab>"), ("ArrowDown", "<ArrowDown>"),
])
def test_key_names(key, expected):
    assert key_to_miniwob(key) == expected


@pytest.mark.parametrize("key", ["F13", "hyper+a", "Enterr"])
def test_unknown_keys_are_refused(key):
    with pytest.raises(ActionError):
        key_to_miniwob(key)


def _dom():
    return {"tag": "BODY", "ref": 1, "left": 0, "top": 0, "width": 160, "height": 210, "children": [
        {"tag": "DIV", "ref": 2, "left": 0, "top": 50, "width": 160, "height": 150, "children": [
            {"tag": "BUTTON", "ref": 3, "left": 2, "top": 60, "width": 40, "height": 20, "text": "OK", "children": []},
            {"tag": "INPUT_text", "ref": 4, "left": 2, "top": 90, "width": 100, "height": 20, "value": "ab",
             "focused": True, "children": []},
            {"tag": "LABEL", "ref": 5, "left": 2, "top": 120, "width": 100, "height": 14, "children": [
                {"tag": "INPUT_checkbox", "ref": 6, "left": 2, "top": 120, "width": 12, "height": 12, "value": True, "children": []},
                {"tag": "t", "ref": -1, "left": 16, "top": 120, "width": 30, "height": 12, "text": "apple", "children": []},
            ]},
            {"tag": "DIV", "ref": 7, "left": 2, "top": 400, "width": 50, "height": 12, "text": "below", "children": []},
        ]},
    ]}


def test_elements_from_dom_lists_visible_controls_and_text():
    els = {e.ref: e for e in elements_from_dom(_dom(), 160, 210)}
    assert set(els) == {3, 4, 6, -1}  # containers without text and off-screen elements drop out
    assert els[3].role == "button" and els[3].text == "OK"
    assert els[4].role == "textbox" and els[4].value == "ab" and els[4].focused
    assert els[6].role == "checkbox" and els[6].checked is True and els[6].label == "apple"
    assert els[3].line() == '[3] button "OK" @(2,60 40x20)'
    assert 'value="ab" focused' in els[4].line() and "checked" in els[6].line()


def _screen(elements, fields=None, done=False, raw=None):
    return Screen("do it", elements, np.zeros((4, 4, 3), np.uint8), fields or {}, done, raw)


def test_diff_and_description():
    a = [Element(1, "button", "OK"), Element(2, "textbox", value="")]
    b = [Element(1, "button", "OK"), Element(2, "textbox", value="x")]
    changes = diff_listing([e.line() for e in a], [e.line() for e in b])
    assert changes == {"added": [b[1].line()], "removed": [a[1].line()]}
    assert "value=\"x\"" in describe_changes(changes)
    assert describe_changes({"added": [], "removed": []}) == "No element changed."


def test_field_progress_and_verdict():
    fields = {"target": "Jerald"}
    box_empty = _screen([Element(4, "textbox", value="")], fields)
    box_full = _screen([Element(4, "textbox", value="jerald")], fields)
    assert field_progress(box_empty, box_full, box_empty.elements[0], True) == ["target"]
    assert field_progress(box_full, box_full, None, False) == []
    button = Element(3, "button", "Jerald")
    page = _screen([button], fields)
    assert field_progress(page, page, button, changed=True) == ["target"]
    assert field_progress(page, page, button, changed=False) == []

    def ns(**data):
        return NextState("user", "", "screen", data)

    assert verdict(ns(changed=True, progress=["target"])) == 1
    assert verdict(ns(changed=True, progress=[])) == 0
    assert verdict(ns(changed=False, progress=[])) == -1
    assert verdict(ns(invalid=True, changed=False)) == -1
    assert verdict(ns(done=True, raw_reward=1.0, changed=True)) == 1
    assert verdict(ns(done=True, raw_reward=-1.0, changed=True, progress=["target"])) == -1


def test_image_content_part_round_trips():
    img = np.random.default_rng(0).integers(0, 255, (21, 16, 3), dtype=np.uint8)
    part = image_content_part(img)
    assert part["type"] == "image_url"
    import base64
    png = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(png)).convert("RGB")), img)


def test_kill_marked_kills_a_process_tree_and_its_session():
    marker = f"test-{os.getpid()}:{time.monotonic_ns()}"
    # A marked session leader whose child drops the marker (as Chromium's zygote does).
    proc = subprocess.Popen(
        [sys.executable, "-c", "import os, subprocess, time; env = dict(os.environ); env.pop('%s');"
         "subprocess.Popen(['sleep', '60'], env=env); time.sleep(60)" % MARKER_VAR],
        env={**os.environ, MARKER_VAR: marker}, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(browser_pids(marker)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(browser_pids(marker)) == 2
        assert kill_marked(marker) == 2
        assert browser_pids(marker) == set()
    finally:
        proc.kill()
        proc.wait(timeout=5)


def test_killing_browser_1_spares_browser_10():
    procs = {n: subprocess.Popen(["sleep", "60"], env={**os.environ, MARKER_VAR: marker(n)}, start_new_session=True)
             for n in ("1", "10")}
    try:
        deadline = time.monotonic() + 10
        while not all(browser_pids(marker(n)) for n in procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert kill_marked(marker("1")) == 1
        assert procs["1"].wait(timeout=5) == -9 and procs["10"].poll() is None
    finally:
        for p in procs.values():
            p.kill()
            p.wait(timeout=5)


# ---- OSWorld adapter (no VM) -------------------------------------------------------------
_A11Y = """<desktop-frame xmlns:st="https://accessibility.ubuntu.example.org/ns/state"
  xmlns:cp="https://accessibility.ubuntu.example.org/ns/component">
  <frame name="Files" cp:screencoord="(0, 0)" cp:size="(1920, 1080)">
    <push-button name="Save" st:showing="true" cp:screencoord="(100, 200)" cp:size="(80, 30)"/>
    <entry name="" st:focused="true" cp:screencoord="(300, 200)" cp:size="(200, 30)">draft</entry>
    <check-box name="Bold" st:checked="true" cp:screencoord="(10, 10)" cp:size="(20, 20)"/>
    <push-button name="Hidden" st:showing="false" cp:screencoord="(5, 5)" cp:size="(10, 10)"/>
    <label name="Off screen" cp:screencoord="(3000, 10)" cp:size="(10, 10)"/>
    <filler cp:screencoord="(0, 0)" cp:size="(10, 10)"/>
  </frame>
</desktop-frame>"""


def _png(w=64, h=48):
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (10, 20, 30)).save(buf, format="PNG")
    return buf.getvalue()


def test_osworld_observation_becomes_a_screen():
    screen = screen_from_obs({"screenshot": _png(), "accessibility_tree": _A11Y, "instruction": "Save it"}, 1920, 1080)
    assert screen.instruction == "Save it"
    assert screen.image.shape == (48, 64, 3) and screen.image.dtype == np.uint8
    by_text = {e.text: e for e in screen.elements}
    assert set(by_text) == {"Files", "Save", "", "Bold"}
    assert by_text["Save"].role == "push-button" and by_text["Save"].box == (100, 200, 80, 30)
    assert by_text[""].role == "entry" and by_text[""].value == "draft" and by_text[""].focused
    assert by_text["Bold"].checked is True
    assert [e.ref for e in screen.elements] == [1, 2, 3, 4]
    assert elements_from_a11y("<not xml", 10, 10) == []


def test_osworld_commands_become_pyautogui():
    screen = screen_from_obs({"screenshot": _png(), "accessibility_tree": _A11Y}, 1920, 1080)
    save = next(e for e in screen.elements if e.text == "Save")
    entry = next(e for e in screen.elements if e.role == "entry")
    assert command_to_pyautogui(Command("click", (save.ref,)), screen) == "pyautogui.click(140, 215)"
    assert command_to_pyautogui(Command("click_xy", (10.4, 20.6)), screen) == "pyautogui.click(10, 21)"
    assert command_to_pyautogui(Command("type", (entry.ref, "hi 'you'")), screen) == (
        "pyautogui.click(400, 215); pyautogui.write(\"hi 'you'\", interval=0.01)")
    assert command_to_pyautogui(Command("key", ("Enter",)), screen) == "pyautogui.press('enter')"
    assert command_to_pyautogui(Command("key", ("ctrl+shift+t",)), screen) == "pyautogui.hotkey('ctrl', 'shift', 't')"
    assert command_to_pyautogui(Command("key", ("a",)), screen) == "pyautogui.press('a')"
    assert command_to_pyautogui(Command("scroll", (0.0, 150.0)), screen) == "pyautogui.scroll(-3)"
    assert command_to_pyautogui(Command("scroll", (100.0, 0.0)), screen) == "pyautogui.hscroll(2)"
    assert command_to_pyautogui(Command("done", ()), screen) == "DONE"


def test_osworld_task_configs_and_lazy_import(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "t1.json").write_text(json.dumps({"id": "t1", "instruction": "x"}))
    (tmp_path / "t2.json").write_text(json.dumps({"id": "t2", "instruction": "y"}))
    assert sorted(load_task_configs(str(tmp_path))) == ["t1", "t2"]
    assert list(load_task_configs([{"id": 5}, {"no": "id"}])) == ["5"]
    from envs.gui.env import GuiEnv

    try:
        import desktop_env  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install desktop-env"):
            GuiEnv(backend="osworld", osworld={"tasks": str(tmp_path)})
    with pytest.raises(ValueError, match="unknown GUI backend"):
        GuiEnv(backend="vnc")
