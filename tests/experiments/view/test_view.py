"""experiments.view: the static site of a run, built from records written by the run log itself
(meta.advantage by the learner's own code) and checked in headless Chromium (marked browser)."""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from agent.policy.models import byte_tokenizer
from agent.turn import OPDSignal, PRMScore, Turn
from envs.base import NextState
from experiments.view import terminal
from experiments.view.__main__ import main as view_main
from experiments.view.site import ViewError, build
from experiments.view.tokens import colour, token_pieces
from learner.advantages import build_samples
from learner.runlog import RunLog
from learner.training import with_advantages
from tests.cli import REPO

TOK = byte_tokenizer()
ANSWER = 'I will run the tests first.\n<tool_call>\n{"name": "bash", "arguments": {"command": "pytest -q"}}\n</tool_call>'
INJECTION = 'done <script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
PUSHED = {"tests": 1.5, "first": -1.2, "pytest": 0.9}  # teacher - student on these words' tokens


def _ids(text: str) -> list[int]:
    return TOK.encode(text, add_special_tokens=False)


def _turn(episode: str, task: str, step_index: int, response: str, *, prompt: list[int], status: str = "ok",
          outcome: float = 1.0, prm: dict | None = None, opd: dict | None = None, next_state: NextState | None = None,
          done: bool = False) -> Turn:
    ids = _ids(response)
    return Turn(episode_id=episode, task_id=task, group_id=episode.rsplit("-g", 1)[0], step_index=step_index,
                policy_version=int(episode[1]), prompt_ids=prompt, response_ids=ids,
                rollout_logprobs=[-1.0 - 0.1 * (i % 7) for i in range(len(ids))], action=response,
                next_state=next_state or NextState("tool", "ok", "shell", {}), status=status, finish_reason="stop",
                outcome=outcome, episode_done=done, prm=PRMScore(**prm) if prm else None,
                opd=OPDSignal(**opd) if opd else None)


def _teacher(response: str, logprobs: list[float]) -> list[float]:
    """Teacher log-probs: the student's, moved by PUSHED on those words and a little elsewhere."""
    shift = [0.15 * math.sin(i) for i in range(len(response))]
    for word, d in PUSHED.items():
        at = response.index(word)
        shift[at:at + len(word)] = [d] * len(word)
    return [lp + s for lp, s in zip(logprobs, shift)]  # ASCII: one byte token per character


def _write_run(run_dir: Path, mode: str, env: str) -> None:
    log = RunLog(run_dir)
    log.write_config(yaml.safe_dump({"env": {"name": env}, "mode": {"name": mode}, "model": {"name": "tiny", "path": "tiny"},
                                     "seed": 0, "steps": 2}))
    prompt = _ids(TOK.apply_chat_template([{"role": "user", "content": "Fix the failing import."}], tokenize=False,
                                          add_generation_prompt=True))
    first = _turn("s0-t0-g0", "fix-imports", 0, ANSWER, prompt=prompt,
                  prm={"votes": [1, 1, -1], "score": 1, "texts": ["good: runs the tests", "fine", "should read first"]},
                  next_state=NextState("tool", "\x1b[31mFAILED\x1b[0m test_utils.py\n50%\r100% done", "shell", {"exit_code": 1}))
    first.opd = OPDSignal(votes=[1], hints=["run the tests before editing"], texts=["[rules] hint"],
                          hint="run the tests before editing", accepted=True,
                          teacher_logprobs=_teacher(ANSWER, first.rollout_logprobs))
    delta = _ids("<|im_end|>\n<|im_start|>tool\nFAILED test_utils.py<|im_end|>\n<|im_start|>assistant\n")
    second = _turn("s0-t0-g0", "fix-imports", 1, INJECTION, prompt=prompt + first.response_ids + delta, done=True,
                   prm={"votes": [-1], "score": -1, "texts": ["<b>bad</b>"]},
                   opd={"votes": [-1], "hints": [""], "texts": ["no hint"], "hint": "", "accepted": False},
                   next_state=NextState("user", "page", "screen", {"screenshot": "screenshots/s0-t0-g0-001.png"}))
    (run_dir / "screenshots").mkdir()
    Image.fromarray(np.tile(np.arange(160, dtype=np.uint8)[:, None, None], (1, 120, 3))).save(run_dir / "screenshots/s0-t0-g0-001.png")
    third = _turn("s1-t0-g0", "count-lines", 0, "wc -l", prompt=prompt, status="invalid_action", outcome=-1.0, done=True,
                  prm={"votes": [-1], "score": -1, "texts": ["no"]})
    for step, turns in ((0, [first, second]), (1, [third])):
        samples, _ = build_samples(turns, mode)
        log.turns(with_advantages(turns, samples))
        log.metrics({"step": step, "reward_mean": 0.1 * step, "outcome_mean": 1.0 - 2 * step, "policy_version": step + 1,
                     "judge_audit": {"pearson": 0.8 - step, "turns": 6, "undefined": None}})


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("view")
    _write_run(root / "combine", "combine", "terminal")
    _write_run(root / "binary", "binary", "terminal")
    build([root / "combine", root / "binary"], root / "site")
    return root


