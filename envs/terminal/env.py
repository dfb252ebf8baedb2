"""TerminalEnv (`openclaw/Terminal-v0`): shell tasks in a sandbox, graded by the task's tests.

The agent acts with one tool call per turn:
  bash(command, timeout?)  runs in the episode's persistent shell (cd and export persist); the
                           next state (role "tool", kind "shell") is stdout, stderr, the exit code
                           and the working directory; data = {exit_code, stdout, stderr, cwd,
                           timed_out, truncated, verdict}.
  submit()                 ends the episode: every process of the agent is killed, then the
                           task's tests/test.sh runs in the sandbox out of the agent's reach
                           (envs/sandbox/verifier.py: copied in only now to a root-owned /tests,
                           run as root in a fresh process with a fixed environment) and writes a
                           reward acc in [0, 1] to /logs/verifier/reward.txt (Harbor's
                           convention); the outcome is 2*acc - 1 (kind "tests"). Tests that look
                           at processes read /logs/agent/processes.json (the agent's processes
                           at submit: pid, state, cmdline), and run as root with HOME=/logs/home.
                           data.changed_outside lists what the agent changed outside its
                           writable areas; a change under a system path (/usr, /etc, ...) is
                           data.tampered: the outcome is then -1 whatever the tests said.
At the turn limit (default 10) the last action (whatever its status) is followed by the tests
too, so every episode not cut by infrastructure or the deadline, or ended by the disk cap,
gets the verifier's outcome.

Statuses:
  invalid_action  no tool call, a malformed one, an unknown tool, wrong or missing arguments, an
                  empty command or one over `max_command_chars` (nothing runs).
  env_error       the command ran but the tool's own limit stopped it: killed at its timeout
                  (data.timed_out) or its output flood killed (data.truncated, exit_code None).
                  The command's own doing, so it stays in training, but it did not finish.
                  (Output merely cut to head+tail with the command finished is "ok".) A command
                  that wrote past the sandbox's disk cap stopped the sandbox (Docker): env_error,
                  the episode ends with outcome -1 and no tests.
  infra_error     the sandbox failed (container died, daemon error, setup or image build
                  failed): not the agent's fault; the episode ends without an outcome.
  timeout         the episode deadline (`episode_timeout_s`, or task.toml's shorter [agent] timeout_sec,
                  counted from when the sandbox is ready) passed before this action.

Rules verdict (next_state.data["verdict"], read by the project's rules judge):
  -1  the action failed: invalid action, a command with a non-zero exit code, killed at its
      timeout or for flooding output;
  +1  a command that exited 0;
  at submit / the turn limit: +1 if acc == 1, -1 if acc == 0, 0 for partial credit.
Progress on the checked outputs is not scored per step: the tests are hidden from the agent
(copied in only at the end) and running them every turn would cost a verifier run per step.

Tasks: `tasks_dir` (a folder of task folders; default the 46 bundled ones), or `families` (names
from envs/terminal/families, or "all"): the first `tasks_per_family` generated tasks of each for
generator `seed`.

Backends: `sandbox="docker"` (default; tasks with environment/Dockerfile need it: the image is
built once with no network and cached by content hash) or "bwrap" (tasks with setup.sh only).
On docker the agent and the verifier run as the task image's USER (Harbor's default: root) in
its WORKDIR; a task with no environment/ runs as root in /app (images/harbor, Harbor's default);
the bundled tasks' image names the non-root `agent`. bwrap has no images: its agent is
an unprivileged uid of its own in /work, whatever the task.
Harbor's task.toml (tasks.py) sets per task: the episode deadline (the smaller of it and
`episode_timeout_s`), the verifier's timeout, the image build's timeout, and the sandbox's
cpus, memory and disk cap in place of this env's. A Dockerfile FROM an image this machine lacks
stops the env at construction with one line, unless `base_image` names a substitute (`base`:
the project's Debian image, which has bash and python3; or any local tag): nothing is pulled.
"""
from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from envs.base import AgentEnv, NextState, Status, StepResult, Task, cap_text
from envs.sandbox import Limits, Sandbox, SandboxError, SandboxLimitError, open_sandbox
from envs.sandbox.verifier import Verification
from envs.terminal.families import check_families, suite_dir
from envs.terminal.tasks import BUNDLED, load_suite
from envs.tool_calls import ParsedAction, ToolCall, function_schema, parse_action, render_tool_call

