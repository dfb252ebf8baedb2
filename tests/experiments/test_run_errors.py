"""A misconfigured run stops before it starts, with one line saying what to do."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.cli import REPO, run_cli, sigterm


def test_the_cli_loads_no_model_library_before_a_run_needs_one():
    """A misconfiguration answers in a second or two, not after torch and transformers load
    (~10 s): the entry point imports them only where a model is built."""
    code = "import sys, experiments.run; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "[]", p.stdout + p.stderr[-2000:]


def test_unknown_env_lists_the_envs(tmp_path):
    p = run_cli("env=nope", "policy=oracle", f"run_dir={tmp_path}/r")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert "unknown env 'nope'" in line and "toolcall" in line and "custom" in line
    assert not (tmp_path / "r").exists()
    p = run_cli("-m", "env=custom,nope", "policy=oracle", f"run_dir={tmp_path}/r")
    assert p.returncode != 0 and "unknown env 'nope'" in p.stderr


def test_docker_sandbox_without_an_engine_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    p = run_cli("env=terminal", "sandbox=docker", "policy=oracle", "wandb.mode=disabled", f"run_dir={tmp_path}/r")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "no Docker engine answers" in p.stderr and "sandbox=bwrap" in p.stderr and "10-docker.sh" in p.stderr


def _bad_files(tmp_path):
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    (tmp_path / "empty").mkdir()
    return tmp_path


BAD_INPUT = {  # case -> (overrides, what the one line names)
    "data missing": (["env=toolcall", "env.data={t}/nope.jsonl"], "nope.jsonl"),
    "data malformed": (["env=toolcall", "env.data={t}/bad.jsonl"], "bad.jsonl"),
    "tasks_dir missing": (["env=terminal", "sandbox=bwrap", "env.tasks_dir={t}/nope"], "nope"),
    "tasks_dir without tasks": (["env=terminal", "sandbox=bwrap", "env.tasks_dir={t}/empty"], "empty"),
    "unknown task family": (["env=terminal", "sandbox=bwrap", "env.families=[sort,nope]"], "unknown terminal task families ['nope']"),
    "instances missing": (["env=swe", "env.instances={t}/nope.jsonl"], "nope.jsonl"),
    "instances malformed": (["env=swe", "env.instances={t}/bad.jsonl"], "bad.jsonl"),
    "steps not a number": (["env=toolcall", "steps=abc"], "steps='abc'"),
    "steps zero": (["env=toolcall", "steps=0"], "steps=0: must be at least 1"),
    "n_envs zero": (["env=toolcall", "n_envs=0"], "n_envs=0"),
    "tasks_per_step negative": (["env=toolcall", "tasks_per_step=-1"], "tasks_per_step=-1"),
    "group_size zero": (["env=toolcall", "group_size=0"], "group_size=0"),
    "unknown env option": (["env=toolcall", "env.bogus=1"], "has no option bogus; it takes: data,"),
}


@pytest.mark.slow  # 12 CLI starts; each imports torch + transformers (~8 s CPU)
@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_gets_one_line(tmp_path, case):
    overrides, names = BAD_INPUT[case]
    t = _bad_files(tmp_path)
    p = run_cli(*(o.format(t=t) for o in overrides), "policy=oracle", "mode=eval", "wandb.mode=disabled",
                f"run_dir={tmp_path}/r")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    (line,) = p.stderr.strip().splitlines()
    # swe needs Docker: without an engine the one line says that instead (also one line)
    assert line.startswith("error: ") and (names in line or "no Docker engine answers" in line), line


FAILING = ["env=custom", "model=tiny", "mode=outcome", "steps=2", "tasks_per_step=4", "group_size=2", "n_envs=2",
           "sampling.max_new_tokens=4", "eval.n_tasks=0", "wandb.mode=disabled"]


def test_a_run_whose_episodes_all_fail_stops_non_zero_naming_the_first_error(tmp_path):
    p = run_cli(*FAILING, "env.entry_point=tests.toy_envs:ResetFailsEnv", f"run_dir={tmp_path}/r")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "8 of 8 rollouts episodes failed" in p.stderr
    # the env's own message and the line of the user's code that raised it
    assert "ValueError: the data file for this env is missing (" in p.stderr and "tests/toy_envs.py:" in p.stderr
    assert len(p.stderr.strip().splitlines()) <= 2
    assert "Traceback" not in p.stdout  # one line per failed episode on the console (the log), no traceback walls
    log = (tmp_path / "r" / "tracebacks.log").read_text()
    assert log.count("Traceback (most recent call last)") == 8 and "_start" in log
    assert "done:" not in p.stdout


def test_a_run_past_its_failed_share_stops_and_one_within_it_goes_on(tmp_path):
    p = run_cli(*FAILING, "env.entry_point=tests.toy_envs:HalfFailEnv", "max_failed_share=0.25", f"run_dir={tmp_path}/a")
    assert p.returncode != 0 and "max_failed_share=0.25" in p.stderr and "RuntimeError: cannot act on n" in p.stderr
    p = run_cli(*FAILING, "env.entry_point=tests.toy_envs:HalfFailEnv", "max_failed_share=0.9", f"run_dir={tmp_path}/b")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "failed)" in p.stdout  # the step line counts the failed episodes


@pytest.mark.slow
def test_sigterm_while_the_model_generates_stops_with_one_line(tmp_path):
    """SIGTERM while the held-out evaluation generates (32 tasks of up to 400 tokens): the
    requests in flight at the run's own HTTP server end without a traceback each (the engine
    closes before the server stops; before, 39 tracebacks here)."""
    args = ["env=toolcall", "env.sandbox=bwrap", "model=tiny", "warm_start=none", "steps=1000", "tasks_per_step=16",
            "group_size=2", "n_envs=32", "sampling.max_new_tokens=400", "eval.n_tasks=32", f"run_dir={tmp_path}/r",
            "progress=false"]
    proc = subprocess.Popen([sys.executable, "-m", "experiments.run", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in proc.stdout:  # "run toolcall-combine -> ..." (signals handled from here): the engine and the evaluation follow
        seen.append(line)
        if line.startswith("run "):
            break
    time.sleep(25)
    (rest, _), took = sigterm(proc, 120)
    assert seen and seen[-1].startswith("run "), "".join(seen)[-2000:]
    assert proc.returncode != 0 and "Traceback" not in rest, rest[-3000:]
    assert rest.strip().splitlines()[-1].startswith("interrupted:"), rest[-2000:]
    assert took < 45, f"took {took:.1f} s to stop"
