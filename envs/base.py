"""The env contract every interaction type keeps (docs/architecture.md, "Env").

An `AgentEnv` is a Gymnasium env whose action is the assistant's raw output text and whose
`step` returns the next state s_{t+1} the agent sees: a tool result, a shell's output, a new
screen, a user's reply. Subclasses implement four hooks (`task_ids`, `load_task`, `_start`,
`_act`); the base class owns turn counting, truncation, status bookkeeping and the `info`
layout, so every env reports the same things the same way.

Status values (info["status"]) say whose fault a turn's result is, because the learner treats
them differently:
  ok              the action ran (a failing command is still "ok": the agent caused it).
  invalid_action  the action could not be understood (malformed or unknown tool call, bad args).
  env_error       the action ran but the env reported an error it caused (tool raised, the
                  tool's own time or output limit fired, or the action drove the env past a
                  hard limit that stopped it: see `_stopped`).
  infra_error     the env's machinery failed (sandbox died, daemon error): not the agent's fault.
  timeout         a harness deadline (step or episode) fired: not the agent's fault.
  diverged        env=replay (envs/replay.py): the run being replayed recorded no such action at
                  this point, so no next state is known.
Turns with infra_error, timeout or diverged never count as reward 0; they leave the batch.
"""
from __future__ import annotations

import copy
import dataclasses
import enum
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

MAX_TEXT = 1 << 20  # characters; observations longer than this are cut by the env itself


def cap_text(text: str, limit: int) -> str:
    """Keep the head and tail of an over-long observation, saying how much was cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


class Status(str, enum.Enum):
    """How a step went: the agent's doing (ok, invalid_action, env_error) or not (infra_error,
    timeout, diverged). Written as its plain value in info["status"], turns.jsonl and metrics."""

    OK = "ok"
    INVALID_ACTION = "invalid_action"
    ENV_ERROR = "env_error"
    INFRA_ERROR = "infra_error"
    TIMEOUT = "timeout"
    DIVERGED = "diverged"

    @property
    def is_infra(self) -> bool:
        """True for failures that are not the agent's doing (excluded from training)."""
        return self in (Status.INFRA_ERROR, Status.TIMEOUT, Status.DIVERGED)

    def __str__(self) -> str:  # the plain value in logs and tables, as the JSON has it
        return self.value


def first_messages(system_prompt: str, user_content: str) -> list[dict[str, Any]]:
    """An episode's opening chat: the env's system prompt (when it has one), then the task as the
    user's message (what `reset` hands the agent in info["messages"])."""
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*system, {"role": "user", "content": user_content}]


class ForkError(RuntimeError):
    """The env cannot fork: its state cannot be deep-copied, or it holds what cannot be forked."""


@dataclasses.dataclass
class NextState:
    """What the agent sees after its action, plus what a program can read about it."""

    role: str  # "user" or "tool": the chat role the observation is rendered with
    content: str  # the text the agent sees
    kind: str  # the signal: "shell", "tests", "tool_result", "screen", "user_reply", ...
    data: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NextState:
        return cls(role=d["role"], content=d["content"], kind=d["kind"], data=dict(d.get("data") or {}))


@dataclasses.dataclass
class Task:
    """One problem an env can pose. `oracle` is a known-good list of raw assistant outputs."""

    task_id: str
    prompt: str
    oracle: list[str] = dataclasses.field(default_factory=list)
    answer: Any = None
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class StepResult:
    """What a subclass's `_act` returns for one action."""

    next_state: NextState
    status: Status = Status.OK
    done: bool = False  # the episode ended by the agent's doing (answer given, submit)
    outcome: float | None = None  # the verifiable outcome, required when done


@dataclasses.dataclass(frozen=True)
class TaskSplit:
    """Disjoint task ids: `train` feeds rollouts and demonstrations, `held_out` only evaluation."""

    train: list[str]
    held_out: list[str]

    def __post_init__(self) -> None:
        both = set(self.train) & set(self.held_out)
        if both:
            raise ValueError(f"held-out tasks also in training: {sorted(both)[:3]}")

    def to_dict(self) -> dict[str, list[str]]:
        return {"train": list(self.train), "held_out": list(self.held_out)}


