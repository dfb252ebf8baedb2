"""Held-out evaluation of the current policy: between updates (learner/loop.py) and standalone
(`python -m experiments.eval`).

- `EpisodeEvaluator` (every env): full episodes of the policy on the held-out task ids, through
  a Runner of its own (tools, sandboxes and multi-turn work as in training; the runner hands its
  turns to no scorer and no log). `k` samples per task, each with a seed fixed by (eval seed,
  task id, sample index), so two checkpoints are evaluated on the same draws (paired).
- `PersonalizationEvaluator` (envs with `held_out_tasks()` and `personalization_score()`: chat_sim):
  the paper's score of the policy's first response to each held-out task.

Figures, under the same flat names in metrics.jsonl and W&B (row k: the policy after k updates):
  heldout/pass@1          mean over tasks of the per-task success rate (success: outcome > 0),
                          with the Wilson 95% interval over all counted episodes
  heldout/pass@k          unbiased pass@k (k = heldout/k samples per task), bootstrap interval over tasks
  heldout/outcome_mean    mean over tasks of the per-task mean outcome, bootstrap interval over tasks
  <name>_lo, <name>_hi, <name>_n   each figure's interval and how many items it is over
  heldout/k, heldout/excluded      samples per task; episodes cut by infra_error/timeout (not counted)
  heldout/outcomes        {task id: [outcome per sample, null if excluded]}: per-task results, for
                          pairing runs task by task (experiments/compare.py)
  personalization         the chat_sim score: mean over held-out tasks of the rubric share of the
                          first reply, with personalization_lo / _hi (bootstrap over tasks) and _n
  personalization/scores  {task id: [score]}: per-task scores, for pairing runs task by task
  heldout/<member>/...    env=mix: the same figures over each member's tasks (outcomes only overall)
"""
from __future__ import annotations

import asyncio
import dataclasses
import zlib
from typing import Any

import numpy as np

from agent.chat import ChatRenderer
from agent.policy.base import PolicyClient, SamplingParams
from agent.rollout import EpisodeJob, Runner
from envs.base import AgentEnv, first_messages
from envs.mix import member_of
from learner.loop import Evaluator
from learner.stats import Estimate, bootstrap_mean, pass_at_k, wilson

PREFIX = "heldout/"


def episode_seed(seed: int, task_id: str, sample: int) -> int:
    """The seed of sample `sample` of a held-out task: the same for every checkpoint evaluated."""
    return int(np.random.default_rng([seed, zlib.crc32(task_id.encode()), sample]).integers(2**31))


def eval_jobs(task_ids: list[str], k: int, seed: int) -> list[EpisodeJob]:
    return [EpisodeJob(episode_id=f"eval-t{i}-s{j}", task_id=t, group_id=f"eval-t{i}", seed=episode_seed(seed, t, j))
            for i, t in enumerate(task_ids) for j in range(k)]


@dataclasses.dataclass
class HeldOutResult:
    """Per-task outcomes of one evaluation (None: the episode was cut by infrastructure or a
    deadline) and the estimates read from them."""

    k: int
    outcomes: dict[str, list[float | None]]

    @property
    def excluded(self) -> int:
        return sum(o is None for os in self.outcomes.values() for o in os)

    def estimates(self) -> dict[str, Estimate]:
        """pass@1, pass@k and outcome_mean over the tasks with at least one counted episode
        (pass@k: with at least k); a figure without any such task is left out."""
        counted = {t: [o for o in os if o is not None] for t, os in self.outcomes.items()}
        counted = {t: os for t, os in counted.items() if os}
        if not counted:
            return {}
        wins = {t: sum(o > 0 for o in os) for t, os in counted.items()}
        n_episodes = sum(len(os) for os in counted.values())
        ci = wilson(sum(wins.values()), n_episodes)
        rate = float(np.mean([wins[t] / len(os) for t, os in counted.items()]))
        out = {"pass@1": Estimate(rate, ci.lo, ci.hi, n_episodes)}
        at_k = [pass_at_k(len(os), wins[t], self.k) for t, os in counted.items() if len(os) >= self.k]
        if at_k:
            out["pass@k"] = bootstrap_mean(at_k)
        out["outcome_mean"] = bootstrap_mean([float(np.mean(os)) for os in counted.values()])
        return out

    def member(self, name: str) -> HeldOutResult:
        """The result over one mixture member's tasks (env=mix)."""
        return HeldOutResult(self.k, {t: os for t, os in self.outcomes.items() if member_of(t) == name})

    def row(self, members: list[str] | None = None) -> dict[str, Any]:
        """The figures under their metrics.jsonl / W&B names (see the module docstring), and each
        mixture member's under heldout/<member>/ (its outcomes are in the overall ones)."""
        row = self._figures(PREFIX)
        row[f"{PREFIX}outcomes"] = self.outcomes
        for m in members or []:
            row.update(self.member(m)._figures(f"{PREFIX}{m}/"))
        return row

    def _figures(self, prefix: str) -> dict[str, Any]:
        row: dict[str, Any] = {}
        for name, e in self.estimates().items():
            row.update(e.as_row(f"{prefix}{name}"))
        row.update({f"{prefix}k": self.k, f"{prefix}excluded": self.excluded})
        return row

    def table(self) -> str:
        """A markdown table: metric | value | 95% CI | n (pass@k only for k > 1: pass@1 is above it)."""
        units = {"pass@1": "episodes", "pass@k": "tasks", "outcome_mean": "tasks"}
        lines = ["| metric | value | 95% CI | n |", "|---|---|---|---|"]
        for name, e in self.estimates().items():
            if name == "pass@k" and self.k == 1:
                continue
            label = f"pass@{self.k}" if name == "pass@k" else name
            lines.append(f"| {label} | {e.value:.3f} | [{e.lo:.3f}, {e.hi:.3f}] | {e.n} {units[name]} |")
        lines.append(f"| excluded (infra_error, timeout) | {self.excluded} | | {sum(map(len, self.outcomes.values()))} episodes |")
        return "\n".join(lines)


