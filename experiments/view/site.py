"""Build the static site: index.html (runs, curves, a filterable table of episodes), one page per
episode (rK/eN.html), compare.html (two episodes side by side), assets/ and data/index.js.

The index's rows are one compact array per episode in data/index.js, loaded by a <script> tag
(file:// pages cannot fetch), and filtered in the page by assets/index.js. Episode pages are
written while turns.jsonl streams by, so a long run is never held in memory at once.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Callable

from envs.progress import Progress
from experiments.compare import CompareError, Run, load_run
from experiments.view.curves import RUN_COLOURS, curves_html
from experiments.view.pages import RunInfo, episode_html, esc, page
from experiments.view.records import Episode, episodes
from experiments.view.tokens import RunTokenizer

MARKER = ".openclaw-view"  # marks a folder as this tool's output, so a rebuild may clear it
ASSETS = Path(__file__).parent / "assets"
_OWNED = re.compile(r"^(index\.html|compare\.html|assets|data|r\d+)$")
#: index row layout (data/index.js): one array per episode
COLUMNS = ("run", "page", "env", "task", "step", "outcome", "statuses", "versions", "turns", "episode")


class ViewError(ValueError):
    """Input the viewer cannot use; the message says which and why."""


def _prepare(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ViewError(f"{out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).exists():
        raise ViewError(f"{out} is not empty and was not written by experiments.view; give an empty or new folder")
    out.mkdir(parents=True, exist_ok=True)
    for child in out.iterdir():  # the previous build's pages, so none is left stale
        if _OWNED.match(child.name):
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    (out / MARKER).write_text("written by python -m experiments.view\n")
    shutil.copytree(ASSETS, out / "assets")
    (out / "data").mkdir()


def _images(run_dir: Path, pages_dir: Path) -> Callable[[str], str | None]:
    """Copies a screenshot next to the pages and gives its link; None when it cannot be found."""
    shots = pages_dir / "shots"

    def image(path: str) -> str | None:
        p = Path(path)
        for cand in (p, run_dir / p, run_dir / "screenshots" / p.name):
            if cand.suffix.lower() == ".png" and cand.is_file():
                shots.mkdir(exist_ok=True)
                shutil.copyfile(cand, shots / cand.name)
                return f"shots/{cand.name}"
        return None

    return image


def _env_of(run: Run, task_id: str) -> str:
    """The env of an episode: a mixture's member (the task id's prefix), else the run's env."""
    if run.env == "mix":
        from envs.mix import member_of

        return f"mix/{member_of(task_id)}"
    return run.env


def _row(k: int, run: Run, ep: Episode) -> list[Any]:
    last = max(ep.turns, key=lambda t: t.get("step_index", 0))
    statuses = sorted({str(t.get("status", "")) for t in ep.turns})
    versions = sorted({str(t.get("policy_version")) for t in ep.turns})
    task = str(last.get("task_id", ""))
    return [k, ep.number, _env_of(run, task), task, ep.step, last.get("outcome"), " ".join(statuses),
            " ".join(versions), len(ep.turns), ep.episode_id]


def _runs_table(runs: list[Run], counts: list[int]) -> str:
    rows = "".join(
        f'<tr><td><span class="swatch" style="background:{RUN_COLOURS[k % len(RUN_COLOURS)]}"></span>r{k}</td>'
        f"<td>{esc(run.dir)}</td><td>{esc(run.env)}</td><td>{esc(run.mode)}</td>"
        f"<td>{esc((run.config.get('model') or {}).get('name', ''))}</td><td>{esc(run.seed)}</td>"
        f"<td>{len([r for r in run.rows if not r.get('eval_only')])}</td><td>{counts[k]}</td></tr>"
        for k, run in enumerate(runs))
    return ('<table class="runs"><tr><th>run</th><th>dir</th><th>env</th><th>mode</th><th>model</th><th>seed</th>'
            f"<th>steps</th><th>episodes</th></tr>{rows}</table>")


def _data_js(runs: list[Run], rows: list[list[Any]]) -> str:
    data = {"columns": COLUMNS, "runs": [{"label": f"r{k}", "env": r.env, "mode": r.mode} for k, r in enumerate(runs)],
            "rows": rows}
    # "<" escaped: the data can never close a script element, wherever it is included
    return "window.VIEW = " + json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c") + ";\n"


_FILTERS = (("run", "run"), ("env", "env"), ("task", "task"), ("step", "step"), ("mode", "mode"),
            ("outcome", "outcome"), ("status", "status"), ("version", "policy version"))


def _index_html(runs: list[Run], counts: list[int]) -> str:
    filters = "".join(f'<label>{label} <select id="f-{key}" data-key="{key}"></select></label>' for key, label in _FILTERS)
    body = (f"<h1>OpenClaw-Gym runs</h1>{_runs_table(runs, counts)}{curves_html(runs)}"
            f'<div class="filters">{filters}<button id="f-reset">reset</button></div>'
            f'<div id="count" class="meta"></div><table id="episodes" class="episodes"><thead><tr><th>run</th>'
            "<th>env</th><th>task</th><th>step</th><th>mode</th><th>episode</th><th>turns</th><th>outcome</th>"
            '<th>statuses</th><th>versions</th><th>side by side</th></tr></thead><tbody></tbody></table>'
            '<button id="more" hidden>show more</button>')
    return page("OpenClaw-Gym runs", body, "assets/view.css", scripts=("data/index.js", "assets/index.js"))


def build(run_dirs: list[str | Path], out: str | Path) -> Path:
    """Write the site for `run_dirs` into `out`; returns index.html."""
    try:
        runs = [load_run(d) for d in run_dirs]
    except CompareError as e:
        raise ViewError(str(e)) from e
    out = Path(out)
    _prepare(out)
    rows: list[list[Any]] = []
    counts = []
    with Progress("view: episode pages") as bar:
        for k, run in enumerate(runs):
            pages_dir = out / f"r{k}"
            pages_dir.mkdir()
            tok = RunTokenizer(run.config)
            image = _images(run.dir, pages_dir)
            n = 0
            for ep in episodes(run.dir):
                needs_tok = any(t.get("response_ids") for t in ep.turns)
                info = RunInfo(f"r{k}", f"r{k} {run.dir.name}", run.env, run.mode, tok.get() if needs_tok else None)
                (pages_dir / f"e{ep.number}.html").write_text(episode_html(ep, info, image), encoding="utf-8")
                rows.append(_row(k, run, ep))
                n += 1
                bar.advance(status=f"run {k + 1}/{len(runs)} {run.dir.name}")
            counts.append(n)
    (out / "data" / "index.js").write_text(_data_js(runs, rows), encoding="utf-8")
    (out / "compare.html").write_text(page(
        "side by side", '<div id="pair" class="pair"></div>', "assets/view.css", back="index.html",
        scripts=("assets/compare.js",)), encoding="utf-8")
    index = out / "index.html"
    index.write_text(_index_html(runs, counts), encoding="utf-8")
    return index
