"""The W&B sink: offline files hold what metrics.jsonl holds; W&B trouble never stops a run."""
from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from wandb.proto import wandb_internal_pb2 as pb

from agent.turn import Turn
from envs.base import NextState
from learner.runlog import RunLog
from learner.wandb_log import WandbSink, flatten, wandb_mode
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
    """What the offline W&B run in run_dir holds: run (group, display_name), config, history.
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
                rec["run"] = {"group": r.run.run_group, "display_name": r.run.display_name}
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
    assert rec["run"] == {"group": "g-1", "display_name": "custom-binary-seed0"}
    assert rec["config"]["mode"] == {"name": "binary"}
    assert [h["_step"] for h in rec["history"]] == [0, 1, 2]
    assert [h["reward_mean"] for h in rec["history"]] == [0.0, 0.25, 0.5]
    assert all(h["status_counts/ok"] == 5 and h["timings/step_s"] == 1.5 and h["trajectories/nrows"] == 2 for h in rec["history"])
    tables = sorted(tmp_path.glob("wandb/offline-run-*/files/media/table/trajectories_*.table.json"))
    assert len(tables) == 3
    table = json.loads(tables[0].read_text())
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