class EpisodeEvaluator:
    """Full episodes of the policy on the held-out tasks. `runner` is the evaluation's own (its
    actors sample at the evaluation temperature; it runs without an `on_turn` sink, so no turn is
    scored or trained on)."""

    def __init__(self, runner: Runner, task_ids: list[str], k: int = 1, seed: int = 0,
                 members: list[str] | None = None) -> None:
        self.runner = runner
        self.task_ids = list(task_ids)
        self.k = int(k)
        self.members = list(members or [])  # env=mix: figures per member too
        self.jobs = eval_jobs(self.task_ids, self.k, seed)

    async def evaluate(self) -> HeldOutResult:
        episodes = await self.runner.run(self.jobs)
        outcomes: dict[str, list[float | None]] = {t: [] for t in self.task_ids}
        for ep in episodes:  # in job order: sample j of a task is its j-th entry
            outcomes[ep.job.task_id].append(ep.outcome)
        return HeldOutResult(self.k, outcomes)

    async def __call__(self) -> dict[str, Any]:
        return (await self.evaluate()).row(self.members)


def supports_personalization(env: AgentEnv) -> bool:
    return callable(getattr(env, "held_out_tasks", None)) and callable(getattr(env, "personalization_score", None))


class PersonalizationEvaluator:
    """The personalization score of the policy's first response to each of the env's held-out
    tasks, rendered exactly as the env would present it."""

    def __init__(self, env: AgentEnv, client: PolicyClient, renderer: ChatRenderer, sampling: SamplingParams,
                 n_tasks: int = 16, concurrency: int = 16) -> None:
        self.env = env
        self.client = client
        self.renderer = renderer
        self.sampling = dataclasses.replace(sampling, stop_token_ids=sorted(set(sampling.stop_token_ids) | set(renderer.stop_token_ids)))
        self.tasks = env.held_out_tasks(n_tasks)
        self.sem = asyncio.Semaphore(concurrency)

    async def _one(self, i: int, task: Any) -> float:
        messages = first_messages(self.env.system_prompt(), task.prompt)
        async with self.sem:
            # one seed per held-out task: a fixed draw per task, different across tasks
            sampling = dataclasses.replace(self.sampling, seed=(self.sampling.seed or 0) * 1000 + i)
            out = await self.client.generate(self.renderer.render_prompt(messages, self.env.tools()), sampling)
        text = self.renderer.response_text(out.output_ids)
        return float(await asyncio.to_thread(self.env.personalization_score, task, text))

    async def __call__(self) -> dict[str, Any]:
        scores = await asyncio.gather(*(self._one(i, t) for i, t in enumerate(self.tasks)))
        if not scores:
            return {"personalization": None, "personalization_n": 0}
        return {**bootstrap_mean(scores).as_row("personalization"),
                "personalization/scores": {t.task_id: [s] for t, s in zip(self.tasks, scores)}}


def merged(evaluators: list[Evaluator]) -> Evaluator | None:
    """One evaluator running several at once, their figures in one dict (None for none)."""
    if not evaluators:
        return None

    async def evaluate() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for figures in await asyncio.gather(*(e() for e in evaluators)):
            out.update(figures)
        return out

    return evaluate


# The held-out headline of a run, in order of preference: chat_sim's score, else the success rate.
CURVE_FIGURES = (("personalization", "personalization"), (f"{PREFIX}pass@1", "held-out pass@1"))


def rise_verdict(a: Estimate, b: Estimate) -> str:
    """How estimate `b` stands against `a`, in words, by their 95% intervals."""
    if b.lo > a.hi:
        return "rose beyond both intervals (they do not overlap)"
    if b.value > a.hi:
        return "rose above the start's interval, but the intervals overlap"
    if b.value > a.value:
        return "rose within the intervals: not distinguishable from noise"
    return "did not rise"


def rise_line(start: tuple[Any, Estimate], end: tuple[Any, Estimate], what: str) -> str:
    (s0, a), (s1, b) = start, end
    label = f"after {s0}" if isinstance(s0, int) else s0
    return (f"{what} ({label}) {a.value:.3f} [{a.lo:.3f}, {a.hi:.3f}] -> end (after {s1}) "
            f"{b.value:.3f} [{b.lo:.3f}, {b.hi:.3f}]: {rise_verdict(a, b)}")


def heldout_curve(rows: list[dict[str, Any]]) -> list[str]:
    """The end-of-run report of a training run's held-out figure: its value with the 95% interval
    after each evaluated update (row k holds the policy after k updates), then start against end
    in words. No lines when no row was evaluated."""
    for key, title in CURVE_FIGURES:
        points = [(r.get("phase") or int(r["step"]), e) for r in rows if (e := Estimate.from_row(r, key)) is not None]
        if points:
            break
    else:
        return []
    lines = [f"{title} (95% CI) after N updates:"]  # a labelled row (the model before a warm start) by its label
    lines += [f"  {step:>4}: {e.value:.3f} [{e.lo:.3f}, {e.hi:.3f}] n={e.n}" for step, e in points]
    if len(points) < 2:  # nothing to compare (an evaluation-only run)
        return lines
    lines.append(rise_line(points[0], points[-1], "start"))
    rl = [p for p in points if isinstance(p[0], int)]
    if rl[:1] and rl[0] is not points[0] and len(rl) > 1:  # a warm start came first: RL's own rise, from its policy
        lines.append(rise_line(rl[0], rl[-1], "RL's own: warm-started"))
    return lines