def split_ids(task_ids: list[str], n_held_out: int, seed: int) -> TaskSplit:
    """A seeded draw of min(n_held_out, len // 2) ids as held out (in task order), the rest train."""
    ids = list(dict.fromkeys(task_ids))
    n = max(0, min(int(n_held_out), len(ids) // 2))
    picked = set(np.random.default_rng(seed).choice(len(ids), size=n, replace=False).tolist()) if n else set()
    return TaskSplit(train=[t for i, t in enumerate(ids) if i not in picked],
                     held_out=[t for i, t in enumerate(ids) if i in picked])


class AnyText(spaces.Text):
    """A Text space that holds any unicode string (Gymnasium's Text limits the charset)."""

    def __init__(self, max_length: int = MAX_TEXT, seed: int | None = None):
        super().__init__(max_length=max_length, min_length=0, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"AnyText({self.max_length})"


class AgentEnv(gymnasium.Env):
    """Base class of every env. Subclass it, implement the hooks, register it (see `register`).

    Hooks a subclass implements:
      task_ids() -> list[str]               the tasks this env can pose
      load_task(task_id) -> Task            one task
      _start(task) -> (NextState | None)    set the episode up (sandbox, browser); may return
                                            extra first content (None: the prompt alone)
      _act(action) -> StepResult            carry one action out
    Optional: system_prompt(), tools(), oracle_action(), random_action(rng), _finish() (free
    per-episode resources), close() (free everything), and for `fork`: `fork_shared` (attributes
    a fork shares rather than copies), `fork_held` (attributes holding sandboxes the fork gets
    forks of) or _fork_resources() (what a fork holds in place of this env's resources).
    """

    metadata = {"render_modes": []}
    #: outcome given when the turn limit is reached without the agent finishing
    fail_outcome: float = -1.0
    #: attributes a fork shares with its original instead of copying (read-only data: task tables)
    fork_shared: tuple[str, ...] = ()
    #: attributes (dotted paths) holding resources with fork() and close(): a fork holds their forks
    fork_held: tuple[str, ...] = ()

    def __init__(self, max_turns: int = 10) -> None:
        super().__init__()
        self.max_turns = int(max_turns)
        self.observation_space = AnyText()
        self.action_space = AnyText()
        self.task: Task | None = None
        self.turn = 0
        self.done = False

    # ---- hooks -------------------------------------------------------------------------
    def task_ids(self) -> list[str]:
        raise NotImplementedError

    def load_task(self, task_id: str) -> Task:
        raise NotImplementedError

    def _start(self, task: Task) -> NextState | None:
        return None

    def _act(self, action: str) -> StepResult:
        raise NotImplementedError

    def _finish(self) -> None:
        """Free what one episode used (called at episode end, before the next reset)."""

    def _stopped(self, error: str, kind: str) -> StepResult:
        """The agent's action stopped the env under it (its sandbox wrote past the disk cap): the
        episode ends as the agent's failure (env_error, `fail_outcome`), not an infrastructure
        one; the next state says why (verdict -1: the action failed)."""
        ns = NextState("tool", f"Error: {error}.", kind, {"error": error, "verdict": -1})
        return StepResult(ns, Status.ENV_ERROR, done=True, outcome=self.fail_outcome)

    def _fork_resources(self) -> dict[int, Any]:
        """What a fork holds in place of this env's resources: id(resource) -> its fork (a
        sandbox's `fork()`), or None where the fork may open its own. Everything else is
        deep-copied. Default: forks of what `fork_held` names (None stays None). A sandbox that
        fails to fork raises SandboxError (infra)."""
        out: dict[int, Any] = {}
        try:
            for path in self.fork_held:
                held = self
                for name in path.split("."):
                    held = getattr(held, name)
                if held is not None:
                    out[id(held)] = held.fork()
        except BaseException:
            for done in out.values():
                done.close()
            raise
        return out

    def fork(self) -> AgentEnv:
        """An independent copy of this env, mid-episode, that continues from the same state: a deep
        copy sharing `fork_shared`, holding forks of its resources (`_fork_resources`). Closing it
        releases those. An env whose state cannot be copied raises ForkError; one that holds what
        no deep copy can fork (a browser, a socket) overrides this to fork it or to say it cannot."""
        resources = self._fork_resources()
        memo: dict[int, Any] = {id(getattr(self, name)): getattr(self, name) for name in self.fork_shared}
        memo.update(resources)
        try:
            return copy.deepcopy(self, memo)
        except Exception as e:
            for held in resources.values():
                if held is not None:
                    held.close()
            if isinstance(e, ForkError):
                raise
            raise ForkError(f"{type(self).__name__} cannot fork: its state cannot be copied ({type(e).__name__}: {e}); "
                            "name what it holds in fork_held or fork_shared, or override fork()") from e

    def system_prompt(self) -> str | None:
        return None

    def tools(self) -> list[dict[str, Any]]:
        return []

    def oracle_action(self) -> str:
        """The next known-good action for the current episode (default: the task's list)."""
        assert self.task is not None, "call reset() first"
        if self.turn >= len(self.task.oracle):
            raise IndexError(f"task {self.task.task_id} has no oracle action for turn {self.turn}")
        return self.task.oracle[self.turn]

    def demonstrable(self, task_id: str) -> bool:
        """Whether `oracle_action` can act out `task_id` (demonstrations are drawn from these);
        every task by default. An env whose oracle covers some tasks only says which."""
        return True

    def random_action(self, rng: np.random.Generator) -> str:
        """A random action. Envs override this with random but plausible tool calls."""
        return self.action_space.sample()

    def task_split(self, n_held_out: int, seed: int) -> TaskSplit:
        """Training and held-out task ids, disjoint and fixed by `seed` (not by the run's seed, so
        every run of a comparison is evaluated on the same tasks). Default: a seeded draw of
        `n_held_out` of `task_ids()`, at most half of them, the rest train. Envs with a natural
        held-out source (fresh generator seeds) override this; `load_task` accepts both kinds."""
        return split_ids(self.task_ids(), n_held_out, seed)

    @classmethod
    def _has_task_hooks(cls) -> bool:
        """Whether the subclass poses tasks through the hooks (else it owns reset and step)."""
        return cls.load_task is not AgentEnv.load_task

    # ---- gymnasium API -----------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if not self._has_task_hooks():
            # A subclass written the Gymnasium way (its own reset/step, calling super().reset(seed=
            # seed) first as Gymnasium asks): seeding is all the base does, as gymnasium.Env's.
            self.turn, self.done = 0, False
            return None
        if self.task is not None and not self.done:
            self._finish()
        options = options or {}
        task_id = options.get("task_id")
        if task_id is None:
            ids = self.task_ids()
            if not ids:
                raise RuntimeError(f"{type(self).__name__} has no tasks")
            task_id = ids[int(self.np_random.integers(len(ids)))]
        self.task = self.load_task(str(task_id))
        self.turn = 0
        self.done = False
        extra = self._start(self.task)
        user_content = self.task.prompt if extra is None else f"{self.task.prompt}\n\n{extra.content}"
        messages = first_messages(self.system_prompt(), user_content)
        info: dict[str, Any] = {"task_id": self.task.task_id, "messages": messages, "tools": self.tools()}
        if extra is not None:
            info["start_state"] = extra
        return user_content, info

    def step(self, action: str):
        if self.task is None or self.done:
            raise RuntimeError("step() called before reset() or after the episode ended")
        if not isinstance(action, str):
            action = str(action)
        result = self._act(action)
        self.turn += 1
        terminated = result.done
        truncated = not terminated and self.turn >= self.max_turns
        if result.status.is_infra:
            # Infrastructure failed under the agent: the episode cannot go on meaningfully.
            truncated = not terminated
        reward = 0.0
        outcome = None
        if terminated:
            if result.outcome is None:
                raise RuntimeError(f"{type(self).__name__}._act ended an episode without an outcome")
            outcome = float(result.outcome)
        elif truncated and not result.status.is_infra:
            outcome = float(self.fail_outcome)
        if outcome is not None:
            reward = outcome
        info = {
            "next_state": result.next_state,
            "status": result.status.value,
            "turn": self.turn,
            "outcome": outcome,
        }
        if terminated or truncated:
            self.done = True
            self._finish()
        return result.next_state.content, reward, terminated, truncated, info


def register(env_id: str, entry_point: str, **kwargs: Any) -> None:
    """Register an env with Gymnasium once (re-registering the same id is a no-op)."""
    if env_id not in gymnasium.registry:
        gymnasium.register(id=env_id, entry_point=entry_point, kwargs=kwargs, disable_env_checker=True)


#: short name (the `env=` config word) -> (Gymnasium id, entry point). One line per env.
ENVS: dict[str, tuple[str, str]] = {
    "terminal": ("openclaw/Terminal-v0", "envs.terminal.env:TerminalEnv"),
    "gui": ("openclaw/GUI-v0", "envs.gui.env:GuiEnv"),
    "swe": ("openclaw/SWE-v0", "envs.swe.env:SWEEnv"),
    "toolcall": ("openclaw/ToolCall-v0", "envs.toolcall.env:ToolCallEnv"),
    "chat_sim": ("openclaw/ChatSim-v0", "envs.chat_sim.env:ChatSimEnv"),
    "reasoning": ("openclaw/Reasoning-v0", "envs.reasoning.env:ReasoningEnv"),
    "replay": ("openclaw/Replay-v0", "envs.replay:ReplayEnv"),
}
for _env_id, _entry in ENVS.values():
    register(_env_id, _entry)
