"""ChatSimEnv (`openclaw/ChatSim-v0`): a simulated student or teacher talks to the agent.

A task is one persona and one homework problem; its prompt is the persona's first message.
Each action is the assistant's reply; the next state is the user's answer (role "user", kind
"user_reply") with data {verdict, hint, failed, satisfied, user_source, score}. The session ends
when the user is satisfied (the scripted user's rubric passes, or the LLM user's final
`VERDICT: satisfied` line): outcome +1. When
`max_turns` (default 8) replies pass without that, the episode is truncated: outcome -1.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import numpy as np

from envs.base import AgentEnv, NextState, Status, StepResult, Task
from envs.chat_sim.persona import Persona, load_persona
from envs.chat_sim.problems import load_problems
from envs.chat_sim.responses import oracle_response, random_response
from envs.chat_sim.rubric import quarter_score
from envs.chat_sim.score import DEFAULT_PERSONAS, held_out_tasks, make_task, personalization_score
from envs.chat_sim.users import Complete, make_user


class ChatSimEnv(AgentEnv):
    # The users hold no conversation state (the history is the env's, and a fork copies it); an
    # LLM user's `complete` client is shared, not copied.
    fork_shared = ("personas", "users", "problems")

    def __init__(self, persona: str | Path | Persona | Iterable[str | Path | Persona] = DEFAULT_PERSONAS,
                 user: str = "scripted", complete: Complete | None = None,
                 problems: str | Path = "generated", split: str = "train", max_turns: int = 8,
                 system_prompt: str | None = None) -> None:
        super().__init__(max_turns=max_turns)
        specs = [persona] if isinstance(persona, (str, Path, Persona)) else list(persona)
        self.personas = {p.name: p for p in map(load_persona, specs)}
        if len(self.personas) != len(specs):
            raise ValueError("persona names must be unique")
        self.users = {name: make_user(p, user, complete) for name, p in self.personas.items()}
        self.problem_source = problems
        self.problems = {p.problem_id: p for p in load_problems(problems, split)}
        if not self.problems:
            raise ValueError(f"no {split} problems in {problems!r}")
        self._system_prompt = system_prompt
        self.history: list[dict[str, str]] = []

    # ---- hooks -------------------------------------------------------------------------
    def task_ids(self) -> list[str]:
        return [f"{name}/{pid}" for name in self.personas for pid in self.problems]

    def load_task(self, task_id: str) -> Task:
        name, _, pid = task_id.partition("/")
        if name not in self.personas or pid not in self.problems:
            raise KeyError(f"unknown chat_sim task {task_id!r} (ids look like 'student/gen-0000')")
        return make_task(self.personas[name], self.problems[pid])

    def _start(self, task: Task) -> NextState | None:
        self.history = [{"role": "user", "content": task.prompt}]
        return None

    def _act(self, action: str) -> StepResult:
        persona: Persona = self.task.meta["persona"]
        ctx = self.task.meta["problem"].context()
        reply = self.users[persona.name].reply(ctx, self.history, action, self.turn)
        self.history += [{"role": "assistant", "content": action}, {"role": "user", "content": reply.content}]
        data = reply.data() | {"score": quarter_score(list(persona.rubric), action, ctx)}
        status = Status.OK if action.strip() else Status.INVALID_ACTION
        return StepResult(NextState("user", reply.content, "user_reply", data), status,
                          done=reply.satisfied, outcome=1.0 if reply.satisfied else None)

    def system_prompt(self) -> str | None:
        return self._system_prompt

    def oracle_action(self) -> str:
        """A reply that satisfies the persona (so the oracle ends every session on turn 1)."""
        assert self.task is not None, "call reset() first"
        return oracle_response(self.task.meta["persona"], self.task.meta["problem"])

    def random_action(self, rng: np.random.Generator) -> str:
        assert self.task is not None, "call reset() first"
        return random_response(rng, self.task.meta["persona"], self.task.meta["problem"])

    # ---- the personalization benchmark ---------------------------------------------------
    def held_out_tasks(self, n: int | None = None) -> list[Task]:
        """Held-out tasks for this env's personas and problem source (disjoint from training)."""
        return held_out_tasks(self.personas.values(), self.problem_source, n)

    def personalization_score(self, task: Task, first_response: str, complete: Complete | None = None,
                              votes: int = 1) -> float:
        return personalization_score(task.meta["persona"], task.meta["problem"], first_response, complete, votes)
