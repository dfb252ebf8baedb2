"""The W&B sink: offline files hold what metrics.jsonl holds; W&B trouble never stops a run."""
from __future__ import annotations

import json
import re
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from wandb.proto import wandb_internal_pb2 as pb

from agent.policy.models import byte_tokenizer
from agent.turn import Turn
from envs.base import NextState
from experiments.run import wandb_sink
from learner.runlog import RunLog
from learner.wandb_log import WandbSink, flatten, wandb_mode
from tests.cli import REPO
from tests.learner_turns import opd_signal, prm_score

_BLOCK = 32 * 1024  # the .wandb file is a LevelDB-style log: 32 KiB blocks of framed chunks
_HEADER = 7  # ":W&B" + 2-byte ident + 1-byte version


def _chunks(data: bytes) -> list[bytes]:
    """Whole records of a .wandb log (chunk header: crc32, length u16, type: 1 full, 2 first,
    3 middle, 4 last)."""
    out, buf, pos = [], b"", _HEADER
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:  # zero padding to the block's end
            pos += left
            continue
        payload = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        buf = payload if kind in (1, 2) else buf + payload
        if kind in (1, 4):
            out.append(buf)
    return out


def offline_records(run_dir: Path, timeout_s: float = 60.0) -> dict[str, Any]:
    """What the offline W&B run in run_dir holds: run (group, display_name, job_type), config, history.
    W&B's service process may still be writing after finish() returns: wait for the exit record."""
    (f,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    deadline = time.monotonic() + timeout_s
    while True:
        rec: dict[str, Any] = {"run": {}, "config": {}, "history": [], "exit": False}
        for chunk in _chunks(f.read_bytes()):
            r = pb.Record()
            r.ParseFromString(chunk)
            kind = r.WhichOneof("record_type")
            if kind == "run":
                rec["run"] = {"group": r.run.run_group, "display_name": r.run.display_name, "job_type": r.run.job_type}
                rec["config"].update({i.key: json.loads(i.value_json) for i in r.run.config.update})
            elif kind == "config":
                rec["config"].update({i.key: json.loads(i.value_json) for i in r.config.update})
            elif kind == "history":
                rec["history"].append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item})
            elif kind == "exit":
                rec["exit"] = True
        if rec["exit"] or time.monotonic() > deadline:
            return rec
        time.sleep(0.5)


def _turn(i: int, step: int) -> Turn:
    return Turn(f"s{step}-e{i}", "say", f"s{step}", 0, 0, [1, 2], [3], [-0.5], "hello",
                NextState("user", "Nice.", "user_reply", {"verdict": 1}), "ok", outcome=1.0,
                prm=prm_score(votes=[1, 1], score=1), opd=opd_signal(hint="Say it louder.", accepted=True),
                messages=[{"role": "user", "content": "Say a word."}], meta={"advantage": {"mean": 0.5, "min": 0.5, "max": 0.5}})


def test_flatten_keeps_numbers_under_slash_keys():
    row = {"step": 3, "a": {"b": 1.5, "c": {"d": 2}}, "ok": True, "none": None, "nan": float("nan"), "l": [1], "s": "x"}
    assert flatten(row) == {"step": 3, "a/b": 1.5, "a/c/d": 2, "ok": 1.0}


