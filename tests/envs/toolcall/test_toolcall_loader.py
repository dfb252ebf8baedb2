"""Loading DAPO-Math / GSM8K / MATH-style problem files (JSONL and parquet) into the ToolCall env."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from envs.toolcall.env import ToolCallEnv
from envs.toolcall.loader import load_tasks

ROWS = [
    {"question": "Natalia sold 48 clips in April and half as many in May. How many in total?",
     "answer": "In May she sold 48/2 = 24.\nSo 48 + 24 = 72.\n#### 72"},
    {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2^10?"}],
     "reward_model": {"ground_truth": "1024", "style": "rule"}},
    {"problem": "Simplify 6/8.", "solution": "Divide by 2: $\\boxed{\\frac{3}{4}}$."},
    {"query": "How many sides has a hexagon?", "ground_truth": 6, "id": "hex-1"},
    {"question": "Large number?", "answer": "#### 1,234,567"},
]


def _write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_jsonl_fields_of_each_style(tmp_path):
    tasks = load_tasks(_write_jsonl(tmp_path / "mix.jsonl", ROWS))
    assert [t.task_id for t in tasks] == [f"data-{i:05d}" for i in range(5)]
    assert [t.answer for t in tasks] == ["72", "1024", "\\frac{3}{4}", "6", "1234567"]
    assert tasks[1].prompt == "What is 2^10?"
    assert tasks[3].meta["source_id"] == "hex-1"
    assert len(load_tasks(str(tmp_path / "mix.jsonl"), limit=2)) == 2


def test_parquet_file(tmp_path):
    table = pa.Table.from_pylist([
        {"question": "What is 7 * 6?", "answer": "#### 42"},
        {"question": "What is 1/3 + 1/6?", "answer": "1/2"},
    ])
    path = tmp_path / "train.parquet"
    pq.write_table(table, path)
    tasks = load_tasks(str(path))
    assert [(t.prompt, t.answer) for t in tasks] == [("What is 7 * 6?", "42"), ("What is 1/3 + 1/6?", "1/2")]


@pytest.mark.bwrap
def test_env_runs_a_loaded_file_with_its_oracle(tmp_path):
    path = _write_jsonl(tmp_path / "gsm.jsonl", ROWS)
    env = ToolCallEnv(data=path)
    try:
        assert env.task_ids() == [f"data-{i:05d}" for i in range(5)]
        for tid in env.task_ids():
            env.reset(options={"task_id": tid})
            for action in env.task.oracle:
                _, reward, term, _, info = env.step(action)
                assert info["status"] == "ok"
            assert term and reward == 1.0, tid
        env.reset(options={"task_id": "data-00002"})
        _, reward, _, _, _ = env.step("\\boxed{0.75}")  # an equal value in another form
        assert reward == 1.0
    finally:
        env.close()


@pytest.mark.parametrize(
    "name, content, match",
    [
        ("bad.jsonl", '{"question": "q", "answer": "1"}\n{not json\n', r"bad.jsonl:2: not a JSON object"),
        ("noanswer.jsonl", '{"question": "q"}\n', r"row 1: no answer"),
        ("noquestion.jsonl", '{"answer": "1"}\n', r"row 1: no question"),
        ("list.jsonl", "[1, 2]\n", r"row 1: expected a JSON object"),
        ("empty.jsonl", "\n\n", r"no problems"),
        ("data.csv", "question,answer\n", r"unsupported file type"),
        ("broken.parquet", "this is not parquet", r"not a readable parquet file"),
    ],
)
def test_bad_files_get_clear_errors(tmp_path, name, content, match):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError, match=match):
        load_tasks(str(path))


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        ToolCallEnv(data=str(tmp_path / "nope.jsonl"))
