"""Load math problems from DAPO-Math / GSM8K / MATH-style JSONL or parquet files.

A row needs a question and a reference answer. Questions come from `question`, `problem`,
`prompt` (a string, or DAPO's list of chat messages: the last user message) or `query`.
Answers come from `answer` (GSM8K's "... #### 42" keeps what follows ####), `ground_truth`,
`reward_model.ground_truth` (DAPO), `final_answer`, `target`, or `solution` (the last \\boxed{}).
Every bad file or row gets an error that names the file, the row and what is missing.
"""
from __future__ import annotations

import json
import os
from typing import Any

from envs.base import Task
from envs.tool_calls import render_tool_call
from envs.toolcall.answers import extract_boxed

QUESTION_KEYS = ("question", "problem", "prompt", "query")
ANSWER_KEYS = ("answer", "ground_truth", "reward_model", "final_answer", "target", "solution")


def read_rows(path: str) -> list[dict[str, Any]]:
    """The rows of a JSONL (one object per line) or parquet file; a bad file gets one clear line."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"data file not found: {path}")
    if path.endswith((".jsonl", ".json")):
        rows = []
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: not a JSON object per line ({e.msg})") from None
        return rows
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as e:  # pyarrow raises several types for a corrupt file
            raise ValueError(f"{path}: not a readable parquet file ({e})") from None
    raise ValueError(f"{path}: unsupported file type (use .jsonl, .json with one object per line, or .parquet)")


def _question(row: dict[str, Any]) -> str | None:
    for key in QUESTION_KEYS:
        v = row.get(key)
        if isinstance(v, str) and v.strip():
            return v.strip()
        if isinstance(v, list):  # chat messages
            users = [m.get("content") for m in v if isinstance(m, dict) and m.get("role") == "user"]
            if users and isinstance(users[-1], str) and users[-1].strip():
                return users[-1].strip()
    return None


def _answer(row: dict[str, Any]) -> str | None:
    for key in ANSWER_KEYS:
        v = row.get(key)
        if isinstance(v, dict):
            v = v.get("ground_truth")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return str(v)
        if not isinstance(v, str) or not v.strip():
            continue
        v = v.strip()
        if "####" in v:
            v = v.rsplit("####", 1)[1].strip().replace(",", "")
        elif key == "solution" or "\\boxed" in v:
            boxed = extract_boxed(v)
            if boxed is None:
                continue
            v = boxed
        if v:
            return v
    return None


def load_tasks(path: str, limit: int | None = None) -> list[Task]:
    """Tasks "data-00000", ... from a JSONL or parquet file (the first `limit` rows if given)."""
    rows = read_rows(path)
    if limit is not None:
        rows = rows[:limit]
    tasks = []
    for i, row in enumerate(rows):
        where = f"{path}: row {i + 1}"
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
        q, a = _question(row), _answer(row)
        if q is None:
            raise ValueError(f"{where}: no question (looked for {', '.join(QUESTION_KEYS)})")
        if a is None:
            raise ValueError(f"{where}: no answer (looked for {', '.join(ANSWER_KEYS)}; GSM8K '#### N' or \\boxed{{}})")
        oracle = [render_tool_call("python", {"code": f"print({a!r})"}), f"The answer is \\boxed{{{a}}}."]
        meta = {"source": os.path.basename(path), "row": i}
        for key in ("id", "task_id", "idx"):
            if key in row:
                meta["source_id"] = row[key]
                break
        tasks.append(Task(task_id=f"data-{i:05d}", prompt=q, oracle=oracle, answer=a, meta=meta))
    if not tasks:
        raise ValueError(f"{path}: no problems in the file")
    return tasks
