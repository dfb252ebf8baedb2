"""The training modes, one entry each (docs/architecture.md, "Modes and loss").

What a mode is lives here only: which signals the scorer computes for it (learner/scorer.py),
how learner/advantages.py turns its scored turns into samples, and whether a run with it trains
(experiments/factories.py, experiments/run.py). experiments/conf/mode/<name>.yaml holds only the
settings a user may change (teacher, w_opd, w_rl, prm_coef, SFT's counts).
"""
from __future__ import annotations

import dataclasses
from typing import Iterable

from learner.parsing import mean_vote


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    advantage: str  # how a turn's advantage is computed
    trains: bool = True  # False: rollouts only, no scoring, no update
    prm: bool = False  # needs the judge's PRM votes
    opd: bool = False  # needs the judge's hints and the teacher's log-probs
    outcome: bool = False  # needs the episode's outcome (turns without one leave the batch)
    rl: bool = True  # its samples come from scored rollouts (learner.advantages.build_samples)


_ALL = (
    Mode("outcome", "A = (o - mean) / std of the episode outcomes in the task group, broadcast over every token "
                    "of every turn of the episode; a group whose outcomes are all equal drops out.", outcome=True),
    Mode("binary", "A = PRM score in {-1, 0, +1} (group of one, not normalised); score 0 -> loss mask 0. At least "
                   "one turn per session (episode) is kept: when no turn of an episode has a nonzero score, its first "
                   "turn (lowest step index) whose next state has content is given mask 1 with advantage 0 (the "
                   "paper's rule: it counts in the batch, it moves nothing but the KL term).", prm=True),
    Mode("opd", "A_t = teacher_logp_t - rollout_logp_t; turns without an accepted hint are dropped.", opd=True),
    Mode("combine", "A_t = w_opd (teacher_logp_t - rollout_logp_t) + w_rl r, by the paper's four cases: hint and "
                    "r = +-1 -> both terms; hint, r = 0 -> OPD term only; no hint, r = +-1 -> RL term only (teacher "
                    ":= rollout, so the OPD term is 0); neither -> dropped.", prm=True, opd=True),
    Mode("integrated", "R = step_reward(o, PRM votes, prm_coef), z-scored per (task group, step index) bucket; a "
                       "bucket whose values are all equal drops out. A singleton bucket (only one episode of the group "
                       "reached that step) has no peer to compare with, so it is z-scored against all step rewards of "
                       "its task group instead (the paper keeps the raw value, which puts those steps on another "
                       "scale); dropped if that pool is constant too.", prm=True, outcome=True),
    Mode("vine", "Per-step Monte-Carlo values from episode trees (rollout.branch, learner/vine.py): a turn's value "
                 "V = mean outcome of the paths through it (its own path and every continuation forked after it); at "
                 "each branch point (the trunk's turn and the first turns of the continuations forked before it) "
                 "A = (V - mean) / std over those siblings, broadcast over the turn's tokens; a branch point whose "
                 "values are all equal drops out, and so does a turn at no branch point. PRM votes are scored for "
                 "the judge audit (judge_audit/* in metrics) and rollout.branch.at=disagree.", prm=True, outcome=True),
    Mode("eval", "none: rollouts only, no scoring, no update.", trains=False, rl=False),
    Mode("sft", "none: supervised fine-tuning on demonstrations (learner/sft.py).", rl=False),
)
MODES: dict[str, Mode] = {m.name: m for m in _ALL}
RL_MODES: tuple[str, ...] = tuple(m.name for m in _ALL if m.rl)


def mode(name: str) -> Mode:
    """The registry's entry for `name`, or a ValueError naming the modes there are."""
    try:
        return MODES[name]
    except KeyError:
        raise ValueError(f"unknown mode {name!r}; choose one of {', '.join(MODES)}") from None


def step_reward(outcome: float, votes: Iterable[int | None], prm_coef: float) -> float:
    """Mode integrated's step reward: the episode outcome plus prm_coef times the mean valid PRM vote."""
    return float(outcome) + prm_coef * mean_vote(votes)
