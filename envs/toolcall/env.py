"""ToolCallEnv (`openclaw/ToolCall-v0`): math word problems solved with a `python` tool.

Each turn the agent either calls the tool (`<tool_call>{"name": "python", "arguments":
{"code": ...}}</tool_call>`; the next state is the tool's output, role "tool") or answers in
\\boxed{} (the episode ends: outcome +1 if math-verify finds it equal to the reference, else -1).
Problems come from the bundled generator (`problems.py`) or a JSONL/parquet file (`data=PATH`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from envs.base import AgentEnv, NextState, Status, StepResult, Task, cap_text
from envs.sandbox import Limits, SandboxError, SandboxLimitError
from envs.tool_calls import function_schema, parse_action, render_tool_call
from envs.toolcall import problems
from envs.toolcall.answers import extract_boxed, is_equivalent
from envs.toolcall.loader import load_tasks
from envs.toolcall.python_tool import MAX_CODE_CHARS, PythonTool, ToolRun

TOOL_NAME = "python"
MAX_CALLS_PER_TURN = 4
SYSTEM_PROMPT = f"""You solve math word problems. You have a `{TOOL_NAME}` tool that runs Python 3 code \
in a fresh, isolated interpreter (no network, no subprocesses; standard library only, e.g. math and \
fractions) and returns what the code prints. Call it like this:
{render_tool_call(TOOL_NAME, {"code": "print(3 * 7)"})}
Use print() to see results. Each call starts from scratch, so include everything the code needs.
When you know the answer, reply without a tool call and put the final answer in \\boxed{{}}, \
for example: The answer is \\boxed{{42}}. Give exact values (a fraction like 7/3 rather than a rounded decimal)."""


class ToolCallEnv(AgentEnv):
    """Math problems with a sandboxed python tool; see the module docstring."""

    fork_shared = ("_tasks", "_ids")

    def __init__(
        self,
        data: str | None = None,
        n_problems: int = 500,
        seed: int = 0,
        families: list[str] | None = None,
        max_turns: int = 8,
        sandbox: str = "bwrap",
        image: str | None = None,
        code_timeout: float = 10.0,
        max_output: int = 8192,
        max_obs_chars: int = 16_000,
        memory_mb: int = 1024,
    ):
        super().__init__(max_turns=max_turns)
        if data and families is not None:
            raise ValueError("families picks the bundled generator's problem families; it does not apply to data=")
        tasks = load_tasks(data) if data else problems.generate(int(n_problems), int(seed), problems.check_families(families))
        self._tasks: dict[str, Task] = {t.task_id: t for t in tasks}
        self._ids = list(self._tasks)
        self.max_obs_chars = int(max_obs_chars)
        self.tool = PythonTool(
            backend=sandbox, image=image, timeout=code_timeout, max_output=max_output,
            limits=Limits(memory_mb=memory_mb, pids=64, cpus=1.0, disk_mb=256),
        )

    # ---- AgentEnv hooks ----------------------------------------------------------------
    def task_ids(self) -> list[str]:
        return list(self._ids)

    def load_task(self, task_id: str) -> Task:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise KeyError(f"unknown toolcall task {task_id!r} (ids look like {self._ids[0]!r})") from None

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def tools(self) -> list[dict[str, Any]]:
        return [
            function_schema(
                TOOL_NAME,
                "Run Python 3 code in a fresh sandboxed interpreter and return its printed output.",
                {"code": {"type": "string", "description": "Python source to run; print() what you need."}},
                ["code"],
            )
        ]

    def _start(self, task: Task) -> NextState | None:
        self.tool.reset()
        return None

    def _act(self, action: str) -> StepResult:
        parsed = parse_action(action)
        if parsed.errors:
            return self._invalid("; ".join(parsed.errors), role="tool")
        if parsed.calls:
            return self._run_calls(parsed.calls)
        answer = extract_boxed(parsed.text)
        if answer is None:
            return self._invalid(
                "no tool call and no final answer found", role="user",
                hint=f"Call the {TOOL_NAME} tool, or give your final answer in \\boxed{{}}.",
            )
        assert self.task is not None
        correct = is_equivalent(answer, str(self.task.answer))
        verdict = 1 if correct else -1
        content = f"Your answer {answer} is {'correct' if correct else 'incorrect'}."
        data = {"answer": answer, "expected": self.task.answer, "correct": correct, "verdict": verdict}
        return StepResult(NextState("user", content, "answer", data), Status.OK, done=True, outcome=float(verdict))

    def _invalid(self, error: str, role: str, hint: str | None = None) -> StepResult:
        hint = hint or f'Call tools as <tool_call>{{"name": "{TOOL_NAME}", "arguments": {{"code": "..."}}}}</tool_call>.'
        content = cap_text(f"Error: {error}. {hint}", self.max_obs_chars)
        kind = "tool_result" if role == "tool" else "user_reply"
        return StepResult(NextState(role, content, kind, {"error": error, "verdict": -1}), Status.INVALID_ACTION)

    def _run_calls(self, calls: list) -> StepResult:
        if len(calls) > MAX_CALLS_PER_TURN:
            return self._invalid(f"{len(calls)} tool calls in one turn; at most {MAX_CALLS_PER_TURN}", role="tool")
        for call in calls:
            if call.name != TOOL_NAME:
                return self._invalid(f"unknown tool {call.name!r}; the only tool is {TOOL_NAME!r}", role="tool")
            code = call.arguments.get("code")
            if not isinstance(code, str) or not code.strip():
                return self._invalid(f'tool {TOOL_NAME!r} needs a non-empty string argument "code"', role="tool")
            if len(code) > MAX_CODE_CHARS:
                return self._invalid(f"code is {len(code)} characters; the limit is {MAX_CODE_CHARS}", role="tool")
        runs: list[ToolRun] = []
        try:
            for call in calls:
                runs.append(self.tool.run(call.arguments["code"]))
        except SandboxLimitError as e:  # the code wrote past the tool sandbox's disk cap
            return self._stopped(str(e), "tool_result")
        except SandboxError as e:
            content = f"Error: the python tool is unavailable (sandbox failure: {e}). This is not your fault."
            return StepResult(NextState("tool", content, "tool_result", {"error": f"sandbox: {e}"}), Status.INFRA_ERROR)
        parts = [self._render(r) for r in runs]
        content = cap_text("\n\n".join(parts) if len(parts) > 1 else parts[0], self.max_obs_chars)
        last = runs[-1]
        data = {
            "tool": TOOL_NAME, "exit_code": last.exit_code, "stdout": last.stdout, "stderr": last.stderr,
            "error": last.error, "timed_out": last.timed_out, "truncated": last.truncated,
            "forbidden_import": last.forbidden_import, "calls": len(runs),
        }
        if len(runs) > 1:
            data["results"] = [{"exit_code": r.exit_code, "error": r.error} for r in runs]
        status = Status.ENV_ERROR if any(r.limit_hit for r in runs) else Status.OK
        return StepResult(NextState("tool", content, "tool_result", data), status)

    def _render(self, r: ToolRun) -> str:
        lines = []
        if r.stdout:
            lines.append(r.stdout.rstrip("\n"))
        if r.stderr.strip():
            lines.append(("stderr:\n" if r.stdout else "") + r.stderr.rstrip("\n"))
        if not lines:
            lines.append("(no output)")
        if r.timed_out or r.truncated:
            lines.append(f"[{r.error}]")
        elif r.exit_code not in (0, None) and not r.forbidden_import:
            lines.append(f"[exit code {r.exit_code}]")
        return "\n".join(lines)

    def _fork_resources(self) -> dict[int, Any]:
        """The tool's sandbox, forked once code ran in it this episode (files it wrote persist);
        a clean one is not copied: the fork opens its own on first use."""
        sb = self.tool._sandbox
        if sb is None:
            return {}
        return {id(sb): sb.fork() if self.tool.used else None}

    # ---- random and cleanup ------------------------------------------------------------
    def random_action(self, rng: np.random.Generator) -> str:
        """Random but varied actions: good and failing code, broken calls, guesses, chatter."""
        a, b = (int(x) for x in rng.integers(-50, 100, size=2))
        kind = int(rng.integers(9))
        if kind <= 2:
            op = ["+", "-", "*", "//", "/", "**", "%"][int(rng.integers(7))]
            code = f"print({a} {op} {abs(b) % 7 if op == '**' else b})"
            return render_tool_call(TOOL_NAME, {"code": code})
        if kind == 3:
            code = ["print(undefined_name)", "import socket", "raise ValueError('x')", "print('a' * 100000)"][int(rng.integers(4))]
            return render_tool_call(TOOL_NAME, {"code": code})
        if kind == 4:
            return '<tool_call>{"name": "python", "arguments": {"code": "print(1)"</tool_call>'  # broken JSON
        if kind == 5:
            return render_tool_call(["calculator", "search", "bash"][int(rng.integers(3))], {"code": f"{a}+{b}"})
        if kind == 6:
            return render_tool_call(TOOL_NAME, {"source": f"print({a})"})  # missing "code"
        if kind == 7:
            return f"I think the answer is \\boxed{{{a}}}."
        return ["Let me think about this step by step.", "", "Hmm. \\boxed{", "<tool_call>"][int(rng.integers(4))]

    def close(self) -> None:
        self.tool.close()
        super().close()
