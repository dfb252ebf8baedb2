"""GUI tasks as (family, seed): ids, the held-out split from the same families, fixed pages per
id, wrong actions failing, and the CLI's one-line refusal of an unknown family."""
from __future__ import annotations

import pytest

from envs.gui.env import GuiEnv
from envs.gui.tasks import SOLVERS, check_families, parse_task_id, task_ids
from tests.cli import run_cli


def test_task_ids_are_families_by_seed_in_a_fixed_order():
    ids = task_ids(check_families(["click-button", "enter-text"]), 3)
    assert ids == ["click-button/0", "enter-text/0", "click-button/1", "enter-text/1", "click-button/2", "enter-text/2"]
    assert task_ids(check_families("oracle"), 50) == task_ids(tuple(SOLVERS), 50) and len(task_ids(SOLVERS, 50)) == 900
    assert task_ids(("click-tab",), None) == ["click-tab"]
    assert parse_task_id("click-tab/17") == ("click-tab", 17) and parse_task_id("click-tab") == ("click-tab", None)


def test_only_pages_of_a_family_with_a_solver_are_demonstrable():
    env = GuiEnv(families=["click-button", "choose-list"], seeds_per_family=2)  # choose-list has no scripted solver
    try:
        assert [t for t in env.task_ids() if env.demonstrable(t)] == ["click-button/0", "click-button/1"]
    finally:
        env.close()


@pytest.mark.parametrize("bad, needle", [
    (["click-buton"], "unknown GUI families ['click-buton']; choose among oracle, click-test"),
    ([], "unknown GUI families []"),
])
def test_unknown_family_is_one_clear_error(bad, needle):
    with pytest.raises(ValueError) as e:
        check_families(bad)
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("bad", ["click-button/x", "nope/3", "click-button/-1"])
def test_malformed_task_id_is_refused(bad):
    with pytest.raises(ValueError, match="malformed GUI task id"):
        parse_task_id(bad)


def test_seeds_per_family_must_be_positive():
    with pytest.raises(ValueError, match="seeds_per_family must be at least 1"):
        task_ids(("click-tab",), 0)


@pytest.mark.browser
def test_held_out_tasks_are_other_seeds_of_the_same_families_and_pages_are_fixed_by_id():
    env = GuiEnv(families=["click-button", "enter-text", "click-checkboxes"], seeds_per_family=20)
    other = GuiEnv(families=["click-button", "enter-text", "click-checkboxes"], seeds_per_family=20)
    try:
        split = env.task_split(12, seed=0)
        assert split == env.task_split(12, seed=0) and split.held_out != env.task_split(12, seed=1).held_out
        assert len(split.held_out) == 12 and len(split.train) == 48 and not set(split.train) & set(split.held_out)
        families = {parse_task_id(t)[0] for t in split.held_out}
        assert families <= {parse_task_id(t)[0] for t in split.train} and len(families) >= 2

        pages = {}
        for task in ("enter-text/3", "enter-text/4", "click-checkboxes/3"):
            obs, info = env.reset(seed=1, options={"task_id": task})
            obs2, _ = other.reset(seed=99, options={"task_id": task})  # another env, another episode seed
            assert obs["text"] == obs2["text"] and info["task_id"] == task
            assert info["messages"][-1]["content"].startswith(f"GUI task {parse_task_id(task)[0]}. The page:")
            pages[task] = obs["text"]
        assert len(set(pages.values())) == 3  # another seed or family, another page
        with pytest.raises(ValueError, match="not of a posed family"):
            env.reset(options={"task_id": "click-tab/1"})
    finally:
        env.close()
        other.close()


@pytest.mark.browser
def test_offer_tools_false_leaves_text_commands_only():
    env = GuiEnv(families=["enter-text"], seeds_per_family=2, offer_tools=False)
    try:
        _, info = env.reset(options={"task_id": "enter-text/1"})
        assert info["tools"] == [] and 'type(id, "text")' in info["messages"][0]["content"]
        _, _, _, _, info = env.step(env.oracle_action())
        assert info["status"] == "ok" and info["next_state"].data["progress"] == ["target"]
    finally:
        env.close()


@pytest.mark.browser
@pytest.mark.parametrize("task, wrong", [
    ("click-button/0", lambda env: next(f"click({e.ref})" for e in env.screen.elements
                                        if e.role == "button" and e.text != env.screen.fields["target"])),
    ("click-tab/0", lambda env: next(f"click({e.ref})" for e in env.screen.elements
                                     if e.role == "link" and e.text != "Tab #" + env.screen.fields["target"])),
])
def test_a_wrong_click_fails_the_task(task, wrong):
    env = GuiEnv(families=[task.split("/")[0]], seeds_per_family=5)
    try:
        env.reset(seed=0, options={"task_id": task})
        action = wrong(env)
        assert action != env.oracle_action()
        _, reward, terminated, _, info = env.step(action)
        if not terminated:  # a page that ignores a wrong click: the task is still not done
            _, reward, terminated, _, info = env.step("done()")
        assert terminated and reward <= 0 and info["next_state"].data["verdict"] == -1
    finally:
        env.close()


@pytest.mark.browser
def test_wrong_text_fails_enter_text():
    env = GuiEnv(families=["enter-text"], seeds_per_family=5)
    try:
        env.reset(seed=0, options={"task_id": "enter-text/2"})
        box = next(e for e in env.screen.elements if e.role == "textbox")
        env.step(f'type({box.ref}, "{env.screen.fields["target"]}x")')
        submit = next(e for e in env.screen.elements if e.role == "button" and e.text == "Submit")
        _, reward, terminated, _, _ = env.step(f"click({submit.ref})")
        assert terminated and reward <= 0
    finally:
        env.close()


@pytest.mark.slow
def test_cli_refuses_an_unknown_family_in_one_line(tmp_path):
    p = run_cli("env=gui", "env.families=[click-buton]", "policy=oracle", "mode=eval", "wandb.mode=disabled",
                f"run_dir={tmp_path}/bad")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "unknown GUI families ['click-buton']; choose among oracle," in p.stderr.strip().splitlines()[-1]
