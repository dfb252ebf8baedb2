"""The personalization score (paper Table 3): how well a first response fits a persona.

Rules (default): the persona's rubric applied to the text; the fraction of items passed,
rounded half-up to a quarter, so the score is one of {0, .25, .5, .75, 1} like the paper's judge.
LLM judge (optional): `complete(messages) -> str` is asked `votes` times for a \\boxed{score}
among those five values; the mean of valid votes is returned, and the rules score when no vote
is valid. The learner logs the mean over `held_out_tasks()` as `personalization`.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable

from envs.base import Task
from envs.chat_sim.persona import Persona, load_persona
from envs.chat_sim.problems import Problem, load_problems
from envs.chat_sim.responses import oracle_response
from envs.chat_sim.rubric import quarter_score
from envs.chat_sim.users import Complete

ALLOWED = (0.0, 0.25, 0.5, 0.75, 1.0)
_BOXED = re.compile(r"\\boxed\{\s*([0-9.]+)\s*\}")
DEFAULT_PERSONAS = ("student", "teacher")


def judge_prompt(persona: Persona, problem: Problem, response: str) -> list[dict[str, str]]:
    prefs = "\n".join(f"- {it.preference}" for it in persona.rubric)
    return [
        {"role": "system", "content": "You judge how well an AI assistant's reply fits a user's preferences."},
        {"role": "user", "content": (
            f"The user: {persona.description}\n\nTheir preferences:\n{prefs}\n\n"
            f"The user's request:\n{persona.opening(problem.context())}\n\n"
            f"The assistant's reply:\n{response}\n\n"
            "Score how well the reply meets the preferences: 1 all met, 0 none met. Use only 0, 0.25, "
            "0.5, 0.75 or 1. Think briefly, then end with the score as \\boxed{score}.")},
    ]


def parse_boxed_score(text: Any) -> float | None:
    """The last \\boxed{x} in the text when x is one of the allowed scores, else None."""
    if not isinstance(text, str):
        return None
    found = _BOXED.findall(text)
    if not found:
        return None
    try:
        value = float(found[-1])
    except ValueError:
        return None
    return value if value in ALLOWED else None


def personalization_score(persona: str | Path | Persona, problem: Problem, first_response: str,
                          complete: Complete | None = None, votes: int = 1) -> float:
    """Score a first response for a persona, by rules or (with `complete`) by an LLM judge."""
    p = load_persona(persona)
    rules = quarter_score(list(p.rubric), first_response, problem.context())
    if complete is None:
        return rules
    valid = []
    for _ in range(max(1, int(votes))):
        try:
            v = parse_boxed_score(complete(judge_prompt(p, problem, first_response)))
        except Exception:  # a failed judge call is an invalid vote, not a crash
            v = None
        if v is not None:
            valid.append(v)
    return sum(valid) / len(valid) if valid else rules


def make_task(persona: Persona, problem: Problem) -> Task:
    """A chat_sim task: the persona's opening about one problem (shared by env and held-out set)."""
    return Task(
        task_id=f"{persona.name}/{problem.problem_id}",
        prompt=persona.opening(problem.context()),
        oracle=[oracle_response(persona, problem)],
        answer=problem.answer,
        meta={"persona": persona, "problem": problem},
    )


def held_out_tasks(personas: Iterable[str | Path | Persona] = DEFAULT_PERSONAS,
                   problems: str | Path = "generated", n: int | None = None) -> list[Task]:
    """The fixed held-out tasks (problems never used for training) for each persona.

    Score a response with personalization_score(t.meta["persona"], t.meta["problem"], text)."""
    probs = load_problems(problems, "heldout")
    if n is not None:
        probs = probs[: int(n)]
    if not probs:
        raise ValueError(f"no held-out problems in {problems!r} (a file holds out every fifth line)")
    return [make_task(p, prob) for p in map(load_persona, personas) for prob in probs]
