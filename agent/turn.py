"""A Turn: one assistant action and what followed it (docs/architecture.md, "Tokens and turns").

The learner builds training samples from turns. `turn_record` is the one JSON form of a turn:
the run log's turns.jsonl and the live-user proxy's turns-v<version>.jsonl both write it, one per
line, and `Turn.from_json` reads it back. Token ids and log-probs are the sampler's, never
re-tokenized.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

from agent.json_safe import json_safe
from envs.base import NextState, Status


def _record(signal: Any) -> dict[str, Any]:
    """A signal's JSON: its fields, those left unset (None) left out."""
    return {k: v for k, v in dataclasses.asdict(signal).items() if v is not None}


@dataclasses.dataclass
class PRMScore:
    """The scorer's evaluative signal on a turn: the judge's votes in {-1, 0, +1} (None: an
    answer without a valid vote), their majority, and the judge's answers."""

    votes: list[int | None]
    score: int
    texts: list[str]
    error: str | None = None  # why there are no votes ("judge: ...")

    def to_json(self) -> dict[str, Any]:
        return _record(self)


@dataclasses.dataclass
class OPDSignal:
    """The scorer's directive signal on a turn: the judge's hint votes, the hint chosen, and the
    hint-conditioned teacher's log-probs of the turn's response ids when the hint was accepted."""

    votes: list[int | None]
    hints: list[str]
    texts: list[str]
    hint: str
    accepted: bool
    teacher_logprobs: list[float] | None = None  # only when accepted
    error: str | None = None  # why there is no signal ("judge: ..." or "teacher: ...")

    def to_json(self) -> dict[str, Any]:
        return _record(self)

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Turn:
    episode_id: str
    task_id: str
    group_id: str
    step_index: int
    policy_version: int
    prompt_ids: list[int]
    response_ids: list[int]
    rollout_logprobs: list[float]
    action: str
    next_state: NextState
    status: Status  # a plain string given here is read as its Status
    finish_reason: str = ""
    outcome: float | None = None  # the episode's outcome, filled on every turn at episode end
    episode_done: bool = False  # the last turn of its episode
    prm: PRMScore | None = None  # set by the scorer when the mode needs it
    opd: OPDSignal | None = None
    # The chat messages the prompt was rendered from, and the tools (the OPD teacher re-renders
    # them with a hint; the judge reads the context).
    messages: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    tools: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    # The episode tree (rollout.branch, docs/forks.md): the trunk episode's id, this path's
    # branch ("" on the trunk; "b<step>.<j>": the j-th continuation forked before that step), and
    # the key (`Turn.key`) of the turn whose next state this one acts on (None at step 0).
    tree_id: str = ""
    branch_id: str = ""
    parent_turn: str | None = None

    @property
    def key(self) -> str:
        """The turn's id in its run: "<episode_id>/<step_index>" (what `parent_turn` names)."""
        return f"{self.episode_id}/{self.step_index}"

    def __post_init__(self) -> None:
        self.status = Status(self.status)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Turn:
        d = dict(d)
        d["next_state"] = NextState.from_dict(d["next_state"])
        d["prm"] = PRMScore(**d["prm"]) if d.get("prm") else None
        d["opd"] = OPDSignal(**d["opd"]) if d.get("opd") else None
        return cls(**d)


def turn_record(turn: Turn) -> dict[str, Any]:
    """Every field of the turn as plain JSON values (agent/json_safe.py); never fails on content:
    what JSON or UTF-8 cannot hold is escaped, with a warning."""
    escaped: list[str] = []
    fields = {f.name: getattr(turn, f.name) for f in dataclasses.fields(turn)}
    fields.update(status=turn.status.value, prm=turn.prm.to_json() if turn.prm is not None else {},
                  opd=turn.opd.to_json() if turn.opd is not None else {})  # unscored: {}
    record = json_safe(fields, escaped)
    if escaped:
        log.warning("turn %s step %d: unencodable content escaped in its record (%s)", turn.episode_id,
                    turn.step_index, "; ".join(escaped))
    return record


def turn_line(turn: Turn) -> str:
    """The turn's JSONL line (UTF-8 text, not ASCII escapes)."""
    return json.dumps(turn_record(turn), ensure_ascii=False) + "\n"
