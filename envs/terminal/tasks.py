"""Terminal tasks in the Harbor / terminal-bench folder layout.

A task is a folder holding:
  instruction.md          what the agent is asked to do (the prompt)
  environment/Dockerfile  optional: a layer built locally with no network (`ARG BASE` /
                          `FROM ${BASE}`, BASE is the project's base image tag)
  environment/setup.sh    optional: run in the sandbox's work dir before the episode (fast: no
                          image build); the rest of environment/ sits next to it while it runs
  tests/test.sh           the verifier: writes a reward in [0, 1] to /logs/verifier/reward.txt
  solution/solve.sh       the oracle
  task.toml               optional: [agent] timeout_sec, [verifier] timeout_sec (Harbor's keys)
A folder of such folders is a suite (`load_suite`); ours is envs/terminal/tasks/.
"""
from __future__ import annotations

import tomllib
from pathlib import Path

from envs.base import Task
from envs.tool_calls import render_tool_call

BUNDLED = Path(__file__).resolve().parent / "tasks"
DEFAULT_VERIFIER_TIMEOUT_S = 60.0
DEFAULT_ORACLE_TIMEOUT_S = 120.0


def oracle_actions(solve_sh: str, timeout: float) -> list[str]:
    """The oracle: one bash call running the solution as its own script, then submit. A here
    document runs it in a child bash, so its `set -e` or `exit` cannot end the agent's shell."""
    command = f"bash <<'__OPENCLAW_SOLVE__'\n{solve_sh.rstrip()}\n__OPENCLAW_SOLVE__"
    return [render_tool_call("bash", {"command": command, "timeout": timeout}), render_tool_call("submit", {})]


def load_task(folder: str | Path) -> Task:
    """One task folder -> Task (meta: dir, dockerfile, setup, timeouts). Raises ValueError when the
    folder lacks instruction.md or tests/test.sh."""
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
    verifier_timeout = float(conf.get("verifier", {}).get("timeout_sec", DEFAULT_VERIFIER_TIMEOUT_S))
    oracle_timeout = float(conf.get("agent", {}).get("timeout_sec", DEFAULT_ORACLE_TIMEOUT_S))
    solve = d / "solution" / "solve.sh"
    env_dir = d / "environment"
    return Task(
        task_id=d.name,
        prompt=(d / "instruction.md").read_text().strip(),
        oracle=oracle_actions(solve.read_text(), oracle_timeout) if solve.is_file() else [],
        meta={
            "dir": str(d),
            "dockerfile": (env_dir / "Dockerfile").is_file(),
            "setup": (env_dir / "setup.sh").is_file(),
            "verifier_timeout_s": verifier_timeout,
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