def test_token_pieces_join_to_the_text_and_a_split_character_goes_to_its_last_token():
    text = "h\u00e9llo \u2713<|im_end|>"
    ids = _ids(text)
    pieces = token_pieces(TOK, ids)
    assert len(pieces) == len(ids) and "".join(pieces) == text
    assert pieces[1:3] == ["", "\u00e9"] and pieces[-1] == "<|im_end|>"


def test_terminal_output_is_escaped_coloured_and_overwritten_by_carriage_returns():
    out = terminal.to_html("\x1b[31mFAILED\x1b[0m <b>x</b>\n50%\r100% done\x1b[2K")
    assert '<span style="color:#e05252">FAILED</span> &lt;b&gt;x&lt;/b&gt;' in out
    assert out.endswith("\n100% done") and "50%" not in out


def test_pages_hold_the_runs_records(site):
    combine = (site / "site/r0/e0.html").read_text()
    assert "<script" not in combine and "onerror=" not in combine and "&lt;b&gt;bad&lt;/b&gt;" in combine
    assert "accepted" in combine and "run the tests before editing" in combine and "no positive vote" in combine
    assert (site / "site/r0/shots/s0-t0-g0-001.png").is_file() and 'src="shots/s0-t0-g0-001.png"' in combine
    data = (site / "site/data/index.js").read_text()
    rows = json.loads(data[data.index("{"):data.rindex("}") + 1])["rows"]
    assert [(r[0], r[3], r[4], r[5]) for r in rows] == [(0, "fix-imports", 0, 1.0), (0, "count-lines", 1, -1.0),
                                                          (1, "fix-imports", 0, 1.0), (1, "count-lines", 1, -1.0)]


def test_the_index_plots_the_judge_audit_beside_the_progress_curves(site):
    index = (site / "site/index.html").read_text()
    assert "judge audit: Pearson r" in index and "r0 step 1: -0.2" in index and "r1 step 0: 0.8" in index


def test_the_benchmarks_synthetic_run_builds(tmp_path):
    from experiments.bench.view import write_run

    write_run(tmp_path / "run", 20, turns_per_episode=8)  # episodes of 8, 8 and 4 turns
    data = (build([tmp_path / "run"], tmp_path / "site").parent / "data" / "index.js").read_text()
    rows = json.loads(data[data.index("{"):data.rindex("}") + 1])["rows"]
    assert len(rows) == 3 and all((tmp_path / "site" / "r0" / f"e{i}.html").is_file() for i in range(3))


def test_cli_gives_one_line_for_bad_input(tmp_path):
    with pytest.raises(SystemExit) as stop:
        view_main([str(tmp_path / "nope"), "--out", str(tmp_path / "site")])
    assert "no such run dir" in str(stop.value.code) and "\n" not in str(stop.value.code)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "mine.txt").write_text("keep")
    with pytest.raises(ViewError, match="not empty"):
        build([], tmp_path / "busy")
    assert (tmp_path / "busy" / "mine.txt").read_text() == "keep"


def test_serve_answers_on_localhost_and_stops_on_sigterm(site, tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "experiments.view", str(site / "combine"), "--out", str(tmp_path / "s"),
                          "--serve", "0"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [p.stdout.readline(), p.stdout.readline()]
        url = lines[1].split()[1]
        assert url.startswith("http://127.0.0.1:"), lines
        with urllib.request.urlopen(url + "r0/e0.html", timeout=30) as r:
            assert b"fix-imports" in r.read()
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=120) == 0 and p.stdout.read().strip() == "stopped"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.fixture(scope="module")
def browser():
    from envs.gui.browser import Browser

    b = Browser(console_log=True)
    b.driver.set_window_size(1100, 900)
    yield b
    b.quit()


def _rgba(css: str) -> list[float]:
    if css == "transparent":
        return [0, 0, 0, 0]
    return [float(x) for x in css[css.index("(") + 1:-1].split(",")]


