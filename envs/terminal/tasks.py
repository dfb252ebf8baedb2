"""Terminal tasks in the Harbor / terminal-bench folder layout.

A task is a folder holding:
  instruction.md          what the agent is asked to do (the prompt)
  environment/Dockerfile  optional: the task's image, built locally with no network: `ARG BASE` /
                          `FROM ${BASE}` (BASE is the project's base image tag), or FROM any
                          image this machine has (Harbor's own tasks); the agent and the
                          verifier run as its USER (root when it names none) in its WORKDIR
                          (no environment/ at all: Harbor's default, root in /app, on docker;
                          with environment/ but no Dockerfile: the non-root `agent` in its home)
  environment/setup.sh    optional: run in the sandbox's work dir before the episode (fast: no
                          image build); the rest of environment/ sits next to it while it runs
  tests/test.sh           the verifier: writes a reward in [0, 1] to /logs/verifier/reward.txt
  solution/solve.sh       the oracle
  task.toml               optional, Harbor's keys: [agent] timeout_sec (the episode's deadline and
                          the oracle's command timeout), [verifier] timeout_sec, [environment]
                          build_timeout_sec, cpus, memory_mb or memory ("4G"), storage_mb or
                          storage (the sandbox's disk cap); other keys are ignored
A folder of such folders is a suite (`load_suite`); ours is envs/terminal/tasks/.
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

from envs.base import Task
from envs.tool_calls import render_tool_call

BUNDLED = Path(__file__).resolve().parent / "tasks"
DEFAULT_VERIFIER_TIMEOUT_S = 60.0
DEFAULT_ORACLE_TIMEOUT_S = 120.0
_UNITS = {"": 1 / (1 << 20), "b": 1 / (1 << 20), "k": 1 / 1024, "m": 1, "g": 1024, "t": 1 << 20}


def oracle_actions(solve_sh: str, timeout: float | None) -> list[str]:
    """The oracle: one bash call, then submit. A solution that is a single command line (besides
    `#` lines: no `set -e`) is that call itself, the shortest demonstration to learn from (with a
    timeout only when task.toml sets one). Any other is its script's lines in a subshell, so its
    `set -e`, `exit` or `cd` cannot end or move the agent's shell, and a model learns plain shell
    lines from it rather than a wrapper around them (its `#!` line is dropped)."""
    lines = [line for line in solve_sh.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if len(lines) == 1 and lines[0].strip() != "set -e":
        call = {"command": lines[0].strip(), **({"timeout": timeout} if timeout else {})}
    else:
        script = solve_sh.split("\n", 1)[1] if solve_sh.startswith("#!") else solve_sh
        call = {"command": f"(\n{script.strip()}\n)", "timeout": timeout or DEFAULT_ORACLE_TIMEOUT_S}
    return [render_tool_call("bash", call), render_tool_call("submit", {})]


def _megabytes(value: object, where: str) -> int:
    """A size from task.toml ("4G", "512M", "2048Mi", or a number of bytes) in MB."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([bkmgt]?)i?b?\s*", str(value).lower())
    if isinstance(value, bool) or m is None:
        raise ValueError(f"{where} = {value!r} is not a size (e.g. \"4G\" or \"512M\")")
    return max(1, int(float(m.group(1)) * _UNITS[m.group(2)]))


def _positive(conf: dict, table: str, key: str, where: Path) -> float | None:
    value = conf.get(table, {}).get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{where}: [{table}] {key} = {value!r} must be a positive number")
    return float(value)


def _limits(conf: dict, where: Path) -> dict[str, float | int]:
    """The sandbox limits task.toml's [environment] sets (envs.sandbox.Limits' field names)."""
    env = conf.get("environment", {})
    out: dict[str, float | int] = {}
    if (cpus := _positive(conf, "environment", "cpus", where)) is not None:
        out["cpus"] = cpus
    for field, mb_key, size_key in (("memory_mb", "memory_mb", "memory"), ("disk_mb", "storage_mb", "storage")):
        if (mb := _positive(conf, "environment", mb_key, where)) is not None:
            out[field] = int(mb)
        elif env.get(size_key) is not None:
            out[field] = _megabytes(env[size_key], f"{where}: [environment] {size_key}")
    return out


def load_task(folder: str | Path) -> Task:
    """One task folder -> Task (meta: dir, dockerfile, setup, timeouts, limits). Raises
    ValueError when the folder lacks instruction.md or tests/test.sh, or task.toml is bad."""
    d = Path(folder).resolve()
    missing = [p for p in ("instruction.md", "tests/test.sh") if not (d / p).is_file()]
    if missing:
        raise ValueError(f"{d} is not a task folder: missing {', '.join(missing)}")
    conf: dict = {}
    if (d / "task.toml").is_file():
        try:
            conf = tomllib.loads((d / "task.toml").read_text())
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{d / 'task.toml'}: {e}") from e
    toml = d / "task.toml"
    verifier_timeout = _positive(conf, "verifier", "timeout_sec", toml) or DEFAULT_VERIFIER_TIMEOUT_S
    agent_timeout = _positive(conf, "agent", "timeout_sec", toml)
    build_timeout = _positive(conf, "environment", "build_timeout_sec", toml)
    solve = d / "solution" / "solve.sh"
    env_dir = d / "environment"
    return Task(
        task_id=d.name,
        prompt=(d / "instruction.md").read_text().strip(),
        oracle=oracle_actions(solve.read_text(), agent_timeout) if solve.is_file() else [],
        meta={
            "dir": str(d),
            "dockerfile": (env_dir / "Dockerfile").is_file(),
            "environment": env_dir.is_dir(),  # none: Harbor's default image (root in /app)
            "setup": (env_dir / "setup.sh").is_file(),
            "verifier_timeout_s": verifier_timeout,
            "agent_timeout_s": agent_timeout,  # None: the env's episode deadline alone
            "build_timeout_s": build_timeout,  # None: the image module's default
            "limits": _limits(conf, toml),  # what task.toml sets; the env's own limits fill the rest
        },
    )


def load_suite(tasks_dir: str | Path = BUNDLED) -> dict[str, Task]:
    """Every task folder directly under `tasks_dir`, by id (the folder name)."""
    root = Path(tasks_dir)
    if not root.is_dir():
        raise ValueError(f"tasks_dir {root} is not a folder")
    if (root / "instruction.md").is_file():  # a single task folder
        t = load_task(root)
        return {t.task_id: t}
    tasks = {}
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        if (sub / "instruction.md").is_file():
            t = load_task(sub)
            tasks[t.task_id] = t
    if not tasks:
        raise ValueError(f"no task folders (with instruction.md and tests/test.sh) under {root}")
    return tasks
