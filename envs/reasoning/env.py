"""ReasoningEnv (`openclaw/Reasoning-v0`): reasoning-gym task families with their own verifiers.

`tasks` lists the families (see `envs/reasoning/tasks.py`: a dataset name, or
`{name, size, config, label}`). The agent answers in its reply (`Answer: X` or `\\boxed{X}`;
the last marker wins, see `answers.py`); reasoning-gym's `score_answer` grades it, and the
outcome is +1 when the score reaches `threshold`, else -1. Single-turn by default (a reply
without an answer ends the episode too: invalid_action, -1); with `max_turns=N` (no tool) each
reply is an attempt, and a wrong or unmarked one is told so (verdict -1 in the next state) and
retried until the N-th, which ends the episode either way; with `tool=python` the agent may
first run code in the toolcall env's sandboxed python tool (same tool, same tool-call parsing)
and answers when it replies without a tool call (one without an answer gets a hint instead).
Held-out tasks (`task_split`) come from a generator seed of their own and never repeat a
training question.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from reasoning_gym.dataset import ProceduralDataset

from envs.base import NextState, Status, StepResult, Task, TaskSplit
from envs.reasoning.answers import extract_answer, format_answer
from envs.reasoning.tasks import DEFAULT_TASKS, TaskSpec, held_out_id, held_out_seed, parse_id, parse_specs, train_id
from envs.tool_calls import parse_action, render_tool_call
from envs.toolcall.env import TOOL_NAME, ToolCallEnv

MAX_ANSWER_CHARS = 2000  # longer "answers" are graded wrong without asking the verifier
HELD_OUT_TRIES = 20  # candidates drawn per held-out task wanted, before giving up on a family
FORMAT = "Give your final answer on the last line as: Answer: <your answer>"
TOOL_PROMPT = f"""You have a `{TOOL_NAME}` tool that runs Python 3 code in a fresh, isolated \
interpreter (no network; standard library only) and returns what the code prints. Call it like this:
{render_tool_call(TOOL_NAME, {"code": "print(3 * 7)"})}
When you know the answer, reply without a tool call. {FORMAT}."""


class ReasoningEnv(ToolCallEnv):
    """reasoning-gym tasks, answered in one reply or after python tool calls; see the module docstring."""

    fork_shared = ("specs", "_train", "_held")

    def __init__(
        self,
        tasks: Any = DEFAULT_TASKS,
        seed: int = 0,
        threshold: float = 1.0,
        tool: str | None = None,
        max_turns: int | None = None,
        sandbox: str = "bwrap",
        image: str | None = None,
        code_timeout: float = 10.0,
        max_output: int = 8192,
        max_obs_chars: int = 16_000,
        memory_mb: int = 1024,
    ):
        if tool not in (None, "none", TOOL_NAME):
            raise ValueError(f"env.tool must be none or {TOOL_NAME}, got {tool!r}")
        self.use_tool = tool == TOOL_NAME
        # The tool (a lazily opened sandbox) comes from ToolCallEnv; its problem list stays empty.
        super().__init__(n_problems=0, max_turns=max_turns or (4 if self.use_tool else 1), sandbox=sandbox,
                         image=image, code_timeout=code_timeout, max_output=max_output,
                         max_obs_chars=max_obs_chars, memory_mb=memory_mb)
        self.specs: dict[str, TaskSpec] = {s.label: s for s in parse_specs(tasks)}
        self.seed, self.threshold = int(seed), float(threshold)
        self._train = {label: s.dataset(self.seed) for label, s in self.specs.items()}  # validates every config now
        self._held: dict[tuple[str, int], ProceduralDataset] = {}

    # ---- tasks -------------------------------------------------------------------------
    def task_ids(self) -> list[str]:
        return [train_id(label, i) for label, s in self.specs.items() for i in range(s.size)]

    def _held_out(self, label: str, split_seed: int) -> ProceduralDataset:
        key = (label, split_seed)
        if key not in self._held:
            self._held[key] = self.specs[label].dataset(held_out_seed(self.seed, split_seed))
        return self._held[key]

    def _entry(self, task_id: str) -> tuple[ProceduralDataset, dict[str, Any]]:
        label, split_seed, index = parse_id(task_id)
        if label not in self.specs:
            raise KeyError(f"unknown reasoning task {task_id!r}: no family {label!r} (have {', '.join(self.specs)})")
        if index >= self.specs[label].size:  # held-out generators have the family's size too
            raise KeyError(f"unknown reasoning task {task_id!r}: {label} has {self.specs[label].size} tasks per generator")
        ds = self._train[label] if split_seed is None else self._held_out(label, split_seed)
        return ds, ds[index]

    def load_task(self, task_id: str) -> Task:
        _, entry = self._entry(task_id)
        answer = str(entry["answer"])
        oracle = [format_answer(answer)]
        if self.use_tool:
            oracle.insert(0, render_tool_call(TOOL_NAME, {"code": f"print({answer!r})"}))
        prompt = f"{entry['question'].rstrip()}\n\n{FORMAT}"
        meta = {"dataset": self.specs[parse_id(task_id)[0]].name, "entry": entry}
        return Task(task_id=task_id, prompt=prompt, oracle=oracle, answer=answer, meta=meta)

    def task_split(self, n_held_out: int, seed: int) -> TaskSplit:
        """Every training task, and `n_held_out` tasks (spread evenly over the families) from the
        held-out generator seed, skipping any whose question text a training task already has."""
        held: list[str] = []
        labels = list(self.specs)
        for k, label in enumerate(labels):
            want = n_held_out // len(labels) + (k < n_held_out % len(labels))
            if want <= 0:
                continue
            train_ds = self._train[label]
            seen = {train_ds[i]["question"] for i in range(len(train_ds))}
            ds, got = self._held_out(label, seed), 0
            for index in range(min(want * HELD_OUT_TRIES, len(ds))):
                q = ds[index]["question"]
                if q not in seen:
                    seen.add(q)
                    held.append(held_out_id(label, seed, index))
                    got += 1
                    if got == want:
                        break
        return TaskSplit(train=self.task_ids(), held_out=held)

    # ---- prompts and tools -------------------------------------------------------------
    def system_prompt(self) -> str | None:
        return TOOL_PROMPT if self.use_tool else None

    def tools(self) -> list[dict[str, Any]]:
        return super().tools() if self.use_tool else []

    # ---- acting and grading ------------------------------------------------------------
    def _act(self, action: str) -> StepResult:
        if not self.use_tool:
            return self._grade(action)
        parsed = parse_action(action)
        if parsed.errors:
            return self._invalid("; ".join(parsed.errors), role="tool")
        if parsed.calls:
            return self._run_calls(parsed.calls)
        return self._grade(parsed.text)

    def _grade(self, text: str) -> StepResult:
        # without the tool every turn is an attempt: a wrong one is told so and, while turns remain, retried
        last = self.turn + 1 >= self.max_turns
        answer = extract_answer(text)
        if answer is None:
            result = self._invalid("no final answer found", role="user", hint=f"{FORMAT}.")
            if not self.use_tool and last:  # the last reply is spent: the episode ends (terminated), failed
                result.done, result.outcome = True, -1.0
            return result
        assert self.task is not None
        ds, entry = self._entry(self.task.task_id)
        data: dict[str, Any] = {"answer": answer, "expected": self.task.answer}
        score = 0.0
        if len(answer) <= MAX_ANSWER_CHARS:
            try:
                score = float(ds.score_answer(answer, entry))
            except Exception as e:  # a verifier that chokes on the agent's text: the answer is wrong
                data["verifier_error"] = f"{type(e).__name__}: {e}"[:300]
        correct = score >= self.threshold
        verdict = 1 if correct else -1
        data.update(score=score, correct=correct, verdict=verdict)
        content = f"Your answer {answer} is {'correct' if correct else 'incorrect'}."
        if correct or self.use_tool or last:
            return StepResult(NextState("user", content, "answer", data), Status.OK, done=True, outcome=float(verdict))
        return StepResult(NextState("user", f"{content} Try again. {FORMAT}.", "answer", data), Status.OK)

    def random_action(self, rng: np.random.Generator) -> str:
        """Tool-call noise (with the tool) or answers in every accepted form, right or wrong."""
        if self.use_tool and rng.random() < 0.5:
            return super().random_action(rng)
        assert self.task is not None
        guess = [str(int(rng.integers(-20, 100))), str(self.task.answer), "yes", ""][int(rng.integers(4))]
        forms = [f"Answer: {guess}", f"\\boxed{{{guess}}}", f"I think it is {guess}.", f"**Answer:** {guess}."]
        return forms[int(rng.integers(len(forms)))]
