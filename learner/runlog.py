"""The run directory: config.yaml, tasks.json, metrics.jsonl, turns.jsonl, checkpoints/ (docs/architecture.md, "Run directory").

Logs are appended (the original truncated them at every batch). Each turn line is the turn's one
record (agent/turn.py `turn_record`: the sampler's exact ids and log-probs, the messages and tools
the prompt was rendered from, the next state, votes and hint). A metrics row closes its step's records: records.idx then gets a line with
the byte sizes of both logs, so a resumed run cuts what a killed one wrote after its last
checkpoint (`rewind`) and no step is logged twice.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Protocol

from agent.json_safe import json_safe
from agent.turn import Turn, turn_line
from envs.base import TaskSplit


class Sink(Protocol):
    """Another place the same figures go (W&B): sees every turn and every metrics row."""

    def turns(self, turns: list[Turn]) -> None: ...
    def metrics(self, row: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


class RunLog:
    def __init__(self, run_dir: str | Path, sinks: Iterable[Sink] = ()) -> None:
        self.dir = Path(run_dir)
        self.sinks = list(sinks)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.dir / "metrics.jsonl"
        self.turns_path = self.dir / "turns.jsonl"
        self.checkpoints = self.dir / "checkpoints"
        self.index_path = self.dir / "records.idx"

    def write_config(self, yaml_text: str) -> None:
        (self.dir / "config.yaml").write_text(yaml_text)

    def write_split(self, split: TaskSplit, seed: int) -> Path:
        """tasks.json: the training ids rollouts draw from and the held-out ids only evaluation
        sees (`seed`: eval.seed), so later runs and demonstrations can prove disjointness."""
        path = self.dir / "tasks.json"
        path.write_text(json.dumps({"eval_seed": seed, **split.to_dict()}) + "\n")
        return path

    def add_sink(self, sink: Sink) -> None:
        self.sinks.append(sink)

    def metrics(self, row: dict[str, Any]) -> None:
        row = json_safe(row)
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        with self.index_path.open("a") as f:
            f.write(json.dumps({"step": row.get("step"), "metrics": self.metrics_path.stat().st_size,
                                "turns": self._size(self.turns_path)}) + "\n")
        for sink in self.sinks:
            sink.metrics(row)

    @staticmethod
    def _size(path: Path) -> int:
        return path.stat().st_size if path.exists() else 0

    def rewind(self, step: int) -> None:
        """Drop every record of step `step` and later (a resume from a checkpoint taken after
        `step` steps): the logs are cut back to where the last row before `step` ended."""
        keep, cut = [], {"metrics": 0, "turns": 0}
        if self.index_path.exists():
            for line in self.index_path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    break  # a line torn by the kill: nothing after it was indexed
                if not isinstance(entry.get("step"), int) or entry["step"] >= step:
                    break
                keep.append(line)
                cut = entry
        elif step > 0 and self.metrics_path.exists():
            return  # a run dir from before the index: nothing says where the steps end
        for path, size in ((self.metrics_path, cut["metrics"]), (self.turns_path, cut["turns"])):
            if self._size(path) > size:
                with path.open("r+b") as f:
                    f.truncate(size)
        self.index_path.write_text("".join(f"{line}\n" for line in keep))

    def turns(self, turns: Iterable[Turn]) -> None:
        turns = list(turns)
        for sink in self.sinks:
            sink.turns(turns)
        with self.turns_path.open("a") as f:
            for t in turns:
                f.write(turn_line(t))

    def close(self) -> None:
        """Finish every sink (the files need no closing: each write opens and closes them)."""
        for sink in self.sinks:
            sink.close()
        self.sinks.clear()
