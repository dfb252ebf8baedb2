"""One record per turn: the run log's turns.jsonl and the proxy's turns-v<version>.jsonl write the
same object for the same turn (agent/turn.py `turn_record`), and `Turn.from_json` reads it back."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np

from agent.proxy.sink import TurnSink
from agent.turn import OPDSignal, PRMScore, Turn, turn_record
from envs.base import NextState, Status
from learner.runlog import RunLog


def a_turn() -> Turn:
    return Turn(episode_id="e1", task_id="t1", group_id="g1", step_index=2, policy_version=3,
                prompt_ids=[1, 2, 3], response_ids=[4, 5], rollout_logprobs=[-0.5, -1.25], action="héllo",
                next_state=NextState("tool", "42", "tool_result", {"verdict": 1}), status=Status.OK,
                finish_reason="stop", outcome=1.0, episode_done=True,
                prm=PRMScore(votes=[1, None, 1], score=np.float64(0.5), texts=["a", "b", "c"]),
                opd=OPDSignal(votes=[1], hints=["use the tool"], texts=["x"], hint="use the tool", accepted=True,
                              teacher_logprobs=[math.nan, -0.5]),
                messages=[{"role": "user", "content": "héllo?"}],
                tools=[{"type": "function", "function": {"name": "calc"}}],
                meta={"session_id": "s", "advantage": {"mean": np.float32(0.25)}, "private_tokens": [1]})


def test_the_run_log_and_the_proxy_write_the_same_record(tmp_path):
    turn = a_turn()
    RunLog(tmp_path / "run").turns([turn])
    sink = TurnSink(tmp_path / "proxy", on_turn=lambda _t: None)
    sink.put(turn)
    sink.close()
    run_line = (tmp_path / "run" / "turns.jsonl").read_text(encoding="utf-8")
    proxy_line = (tmp_path / "proxy" / "turns-v3.jsonl").read_text(encoding="utf-8")
    assert run_line == proxy_line
    record = json.loads(run_line)
    assert set(record) == {f.name for f in dataclasses.fields(Turn)}  # every field, messages and tools too
    assert record["opd"]["teacher_logprobs"] == [None, -0.5] and record["prm"]["score"] == 0.5  # NaN -> null, numpy -> number
    assert "error" not in record["prm"]  # a signal's unset fields are left out
    assert record["meta"]["advantage"]["mean"] == 0.25 and record["status"] == "ok"
    assert "héllo" in run_line  # UTF-8, not \u escapes
    back = Turn.from_json(record)
    assert back.next_state == turn.next_state and back.messages == turn.messages and back.tools == turn.tools
    assert (back.prompt_ids, back.response_ids, back.rollout_logprobs) == (turn.prompt_ids, turn.response_ids,
                                                                         turn.rollout_logprobs)
    assert back.prm == turn.prm and back.status is Status.OK


def test_content_json_cannot_hold_is_escaped_not_raised(caplog):
    cyclic: dict = {}
    cyclic["self"] = cyclic
    turn = dataclasses.replace(a_turn(), action="a\ud800b", meta={"odd": {1, 2}, "cyclic": cyclic})
    record = turn_record(turn)
    json.dumps(record, ensure_ascii=False).encode("utf-8")  # writable as UTF-8
    assert record["action"] == "a\\ud800b" and record["meta"]["odd"] == "{1, 2}"
    assert "unencodable content escaped" in caplog.text
    caplog.clear()
    turn_record(a_turn())
    assert "escaped" not in caplog.text  # ordinary content goes through without a warning
