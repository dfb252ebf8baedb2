"""A run's turns, episode by episode, each with the RL step it was sampled in.

turns.jsonl is read one line at a time (a long run's lines hold whole prompts' token ids, so the
file is never held in memory at once); the runner writes each episode's turns together, so an
episode is a run of consecutive lines with one episode id. The step of a line comes from
records.idx (the byte size of turns.jsonl at the end of each step, learner/runlog.py), else from
the episode id the loop gives (`s<step>-t<task>-g<sample>`).
"""
from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

_STEP_IN_ID = re.compile(r"^s(\d+)-")


@dataclass
class Episode:
    number: int  # its place in the run (the page name), counted from 0
    step: int | None
    turns: list[dict[str, Any]]

    @property
    def episode_id(self) -> str:
        return str(self.turns[0].get("episode_id", ""))


def step_ends(run_dir: Path) -> list[tuple[int, int]]:
    """(byte size of turns.jsonl at the end of the step, step) from records.idx, in file order."""
    path = run_dir / "records.idx"
    if not path.is_file():
        return []
    ends = []
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            break  # a line torn by a kill: nothing after it was indexed
        if isinstance(entry.get("step"), int) and isinstance(entry.get("turns"), int):
            ends.append((entry["turns"], entry["step"]))
    return ends


def _step_of(offset: int, ends: list[tuple[int, int]], episode_id: str) -> int | None:
    at = bisect.bisect_left(ends, (offset + 1, -1))  # the first step whose records reach past `offset`
    if at < len(ends):
        return ends[at][1]
    m = _STEP_IN_ID.match(episode_id)
    return int(m.group(1)) if m else None


def episodes(run_dir: Path) -> Iterator[Episode]:
    """The run's episodes in file order. A torn last line (a run killed mid-write) is skipped."""
    path = run_dir / "turns.jsonl"
    if not path.is_file():
        return
    ends = step_ends(run_dir)
    current: Episode | None = None
    number, offset = 0, 0
    with path.open("rb") as f:
        for raw in f:
            start, offset = offset, offset + len(raw)
            try:
                turn = json.loads(raw)
            except ValueError:
                continue
            eid = str(turn.get("episode_id", ""))
            if current is not None and current.episode_id != eid:
                yield current
                current, number = None, number + 1
            if current is None:
                current = Episode(number, _step_of(start, ends, eid), [])
            current.turns.append(turn)
    if current is not None:
        yield current