def test_mode_is_offline_unless_a_key_is_set(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    assert wandb_mode("offline") == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert wandb_mode("offline") == "online"
    assert wandb_mode("disabled") == "disabled"
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert wandb_mode("offline") == "offline"


def test_runlog_and_offline_wandb_get_the_same_figures(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    sink = WandbSink(tmp_path, project="p", group="g-1", name="custom-binary-seed0", config={"mode": {"name": "binary"}},
                     rows_per_step=2)
    assert sink.active
    runlog = RunLog(tmp_path, sinks=[sink])
    for step in range(3):
        runlog.turns([_turn(i, step) for i in range(5)])
        runlog.metrics({"step": step, "reward_mean": 0.25 * step, "status_counts": {"ok": 5}, "timings": {"step_s": 1.5},
                        "prm_score_mean": None, "policy_versions": [0]})
    runlog.close()
    rec = offline_records(tmp_path)
    assert rec["run"] == {"group": "g-1", "display_name": "custom-binary-seed0", "job_type": "train"}
    assert rec["config"]["mode"] == {"name": "binary"}
    assert [h["_step"] for h in rec["history"]] == [0, 1, 2]
    assert [h["reward_mean"] for h in rec["history"]] == [0.0, 0.25, 0.5]
    assert all(h["status_counts/ok"] == 5 and h["timings/step_s"] == 1.5 for h in rec["history"])
    # one trajectory table, logged incrementally: each step sends its own rows and the table grows
    assert all(h["trajectories/_type"] == "incremental-table-file" and h["trajectories/log_mode"] == "INCREMENTAL"
               for h in rec["history"])
    assert [h["trajectories/increment_num"] for h in rec["history"]] == [0, 1, 2]
    assert [h["trajectories/nrows"] for h in rec["history"]] == [2, 4, 6]
    (files,) = tmp_path.glob("wandb/offline-run-*/files")
    increments = [json.loads((files / h["trajectories/path"]).read_text()) for h in rec["history"]]
    assert [sorted({r[0] for r in t["data"]}) for t in increments] == [[0], [1], [2]]  # the step column
    table = increments[0]
    assert len(table["data"]) == 2
    row = dict(zip(table["columns"], table["data"][0]))
    assert row["prompt_tail"] == "[user] Say a word." and row["action"] == "hello" and row["hint"] == "Say it louder."
    assert row["prm_votes"] == "[1, 1]" and row["advantage"].startswith("mean=0.5")
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 3


def test_wandb_that_cannot_start_is_a_warning_not_a_failure(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    # a project name W&B refuses (as `wandb.project=bad#name` would give)
    sink = WandbSink(tmp_path / "run", project="bad#name", group="g", name="n", config={}, rows_per_step=1)
    runlog = RunLog(tmp_path / "run", sinks=[sink])
    runlog.turns([_turn(0, 0)])
    runlog.metrics({"step": 0, "reward_mean": 1.0})
    runlog.close()
    assert not sink.active and "W&B disabled" in caplog.text
    assert json.loads((tmp_path / "run" / "metrics.jsonl").read_text())["reward_mean"] == 1.0


def _opd_turn(episode: str, text: str, rollout: list[float], teacher: list[float] | None, advantage: float) -> Turn:
    ids = byte_tokenizer().encode(text)
    assert len(ids) == len(rollout)
    return Turn(episode, "say", episode, 0, 0, [1, 2], ids, rollout, text, NextState("user", "Hm.", "user_reply", {}),
                "ok", opd=opd_signal(hint="Be brief.", accepted=teacher is not None, teacher_logprobs=teacher),
                messages=[{"role": "user", "content": "Say a word."}], meta={"advantage": {"mean": advantage}})


def _spans(html: str) -> list[list[tuple[float, str]]]:
    """(value, background) of each token span, per response shown."""
    return [[(float(a), bg) for a, bg in re.findall(r'data-a="([^"]+)" style="background:([^"]+)"', pre)]
            for pre in re.findall(r'<pre class="resp tokens".*?</pre>', html, re.S)]


@pytest.mark.parametrize("mode, job_type", [("eval", "eval"), ("opd", "train")])
def test_run_sink_has_the_job_type_and_a_token_panel_coloured_by_advantage(tmp_path, monkeypatch, mode, job_type):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    with initialize_config_dir(config_dir=str(REPO / "experiments" / "conf"), version_base=None):
        cfg = compose("config", overrides=["model=tiny", f"mode={mode}", "wandb.group=g", "wandb.rows_per_step=2",
                                           f"run_dir={tmp_path}"])
    sink = wandb_sink(cfg, tmp_path)
    # a hint-taught turn: per token teacher - student = +0.5, -0.5, 0; a turn without a hint: its advantage
    sink.turns([_opd_turn("taught", "hi!", [-1.0, -2.0, -0.5], [-0.5, -2.5, -0.5], advantage=2.0),
                _opd_turn("plain", "ok", [-1.0, -1.0], None, advantage=-0.25)])
    sink.metrics({"step": 0, "reward_mean": 1.0})
    sink.close()
    rec = offline_records(tmp_path)
    assert rec["run"]["job_type"] == job_type
    (hist,) = rec["history"]
    assert hist["tokens/_type"] == "html-file"
    (files,) = tmp_path.glob("wandb/offline-run-*/files")
    html = (files / hist["tokens/path"]).read_text()
    shown = sorted(re.findall(r"<h3>(\w+) · turn 0", html))
    assert shown == ["plain", "taught"]
    spans = dict(zip(re.findall(r"<h3>(\w+) · turn 0", html), _spans(html)))
    if mode == "eval":  # the eval mode trains on nothing: a turn's recorded advantage is all there is
        assert spans["taught"] == [(2.0, "rgba(22, 163, 74, 0.85)")] * 3
        assert spans["plain"] == [(-0.25, "rgba(220, 38, 38, 0.106)")] * 2  # scale 2.0: the largest |value| shown
    else:  # opd: the taught turn's per-token teacher - student values, on the panel's scale (0.5)
        assert spans["taught"] == [(0.5, "rgba(22, 163, 74, 0.85)"), (-0.5, "rgba(220, 38, 38, 0.85)"), (0.0, "transparent")]
        assert spans["plain"] == [(-0.25, "rgba(220, 38, 38, 0.425)")] * 2