SYSTEM_PROMPT = f"""You are working in a Linux terminal (bash, no network) to complete a task. \
Use one tool call per turn. Run shell commands with the `bash` tool:
{render_tool_call("bash", {"command": "ls -la"})}
The shell persists between calls (cd and exported variables stay). A command may take an optional \
"timeout" in seconds. When the task is done, call {render_tool_call("submit", {})} and the task's \
tests will check the result."""

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # binary bytes that are not layout


def _clean(text: str) -> str:
    """Text safe to show a model: control bytes (binary output) become U+FFFD."""
    return _CONTROL.sub("\ufffd", text)


def _verdict(acc: float) -> int:
    return 1 if acc >= 1.0 else -1 if acc <= 0.0 else 0


class TerminalEnv(AgentEnv):
    """Shell episodes on Harbor-layout task folders; see the module docstring."""

    fork_shared = ("_tasks", "_ids", "_images")
    fork_held = ("_sb",)  # a fork runs on in a fork of the episode's sandbox (files, cwd, exports)

    def __init__(
        self,
        tasks_dir: str | None = None,
        families: str | list[str] | None = None,
        tasks_per_family: int = 50,
        seed: int = 0,
        sandbox: str = "docker",
        max_turns: int = 10,
        command_timeout: float = 30.0,
        max_command_timeout: float = 300.0,
        episode_timeout_s: float = 1800.0,
        max_output: int = 16_384,
        max_obs_chars: int = 16_000,
        max_command_chars: int = 100_000,
        pool_size: int = 4,
        memory_mb: int = 1024,
        base_image: str | None = None,
    ):
        super().__init__(max_turns=max_turns)
        if sandbox not in ("docker", "bwrap"):
            raise ValueError(f"sandbox must be 'docker' or 'bwrap', got {sandbox!r}")
        self.backend = sandbox
        if families is not None and tasks_dir:
            raise ValueError("families generates the task folders (envs/terminal/families); it does not apply with tasks_dir=")
        if families is not None:
            tasks_dir = str(suite_dir(check_families(families), int(tasks_per_family), int(seed)))
        self._tasks = load_suite(tasks_dir or BUNDLED)
        # bwrap has no images: tasks that need a Dockerfile are left out of its task list.
        self._ids = [t for t, task in self._tasks.items() if sandbox == "docker" or not task.meta["dockerfile"]]
        self.command_timeout = float(command_timeout)
        self.max_command_timeout = float(max_command_timeout)
        self.episode_timeout_s = float(episode_timeout_s)
        self.max_output = int(max_output)
        self.max_obs_chars = int(max_obs_chars)
        self.max_command_chars = int(max_command_chars)
        self.pool_size = int(pool_size)
        self.limits = Limits(memory_mb=int(memory_mb), pids=256, cpus=1.0, disk_mb=2048)
        self.base_image = base_image
        if sandbox == "docker":
            self._check_from_images()
        self._images: dict[str, str] = {}  # task dir ("" for the default image) -> image tag
        self._sb: Sandbox | None = None
        self._broken: str | None = None  # why this episode's sandbox could not be set up
        self._workdir = "/"
        self._deadline = 0.0
        self._episode_s = self.episode_timeout_s  # this episode's deadline (task.toml may shorten it)
        self.sandbox_s = 0.0  # time spent waiting on the sandbox (benchmarks read it)

    def _check_from_images(self) -> None:
        """One line for the first task whose Dockerfile starts FROM an image this machine lacks
        (with no substitute); nothing is pulled. Tasks on the project's base ask no engine."""
        from envs.sandbox import images  # needs the docker package: imported only for docker

        if self.base_image is not None:
            return
        for task in self._tasks.values():
            dockerfile = Path(task.meta["dir"]) / "environment" / "Dockerfile"
            if not task.meta["dockerfile"]:
                continue
            for image in images.from_images(dockerfile.read_text()):
                try:
                    found = images.image_id(image)
                except images.ImageError as e:  # an engine error, or a name it refuses
                    raise ValueError(f"{dockerfile}: FROM {image}: {e}") from None
                if found is None:
                    raise ValueError(images.missing_line(image, dockerfile)
                                     + ", or build on a substitute: env.base_image=base (the project's Debian image) or a local tag")

    # ---- AgentEnv hooks ----------------------------------------------------------------
    def task_ids(self) -> list[str]:
        return list(self._ids)

    def load_task(self, task_id: str) -> Task:
        if task_id not in self._tasks:
            raise KeyError(f"unknown terminal task {task_id!r}; known: {', '.join(self._ids[:5])}, ...")
        if task_id not in self._ids:
            raise ValueError(f"task {task_id!r} has an environment/Dockerfile: it needs sandbox='docker'")
        return self._tasks[task_id]

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def tools(self) -> list[dict[str, Any]]:
        return [
            function_schema(
                "bash", "Run a bash command in the task's terminal and return its output, exit code and working directory.",
                {"command": {"type": "string", "description": "The command line (any bash, several lines allowed)."},
                 "timeout": {"type": "number", "description": f"Seconds before the command is killed (default {self.command_timeout:g}, at most {self.max_command_timeout:g})."}},
                ["command"],
            ),
            function_schema("submit", "Finish the task: its tests check the result.", {}, []),
        ]

    def _start(self, task: Task) -> NextState | None:
        self._broken = None
        self._episode_s = min(self.episode_timeout_s, task.meta["agent_timeout_s"] or self.episode_timeout_s)
        t0 = time.monotonic()
        try:
            self._sb = self._open(task)
            self._workdir = self._sb.exec("builtin pwd", timeout=10.0).stdout.strip() or "/"
            if task.meta["setup"]:
                self._setup(task)
        except (SandboxError, RuntimeError, OSError) as e:  # ImageError is a RuntimeError
            self._broken = f"{type(e).__name__}: {e}"
        finally:
            self.sandbox_s += time.monotonic() - t0
        self._deadline = time.monotonic() + self._episode_s  # the agent's time starts once its sandbox is ready
        return None

    def _open(self, task: Task) -> Sandbox:
        limits = dataclasses.replace(self.limits, **task.meta["limits"])
        if self.backend == "bwrap":
            return open_sandbox("bwrap", None, limits)
        from envs.sandbox import images  # needs the docker package: imported only for docker

        # the task's own image; none and no environment/ at all: Harbor's default (root in /app);
        # environment/ without a Dockerfile (the bundled tasks): the non-root sandbox image
        recipe = None if task.meta["dockerfile"] else ("sandbox" if task.meta["environment"] else "harbor")
        key = recipe or task.meta["dir"]
        if key not in self._images:  # looked up (or built) once per env, not per episode
            build = {"timeout": task.meta["build_timeout_s"]} if task.meta["build_timeout_s"] else {}
            self._images[key] = (images.ensure_image(recipe) if recipe else
                                 images.build_image(Path(key) / "environment", name=f"terminal-{task.task_id.lower()}",
                                                    substitute=self.base_image, **build))
        # user None: the image's USER (root when it names none), as Harbor runs its tasks
        return open_sandbox("docker", self._images[key], limits, pool_size=self.pool_size, verifier=True, user=None)

    def _setup(self, task: Task) -> None:
        assert self._sb is not None
        stage = "/tmp/.task-env"
        self._sb.copy_in(str(Path(task.meta["dir"]) / "environment"), stage)
        r = self._sb.exec(f"(bash {stage}/setup.sh) </dev/null; rc=$?; rm -rf {stage}; (exit $rc)", timeout=120.0, max_output=8192)
        if not r.ok:
            raise SandboxError(f"setup.sh of {task.task_id} failed (exit {r.exit_code}): {cap_text(r.stderr + r.stdout, 2000)}")

    def _act(self, action: str) -> StepResult:
        if self._broken is not None:
            return self._infra(f"the task's sandbox could not be set up ({self._broken})")
        left = self._deadline - time.monotonic()
        if left <= 0:
            return StepResult(NextState("tool", f"Episode deadline of {self._episode_s:g}s passed.", "shell",
                                        {"error": "episode deadline"}), Status.TIMEOUT)
        call, error = self._one_call(parse_action(action))
        if call is not None and call.name == "submit":
            return self._submit()
        if call is not None:
            command, timeout, error = self._bash_args(call.arguments)
        result = self._invalid(error) if error is not None else self._run(command, min(timeout, max(left, 1.0)))
        if not result.status.is_infra and self.turn + 1 >= self.max_turns:
            return self._submit(last=result, why="turn limit reached")
        return result

    # ---- actions -----------------------------------------------------------------------
    def _one_call(self, parsed: ParsedAction) -> tuple[ToolCall | None, str | None]:
        if parsed.errors:
            return None, "; ".join(parsed.errors)
        if not parsed.calls:
            return None, "no tool call found; call the bash tool to run a command, or submit when done"
        if len(parsed.calls) > 1:
            return None, f"{len(parsed.calls)} tool calls in one turn; make exactly one per turn"
        call = parsed.calls[0]
        if call.name not in ("bash", "submit"):
            return None, f"unknown tool {call.name!r}; the tools are 'bash' and 'submit'"
        return call, None

    def _bash_args(self, args: dict[str, Any]) -> tuple[str, float, str | None]:
        unknown = sorted(set(args) - {"command", "timeout"})
        if unknown:
            return "", 0.0, f"bash takes 'command' and optional 'timeout'; unexpected argument(s): {', '.join(unknown)}"
        command = args.get("command")
        if not isinstance(command, str):
            return "", 0.0, "bash needs a string argument 'command'"
        if not command.strip():
            return "", 0.0, "the command is empty"
        if len(command) > self.max_command_chars:
            return "", 0.0, f"the command is {len(command)} characters; the limit is {self.max_command_chars}"
        timeout = args.get("timeout", self.command_timeout)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            return "", 0.0, f"'timeout' must be a positive number of seconds, got {timeout!r}"
        return command, min(float(timeout), self.max_command_timeout), None

    def _exec(self, command: str, timeout: float, max_output: int | None = None):
        assert self._sb is not None
        t0 = time.monotonic()
        try:
            return self._sb.exec(command, timeout=timeout, max_output=max_output or self.max_output)
        finally:
            self.sandbox_s += time.monotonic() - t0

    def _run(self, command: str, timeout: float) -> StepResult:
        try:
            r = self._exec(command, timeout)
            p = self._exec("builtin pwd", 10.0)  # restarts the shell if the command killed it
        except SandboxLimitError as e:  # the episode ends; _finish closes the sandbox
            return self._stopped(str(e), "shell")
        except SandboxError as e:
            return self._infra(f"the sandbox failed: {e}")
        cwd = p.stdout.strip()
        restarted = r.shell_restarted or p.shell_restarted
        stdout, stderr = _clean(r.stdout), _clean(r.stderr)
        killed = r.timed_out or (r.truncated and r.exit_code is None)
        parts = [stdout.rstrip("\n")] if stdout else []
        if stderr.strip():
            parts.append("stderr:\n" + stderr.rstrip("\n"))
        if r.timed_out:
            tail = f"[killed: the command ran past its {timeout:g}s timeout; cwd {cwd}]"
        elif killed:
            tail = f"[killed: the command printed over the output limit; cwd {cwd}]"
        else:
            tail = f"[exit code {r.exit_code}; cwd {cwd}]"
        if r.truncated and not killed:
            tail = tail[:-1] + "; output cut in the middle]"
        if restarted:
            tail += "\n[the shell was killed or had exited, and was restarted: cd and exports were reset]"
        parts.append(tail)
        data = {
            "exit_code": r.exit_code, "stdout": stdout, "stderr": stderr, "cwd": cwd,
            "timed_out": r.timed_out, "truncated": r.truncated, "duration_s": round(r.duration_s, 4), "shell_restarted": restarted,
            "verdict": 1 if r.exit_code == 0 and not killed else -1,
        }
        ns = NextState("tool", cap_text("\n".join(parts), self.max_obs_chars), "shell", data)
        return StepResult(ns, Status.ENV_ERROR if killed else Status.OK)

    def _submit(self, last: StepResult | None = None, why: str = "submitted") -> StepResult:
        """Run the tests and end the episode. `last`: the final turn's own result (turn limit),
        whose status and state come first."""
        assert self.task is not None
        try:
            acc, log, v = self._verify(self.task)
        except SandboxError as e:
            return self._infra(f"the sandbox failed while running the tests: {e}")
        summary = f"[{why}: the task's tests gave reward {acc:g}]"
        if v.tampered:
            summary = f"[{why}: no reward: system files were changed ({', '.join(v.tampered[:5])})]"
        data: dict[str, Any] = dict(last.next_state.data) if last is not None else {}
        data.update({"reward": acc, "tests_passed": acc >= 1.0, "verifier_log": log, "verdict": _verdict(acc), "ended_by": why,
                     "changed_outside": v.changed, "tampered": v.tampered})
        content = summary if last is None else f"{last.next_state.content}\n\n{summary}"
        status = last.status if last is not None else Status.OK
        return StepResult(NextState("tool", content, "tests", data), status, done=True, outcome=2.0 * acc - 1.0)

    def _verify(self, task: Task) -> tuple[float, str, Verification]:
        """Run tests/test.sh out of the agent's reach (envs/sandbox/verifier.py) and read the
        reward (missing or bad -> 0; a change to system paths -> 0 whatever the tests said)."""
        assert self._sb is not None
        tests = Path(task.meta["dir"]) / "tests"
        t0 = time.monotonic()
        try:
            v = self._sb.verify(str(tests), (tests / "test.sh").read_text(), self._workdir, task.meta["verifier_timeout_s"])
        finally:
            self.sandbox_s += time.monotonic() - t0
        log = _clean(v.log) + ("\n[verifier timed out]" if v.timed_out else "")
        got = (v.reward_text or "").strip()
        try:
            acc = float(got.split()[0]) if got else 0.0
        except ValueError:
            return 0.0, log + f"\n[reward file held {got[:100]!r}, not a number]", v
        if v.tampered:
            return 0.0, log + f"\n[tampered: {', '.join(v.tampered)}]", v
        return (min(1.0, max(0.0, acc)) if acc == acc else 0.0), log, v

    def _invalid(self, error: str) -> StepResult:
        hint = 'Call tools as <tool_call>{"name": "bash", "arguments": {"command": "..."}}</tool_call>, or submit when done.'
        return StepResult(NextState("tool", f"Error: {error}. {hint}", "shell", {"error": error, "verdict": -1}),
                          Status.INVALID_ACTION)

    def _infra(self, error: str) -> StepResult:
        self._close_sandbox()
        return StepResult(NextState("tool", f"Error: {error}. This is not your fault.", "shell", {"error": error}),
                          Status.INFRA_ERROR)

    # ---- random and cleanup ------------------------------------------------------------
    def random_action(self, rng: np.random.Generator) -> str:
        """Random but plausible actions: commands that work and fail, broken calls, submits."""
        kind = int(rng.integers(8))
        if kind <= 3:
            cmd = ["ls -la", "pwd", "cat *.txt | head", "false", "cd /nonexistent", "echo hi > out.txt", "wc -l *", "python3 -c 'print(1/0)'"]
            return render_tool_call("bash", {"command": cmd[int(rng.integers(len(cmd)))]})
        if kind == 4:
            return render_tool_call("bash", {"cmd": "ls"})  # wrong argument name
        if kind == 5:
            return '<tool_call>{"name": "bash", "arguments": {"command": "ls"</tool_call>'  # broken JSON
        if kind == 6:
            return render_tool_call("submit", {})
        return ["I will look around first.", "", "<tool_call>"][int(rng.integers(3))]

    def _close_sandbox(self) -> None:
        sb, self._sb = self._sb, None
        if sb is not None:
            try:
                sb.close()
            except SandboxError:
                pass

    def _finish(self) -> None:
        self._close_sandbox()

    def close(self) -> None:
        self._close_sandbox()
        super().close()
