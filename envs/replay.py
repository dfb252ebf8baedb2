"""ReplayEnv (`env=replay env.run_dir=RUN`): a finished run's next states, re-served for the same actions.

A learner change can then be re-run and compared bit for bit with no sandbox, browser or
simulated user: each step looks the action up among the actions the run recorded (turns.jsonl)
for the same task after the same earlier actions, and returns the next state, status and ending
recorded for it. An action no recorded episode took at that point ends the episode with status
`diverged` (not the agent's doing: it leaves the batch like an infrastructure failure). Where
recorded episodes of a task took the same actions but got different next states (an env that is
not deterministic), the first recorded is served.

The tasks are the run's training tasks (tasks.json, in its order, so a run with the same seed draws
the same jobs); nothing is held out, since the run recorded no evaluation episodes. An episode
ends where its recorded one ended (the env's own end, the turn limit, or the runner's cut).
"""
from __future__ import annotations

import copy
import dataclasses
import json
import threading
from pathlib import Path
from typing import Any

from envs.base import AgentEnv, NextState, Status, StepResult, Task, TaskSplit

NO_LIMIT = 1 << 30  # the recorded episodes say where each ends


@dataclasses.dataclass
class _Node:
    """The state after some actions: the recorded actions from here, each with what followed."""

    children: dict[str, tuple[dict[str, Any], _Node]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Record:
    """What a run recorded, indexed for replay."""

    roots: dict[str, _Node]  # task id -> the state after reset
    openings: dict[str, dict[str, Any]]  # task id -> the first turn's messages and tools
    train: list[str]


_cache: dict[tuple[str, int, int], _Record] = {}  # one index per turns.jsonl version, shared by every instance
_cache_lock = threading.Lock()


def _load(run_dir: Path) -> _Record:
    path = run_dir / "turns.jsonl"
    if not path.is_file():
        raise ValueError(f"{run_dir} holds no turns.jsonl (env.run_dir names a finished run's directory)")
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    with _cache_lock:
        if key not in _cache:
            _cache[key] = _index(path, run_dir / "tasks.json")
        return _cache[key]


def _index(path: Path, tasks_json: Path) -> _Record:
    episodes: dict[str, list[dict[str, Any]]] = {}
    openings: dict[str, dict[str, Any]] = {}
    with path.open() as f:
        for n, line in enumerate(f, 1):
            try:
                d = json.loads(line)
                step = {k: d[k] for k in ("task_id", "step_index", "action", "next_state", "status", "outcome", "episode_done")}
            except (ValueError, KeyError) as e:
                raise ValueError(f"{path} line {n} is not a turn record ({e})") from None
            episodes.setdefault(d["episode_id"], []).append(step)
            if step["step_index"] == 0 and d["task_id"] not in openings:
                openings[d["task_id"]] = {"messages": d.get("messages") or [], "tools": d.get("tools") or []}
    roots: dict[str, _Node] = {}
    for steps in episodes.values():
        node = roots.setdefault(steps[0]["task_id"], _Node())
        for step in sorted(steps, key=lambda s: s["step_index"]):
            node = node.children.setdefault(step["action"], (step, _Node()))[1]
    train = list(roots)
    if tasks_json.is_file():
        train = [str(t) for t in json.loads(tasks_json.read_text())["train"]]
    return _Record(roots, openings, train)


class ReplayEnv(AgentEnv):
    """Re-serves a finished run's recorded next states; see the module docstring."""

    fork_shared = ("record",)

    def __init__(self, run_dir: str | None = None) -> None:
        super().__init__(max_turns=NO_LIMIT)
        if not run_dir:
            raise ValueError("name the run to replay: env.run_dir=RUN (a finished run's directory)")
        self.record = _load(Path(run_dir))
        self.node = _Node()

    def task_ids(self) -> list[str]:
        return list(self.record.train)

    def task_split(self, n_held_out: int, seed: int) -> TaskSplit:
        return TaskSplit(train=self.task_ids(), held_out=[])

    def load_task(self, task_id: str) -> Task:
        if task_id not in self.record.roots:
            raise KeyError(f"env=replay: the run recorded no episode of task {task_id!r}")
        messages = self.record.openings[task_id]["messages"]
        prompt = next((m["content"] for m in messages if m.get("role") == "user"), "")
        return Task(task_id, prompt)

    def _start(self, task: Task) -> None:
        self.node = self.record.roots[task.task_id]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """The recorded opening: the first turn's messages and tools, exactly."""
        text, info = super().reset(seed=seed, options=options)
        assert self.task is not None
        opening = self.record.openings[self.task.task_id]
        info.update(messages=copy.deepcopy(opening["messages"]), tools=copy.deepcopy(opening["tools"]))
        return text, info

    def system_prompt(self) -> str | None:
        if self.task is None:
            return None
        messages = self.record.openings[self.task.task_id]["messages"]
        return next((m["content"] for m in messages if m.get("role") == "system"), None)

    def _act(self, action: str) -> StepResult:
        found = self.node.children.get(action)
        if found is None:
            error = (f"the action differs from the {len(self.node.children)} the run recorded at turn {self.turn} "
                     "of this task: no recorded next state")
            return StepResult(NextState("tool", f"[replay] {error}", "diverged", {"error": error}), Status.DIVERGED)
        step, self.node = found
        status = Status(step["status"])
        ends = bool(step["episode_done"]) and not status.is_infra and step["outcome"] is not None
        return StepResult(NextState.from_dict(copy.deepcopy(step["next_state"])), status, done=ends,
                          outcome=step["outcome"] if ends else None)

    def oracle_action(self) -> str:
        """The first recorded action from here (policy=oracle walks the first recorded episode)."""
        if not self.node.children:
            raise IndexError(f"the run recorded no action at turn {self.turn} of this task")
        return next(iter(self.node.children))
