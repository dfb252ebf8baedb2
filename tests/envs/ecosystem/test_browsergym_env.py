"""env=browsergym on a real BrowserGym env (browsergym-core; Playwright driving Debian's Chromium):
the bundled form task solved by its oracle and failed by a scripted policy through the Runner,
no browser left behind, a task BrowserGym registers itself (openended), bad task names and ids,
and the CLI."""
from __future__ import annotations

import asyncio
import itertools
import json
import re
from pathlib import Path

import pytest

from agent.actors import Action, OracleActor
from agent.rollout import EpisodeJob, Runner
from envs.base import NextState
from envs.gui.browser import OFFLINE_ARGS
from envs.gui.procs import browser_pids, owner_prefix
from tests.cli import REPO, run_cli

pytestmark = pytest.mark.browser
pytest.importorskip("browsergym.core", reason="optional extra browsergym-core not installed: .venv/bin/pip install -r requirements-extras.txt")
from envs.ecosystem.browsergym import BrowserGymEnv  # noqa: E402


class WrongName:
    """Reads the page like an agent, but first acts on an element that is not there, then types
    a wrong name and submits it. Notes the command lines of its env's browsers."""

    browsers: list[list[bytes]] = []

    def begin(self, env, messages, tools) -> None:
        WrongName.browsers = [Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0") for p in browser_pids(env.marker)]
        self.page = messages[-1]["content"]
        # Submit again until it lands (a BrowserGym action may time out on a loaded machine)
        self.plan = itertools.chain(["goto('file:///etc/hostname')", "click('9999')", "fill('{box}', 'nobody')"],
                                    itertools.repeat("click('{submit}')"))

    async def act(self) -> Action:
        bids = {"box": re.search(r"\[(\w+)\] textbox 'Name'", self.page)[1],
                "submit": re.search(r"\[(\w+)\] button 'Submit'", self.page)[1]}
        return Action(text=next(self.plan).format(**bids))

    def observe(self, action: Action, next_state: NextState) -> None:
        self.page = next_state.content

    async def end(self) -> None:
        pass


def test_the_oracle_solves_the_form_and_a_wrong_name_fails_it_through_the_runner():
    runner = Runner(lambda: BrowserGymEnv(), lambda job: OracleActor() if job.episode_id == "solve" else WrongName(),
                    n_envs=2, progress=False)  # two envs at once: each with its own Playwright thread
    jobs = [EpisodeJob(episode_id=e, task_id=f"seed-0000{i}", group_id=e, seed=i) for i, e in enumerate(["solve", "wrong"])]
    try:
        solved, wrong = asyncio.run(runner.run(jobs))
    finally:
        runner.close()
    assert not browser_pids(f"{owner_prefix()}browsergym-")  # every Chromium the envs started is gone
    # BrowserGym's two browsers (the task's and its chat's) are Debian's Chromium, offline
    mains = [c for c in WrongName.browsers if c[0].endswith(b"chromium") and not any(a.startswith(b"--type=") for a in c)]
    assert len(mains) == 2, WrongName.browsers
    for flag in OFFLINE_ARGS:
        assert all(flag.encode() in c for c in mains), flag
    first = solved.turns[0].messages
    assert first[0]["role"] == "system" and "fill(bid: str, value: str" in first[0]["content"]  # BrowserGym's action set
    assert re.match(r'Goal: Type "\w+" into the Name box', first[1]["content"]) and "textbox 'Name'" in first[1]["content"]
    assert all(t.next_state.kind == "screen" and t.next_state.role == "user" for t in solved.turns + wrong.turns)
    # the oracle: fill then click, retried on the page it sees if a 500 ms BrowserGym action timed out
    assert solved.outcome == 1.0 and 2 <= len(solved.turns) <= 6
    assert solved.turns[-1].action.startswith("click(") and solved.turns[-1].next_state.data["verdict"] == 1
    assert "Message from the user: Thank you, that is right." in solved.turns[-1].next_state.content
    assert solved.turns[-1].next_state.data["task_info"]["pressed"] == "Submit"
    # the wrong name: the missing element is BrowserGym's error, the wrong submission its reward 0
    assert wrong.outcome == 0.0 and wrong.turns[-1].episode_done
    # no goto by default: a host file is not a page the agent can open
    assert wrong.turns[0].status == "invalid_action" and "Invalid action type 'goto'" in wrong.turns[0].next_state.content
    assert wrong.turns[0].next_state.data["url"].endswith("browsergym_form.html")
    assert wrong.turns[1].status == "invalid_action" and wrong.turns[1].next_state.data["verdict"] == -1
    assert 'Could not find element with bid "9999"' in wrong.turns[1].next_state.content
    assert "but the Name box had to say" in wrong.turns[-1].next_state.content
    assert wrong.turns[-1].next_state.data["task_info"]["name"] in ("nobody", "")  # "" when the fill timed out under load


def test_a_task_of_browsergym_itself_runs_and_the_turn_limit_keeps_its_rewards():
    page = REPO / "envs" / "ecosystem" / "browsergym_form.html"
    env = BrowserGymEnv(task="openended", task_kwargs={"start_url": page.as_uri(), "goal": "Look around."}, max_turns=1)
    try:
        obs, info = env.reset(options={"task_id": "seed-00000"})
        assert obs.startswith("Goal: Look around.") and "textbox 'Name'" in obs
        with pytest.raises(IndexError, match="no scripted solution"):
            env.oracle_action()
        obs, reward, done, truncated, info = env.step("noop(10)")
        assert done and not truncated and info["status"] == "ok" and info["outcome"] == 0.0  # BrowserGym's reward, not -1
    finally:
        env.close()
    assert not browser_pids(env.marker)


def test_bad_task_names_ids_and_action_subsets_are_one_line():
    with pytest.raises(ValueError, match=r"unknown BrowserGym task 'nope.task'; registered: .*openclaw\.form"):
        BrowserGymEnv(task="nope.task")
    with pytest.raises(ValueError, match="Unknown high-level action subspace"):
        BrowserGymEnv(action_subsets=["bid", "teleport"])
    env = BrowserGymEnv(task="browsergym/openclaw.form")
    try:
        with pytest.raises(KeyError, match="unknown BrowserGym task id 'bogus'"):
            env.reset(options={"task_id": "bogus"})
        assert env.load_task("seed-00007").meta == {"task": "openclaw.form", "seed": 7}
    finally:
        env.close()
    env.close()  # closing twice is allowed


@pytest.mark.slow  # a CLI process and four browsers: ~40-110 s on a loaded 2-core machine
def test_browsergym_runs_through_the_cli(tmp_path):
    run_dir = tmp_path / "run"
    p = run_cli("env=browsergym", "policy=oracle", "mode=eval", "n_envs=2", "steps=1", "tasks_per_step=2",
                "group_size=1", "eval.every=0", f"run_dir={run_dir}")
    assert p.returncode == 0, p.stderr[-2000:]
    row = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert row["episodes"] == 2 and row["outcome_mean"] == 1.0
    p = run_cli("env=browsergym", "env.task=nope.task", "policy=oracle", "mode=eval", f"run_dir={tmp_path}/r2")
    assert p.returncode != 0 and "unknown BrowserGym task 'nope.task'" in p.stderr and "Traceback" not in p.stderr