def _open(browser, path: Path) -> None:
    browser.driver.get(path.as_uri())
    errors = [e for e in browser.driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


@pytest.mark.browser
def test_pages_load_without_errors_and_run_nothing_from_the_run(site, browser):
    for page in ("index.html", "r0/e0.html", "r0/e1.html", "r1/e0.html", "compare.html"):
        _open(browser, site / "site" / page)
    _open(browser, site / "site/index.html")
    browser.driver.find_element("css selector", "a.vs").click()  # the first episode's side by side
    frames = browser.run("return Array.from(document.querySelectorAll('iframe')).map(f => f.getAttribute('src'))")
    assert frames == ["r0/e0.html", "r1/e0.html"]
    assert not [e for e in browser.driver.get_log("browser") if e["level"] == "SEVERE"]
    _open(browser, site / "site/r0/e0.html")
    assert browser.run("return window.pwned === undefined && document.querySelectorAll('script').length === 0")
    assert "<script>window.pwned = 1</script>" in browser.run("return document.querySelectorAll('pre.tokens')[1].textContent")


@pytest.mark.browser
def test_filters_select_the_matching_episodes(site, browser):
    from selenium.webdriver.support.ui import Select

    _open(browser, site / "site/index.html")
    assert browser.run("return document.documentElement.dataset.ready") is not None

    def rows() -> list[list[str]]:
        return browser.run("return Array.from(document.querySelectorAll('#episodes tbody tr'))"
                           ".map(tr => Array.from(tr.cells).map(td => td.textContent))")

    assert len(rows()) == 4
    pick = {key: Select(browser.driver.find_element("id", f"f-{key}")) for key in ("mode", "status", "step", "task")}
    pick["mode"].select_by_visible_text("binary")
    assert [(r[0], r[4]) for r in rows()] == [("r1", "binary"), ("r1", "binary")]
    pick["status"].select_by_visible_text("invalid_action")
    assert [(r[2], r[7], r[8]) for r in rows()] == [("count-lines", "-1", "invalid_action")]
    browser.driver.find_element("id", "f-reset").click()
    pick["task"].select_by_visible_text("fix-imports")
    pick["step"].select_by_visible_text("0")
    got = rows()
    assert [r[0] for r in got] == ["r0", "r1"] and got[0][10] == "vs r1" and got[1][10] == "vs r0"
    assert "2 of 4 episodes" in browser.run("return document.getElementById('count').textContent")


@pytest.mark.browser
def test_token_colours_are_the_recorded_advantages(site, browser, tmp_path):
    turns = [json.loads(line) for line in (site / "combine/turns.jsonl").read_text().splitlines()]
    first = turns[0]
    want = [t - o for t, o in zip(first["opd"]["teacher_logprobs"], first["rollout_logprobs"])]
    _open(browser, site / "site/r0/e0.html")
    spans = browser.run("""const pres = document.querySelectorAll('pre.tokens');
        return Array.from(pres).map(pre => [Number(pre.dataset.scale), Array.from(pre.children).map(s =>
            [s.dataset.t, Number(s.dataset.a), getComputedStyle(s).backgroundColor, s.textContent, s.title])]);""")
    (scale, toks), (_, second) = spans
    assert scale == pytest.approx(max(abs(v) for v in want), rel=1e-5)
    assert "".join(s[3] for s in toks) == ANSWER and len(toks) == len(want)
    for i, (t, a, bg, _, title) in enumerate(toks):
        assert t == f"{i}-{i}" and a == pytest.approx(want[i], abs=1e-5) and f"value {want[i]:+.4f}" in title
        assert _rgba(bg) == pytest.approx(_rgba(colour(a, scale)), abs=1 / 255 + 1e-3)  # the browser keeps 8-bit alpha
    assert all("rgba(22, 163, 74" in toks[ANSWER.index("tests") + k][2] for k in range(5))
    assert all("rgba(220, 38, 38" in toks[ANSWER.index("first") + k][2] for k in range(5))
    # the second turn has no accepted hint: its tokens carry the turn's advantage (combine: w_rl * PRM score)
    assert {s[1] for s in second} == {turns[1]["meta"]["advantage"]["mean"]} == {-1.0}
    shot = tmp_path / "episode.png"
    browser.driver.set_window_size(900, 700)
    browser.driver.save_screenshot(str(shot))
    browser.driver.set_window_size(1100, 900)
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50  # text, colours, borders: not a blank page
    if os.environ.get("OPENCLAW_VIEW_SHOT"):  # how docs/img/view-episode.png was made
        shutil.copyfile(shot, os.environ["OPENCLAW_VIEW_SHOT"])
