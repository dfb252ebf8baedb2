"""SWEEnv (`openclaw/SWE-v0`): repair a repository from an issue, graded by swebench.

The prompt is the instance's problem statement. The instances: the bundled ones (bundled.py),
`instances="synth"` (bugs synthesized in the bundled libraries, synth.py), or a file of records. Each turn the agent makes one tool call:
  bash   {"command": ...}            one shell command in /testbed (state persists)
  edit   {"command": "view" | "create" | "str_replace", "path", "file_text" | "old_str", "new_str"}
  submit {}                          end: the patch is `git diff` of the work tree vs base_commit
The next state is the command's output (kind "shell", role "tool"; data: exit_code, timed_out,
truncated, tests). At submit the patch is graded in a fresh sandbox from the same image
(grading.py: swebench's report on FAIL_TO_PASS / PASS_TO_PASS, after the test files and test
infrastructure the patch touched are put back to base_commit; data["reverted"] lists them):
outcome +1 resolved, -1 not; the next state is then kind "tests". A command that writes past
the sandbox's disk cap stops it: status env_error, outcome -1.

Rules verdict (next_state.data["verdict"], read by the rules judge):
  -1  the action failed because of the agent: malformed call, unknown tool, an edit error, a
      command that exits non-zero or times out, a test run worse than the previous one
      (fewer passed or more failed), an unresolved submission.
  +1  a test run better than the previous one in the episode (more passed or fewer failed; the
      first run counts as better when nothing fails), a resolved submission.
   0  otherwise (a command that succeeded, a successful edit, a test run no better or worse).
A "test run" is any bash command whose output ends with a pytest summary ("3 failed, 5 passed").
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np

from envs.base import AgentEnv, NextState, Status, StepResult, Task, cap_text
from envs.sandbox import ExecResult, Limits, SandboxError, SandboxLimitError, open_sandbox
from envs.swe import bundled, grading, synth
from envs.swe.edit import EditError, oracle_workflow, run_edit
from envs.swe.instances import InstanceError, load_instances, resolve_image, sandbox_user
from envs.tool_calls import function_schema, parse_action, render_tool_call

SYSTEM_PROMPT = """You are a software engineer fixing an issue in the repository at /testbed \
(a git checkout). Work in small steps, one tool call per reply, written as
<tool_call>{"name": TOOL, "arguments": {...}}</tool_call>
Tools:
- bash: run one shell command in /testbed (state such as cd persists), e.g. {"command": "grep -rn parse_date ."}
- edit: {"command": "view", "path": P} shows a file with line numbers; {"command": "create", "path": P, \
"file_text": T} makes a new file; {"command": "str_replace", "path": P, "old_str": A, "new_str": B} \
replaces the one exact occurrence of A in P with B.
- submit: {} when you are done; your changes (git diff) are then tested. You have at most {max_turns} turns."""
_SUMMARY = re.compile(r"^=*\s*((?:\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)(?:, )?)+) in [\d.]+s", re.M)


def pytest_counts(output: str) -> dict[str, int] | None:
    """{"passed": p, "failed": f} from the last pytest summary line of `output`, or None."""
    found = _SUMMARY.findall(output)
    if not found:
        return None
    counts = {"passed": 0, "failed": 0}
    for n, word in re.findall(r"(\d+) (\w+)", found[-1]):
        if word == "passed":
            counts["passed"] += int(n)
        elif word in ("failed", "error", "errors"):
            counts["failed"] += int(n)
    return counts


class SWEEnv(AgentEnv):
    """Repository repair episodes; see the module docstring."""

    fork_shared = ("_records",)
    fork_held = ("sb",)  # a fork runs on in a fork of the episode's container (files, cwd, exports)

    def __init__(
        self,
        instances: str | None = None,
        max_turns: int = 20,
        sandbox: str = "docker",
        command_timeout: float = 30.0,
        test_cpu_s: float = 120.0,
        test_wall_s: float = 600.0,
        max_obs_chars: int = 16_000,
        memory_mb: int = 1024,
        cpus: float = 1.0,
        pool_size: int = 1,
        synth_seed: int = synth.DEFAULT_SEED,
        synth_per_function: int = synth.DEFAULT_PER_FUNCTION,
    ):
        super().__init__(max_turns=max_turns)
        if sandbox != "docker":
            raise ValueError(f"the SWE env runs in Docker images (sandbox=docker), not {sandbox!r}")
        if instances == "synth":  # bugs synthesized in the bundled libraries (cached after the first run)
            records = synth.bundled_records(int(synth_seed), int(synth_per_function))
        else:
            records = load_instances(instances) if instances else list(bundled.instances())
        self._records: dict[str, dict[str, Any]] = {str(r["instance_id"]): r for r in records}
        self.command_timeout = float(command_timeout)
        self.test_cpu_s, self.test_wall_s = float(test_cpu_s), float(test_wall_s)
        self.max_obs_chars = int(max_obs_chars)
        self.limits = Limits(memory_mb=int(memory_mb), pids=512, cpus=float(cpus), disk_mb=4096)
        self.pool_size = int(pool_size)
        self.sb = None
        self.record: dict[str, Any] = {}
        self.image = ""
        self._last_tests: dict[str, int] | None = None

    # ---- tasks ---------------------------------------------------------------------------
    def task_ids(self) -> list[str]:
        return list(self._records)

    def load_task(self, task_id: str) -> Task:
        try:
            record = self._records[task_id]
        except KeyError:
            raise KeyError(f"unknown SWE instance {task_id!r} (ids look like {next(iter(self._records))!r})") from None
        oracle: list[str] = []
        if record.get("patch"):
            try:
                oracle = [render_tool_call(tool, args) for tool, args in oracle_workflow(record)]
            except ValueError:
                oracle = []  # a patch the edit tool cannot express (binary, deleted file)
        meta = {k: record.get(k) for k in ("repo", "base_commit", "version", "environment_setup_commit")}
        return Task(task_id=task_id, prompt=str(record["problem_statement"]).strip(), oracle=oracle,
                    answer=record.get("patch"), meta=meta)

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT.replace("{max_turns}", str(self.max_turns))

    def tools(self) -> list[dict[str, Any]]:
        return [
            function_schema("bash", "Run one shell command in /testbed and return its output.",
                            {"command": {"type": "string", "description": "The command."}}, ["command"]),
            function_schema("edit", "View a file, create a file, or replace one unique string in a file.", {
                "command": {"type": "string", "enum": ["view", "create", "str_replace"]},
                "path": {"type": "string", "description": "File path, relative to /testbed or absolute."},
                "file_text": {"type": "string", "description": "create: the new file's content."},
                "old_str": {"type": "string", "description": "str_replace: the exact text to replace (must occur once)."},
                "new_str": {"type": "string", "description": "str_replace: the replacement."},
            }, ["command", "path"]),
            function_schema("submit", "Finish: your changes are tested.", {}, []),
        ]

    # ---- episode -------------------------------------------------------------------------
    def _open(self) -> Any:
        return open_sandbox("docker", self.image, self.limits, workdir=grading.WORKDIR,
                            user=sandbox_user(self.record), pool_size=self.pool_size)

    def _start(self, task: Task) -> NextState | None:
        self.record = self._records[task.task_id]
        self._last_tests = None
        try:
            self.image = resolve_image(self.record)
        except InstanceError as e:
            raise SandboxError(str(e)) from e
        self.sb = self._open()
        try:
            grading.checkout_base(self.sb, str(self.record["base_commit"]))
        except RuntimeError as e:
            self._finish()
            raise SandboxError(str(e)) from e
        return None

    def _finish(self) -> None:
        if self.sb is not None:
            self.sb.close()
            self.sb = None

    def _act(self, action: str) -> StepResult:
        parsed = parse_action(action)
        if parsed.errors:
            return self._invalid("; ".join(parsed.errors))
        if len(parsed.calls) != 1:
            return self._invalid(f"{'no' if not parsed.calls else len(parsed.calls)} tool calls; make exactly one "
                                 "(bash, edit or submit)")
        call = parsed.calls[0]
        try:
            if call.name == "bash":
                cmd = call.arguments.get("command")
                if not isinstance(cmd, str) or not cmd.strip():
                    return self._invalid('bash needs a non-empty string argument "command"')
                return self._bash(cmd)
            if call.name == "edit":
                return self._edit(call.arguments)
            if call.name == "submit":
                return self._submit()
        except SandboxLimitError as e:  # the episode ends; _finish closes the sandbox
            return self._stopped(str(e), "shell")
        except SandboxError as e:
            content = f"Error: the sandbox failed ({e}). This is not your fault."
            return StepResult(NextState("tool", content, "shell", {"error": f"sandbox: {e}"}), Status.INFRA_ERROR)
        return self._invalid(f"unknown tool {call.name!r}; the tools are bash, edit and submit")

    def _invalid(self, error: str) -> StepResult:
        content = f'Error: {error}. Call one tool as <tool_call>{{"name": "bash", "arguments": {{"command": "ls"}}}}</tool_call>.'
        return StepResult(NextState("tool", content, "shell", {"error": error, "verdict": -1}), Status.INVALID_ACTION)

    def _bash(self, cmd: str) -> StepResult:
        r: ExecResult = self.sb.exec(cmd, timeout=self.command_timeout, max_output=self.max_obs_chars, workdir=None)
        out = r.stdout + (("\n" if r.stdout and not r.stdout.endswith("\n") else "") + r.stderr if r.stderr else "")
        tests = pytest_counts(out)
        if r.timed_out:
            verdict, note = -1, f"[timed out after {self.command_timeout:.0f} s; the command was killed]"
        elif tests is not None:
            verdict, note = self._tests_verdict(tests), f"[exit code {r.exit_code}]"
        else:
            verdict, note = (0 if r.exit_code == 0 else -1), f"[exit code {r.exit_code}]"
        content = cap_text((out.rstrip("\n") + "\n" if out.strip() else "(no output)\n") + note, self.max_obs_chars)
        data = {"tool": "bash", "command": cmd, "exit_code": r.exit_code, "timed_out": r.timed_out,
                "truncated": r.truncated, "tests": tests, "verdict": verdict}
        status = Status.ENV_ERROR if r.limit == "timeout" else Status.OK
        return StepResult(NextState("tool", content, "shell", data), status)

    def _tests_verdict(self, tests: dict[str, int]) -> int:
        prev, self._last_tests = self._last_tests, tests
        if prev is None:
            return 1 if tests["failed"] == 0 and tests["passed"] > 0 else 0
        if tests["passed"] < prev["passed"] or tests["failed"] > prev["failed"]:
            return -1
        if tests["passed"] > prev["passed"] or tests["failed"] < prev["failed"]:
            return 1
        return 0

    def _edit(self, args: dict[str, Any]) -> StepResult:
        data: dict[str, Any] = {"tool": "edit", "command": args.get("command"), "path": args.get("path")}
        try:
            content = run_edit(self.sb, args, grading.WORKDIR)
        except EditError as e:
            data.update(error=str(e), verdict=-1, exit_code=1)
            return StepResult(NextState("tool", f"Error: {e}", "shell", data), Status.ENV_ERROR)
        data.update(verdict=0, exit_code=0)
        return StepResult(NextState("tool", cap_text(content, self.max_obs_chars), "shell", data), Status.OK)

    def _submit(self) -> StepResult:
        base = str(self.record["base_commit"])
        path = f"{grading.SCRATCH}/submit.patch"
        r = self.sb.exec(f"mkdir -p {grading.SCRATCH} && git add -A && git diff --cached {base} > {path}",
                         timeout=60, workdir=grading.WORKDIR)
        if not r.ok:
            content = f"Error: could not collect your changes with git: {(r.stdout + r.stderr).strip()[-500:]}"
            return StepResult(NextState("tool", content, "shell", {"error": "git diff failed", "verdict": -1}),
                              Status.ENV_ERROR)
        patch = self.sb.read_file(path).decode("utf-8", errors="replace")
        self._finish()  # the agent's sandbox is done; grading gets a fresh one
        sb = self._open()
        try:
            result = grading.grade(sb, self.record, patch, self.image, cpu_s=self.test_cpu_s,
                                   wall_s=self.test_wall_s)
        except RuntimeError as e:  # the base commit could not be checked out: the image is wrong
            raise SandboxError(str(e)) from e
        finally:
            sb.close()
        verdict = 1 if result.resolved else -1
        data = {"resolved": result.resolved, "patch_applied": result.patch_applied, "timed_out": result.timed_out,
                "tests_status": result.report.get("tests_status"), "patch": patch, "verdict": verdict,
                "reverted": result.reverted}
        content = cap_text(result.summary(), self.max_obs_chars)
        status = Status.ENV_ERROR if result.timed_out else Status.OK
        return StepResult(NextState("tool", content, "tests", data), status, done=True, outcome=float(verdict))

    # ---- random actions and cleanup ----------------------------------------------------
    def random_action(self, rng: np.random.Generator) -> str:
        """Random but plausible calls: reading, failing commands, bad edits, malformed calls."""
        kind = int(rng.integers(8))
        if kind <= 2:
            cmd = ["ls", "git status --short", "cat README* 2>/dev/null | head", "false", "python3 -c 'print(1/0)'",
                   "python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -3"][int(rng.integers(6))]
            return render_tool_call("bash", {"command": cmd})
        if kind == 3:
            return render_tool_call("edit", {"command": "view", "path": ["missing.py", "tests", ".gitignore"][int(rng.integers(3))]})
        if kind == 4:
            return render_tool_call("edit", {"command": "str_replace", "path": ".gitignore", "old_str": "zzz-not-there", "new_str": "x"})
        if kind == 5:
            return render_tool_call("edit", {"command": "create", "path": f"notes_{int(rng.integers(1000))}.txt", "file_text": "hi\n"})
        if kind == 6:
            return '<tool_call>{"name": "bash", "arguments": {"command": "ls"</tool_call>'
        return ["I will look at the code first.", render_tool_call("grep", {"pattern": "x"})][int(rng.integers(2))]

    def close(self) -> None:
        self._finish()
        super().close()
