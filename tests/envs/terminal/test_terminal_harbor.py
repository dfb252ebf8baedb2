"""Harbor tasks unchanged: an image without USER runs the agent and the verifier as root in its
WORKDIR (/app), task.toml's timeouts and limits bind, a FROM image this machine lacks is one
line (or built on a substitute), and the verifier's integrity holds with root inside."""
from __future__ import annotations

import pytest

from envs.sandbox.images import from_images
from envs.terminal.env import TerminalEnv
from envs.terminal.tasks import load_task
from envs.tool_calls import render_tool_call

SUBMIT = render_tool_call("submit", {})
# As Harbor tasks do: the solution writes under /app (root-owned), the tests run from there.
TEST_SH = """#!/bin/bash
if [ "$(cat /app/out/answer.txt)" = solved ] && [ "$(stat -c %u /app/out/answer.txt)" = 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


def bash(command: str, **kw) -> str:
    return render_tool_call("bash", {"command": command, **kw})


def _harbor_task(root, name: str, from_image: str, toml: str = "", solve: str = "mkdir -p /app/out && echo solved > /app/out/answer.txt\n",
                 test_sh: str = TEST_SH):
    d = root / name
    for sub in ("environment", "solution", "tests"):
        (d / sub).mkdir(parents=True)
    (d / "instruction.md").write_text("Write the word solved to /app/out/answer.txt.\n")
    (d / "environment" / "Dockerfile").write_text(f"FROM {from_image}\nWORKDIR /app\n")
    (d / "solution" / "solve.sh").write_text(solve)
    (d / "tests" / "test.sh").write_text(test_sh)
    if toml:
        (d / "task.toml").write_text(toml)
    return d


def _run(env: TerminalEnv, task_id: str, actions: list[str]):
    env.reset(options={"task_id": task_id})
    infos = []
    for a in actions:
        _, reward, term, trunc, info = env.step(a)
        infos.append(info)
        if term or trunc:
            return reward, infos
    raise AssertionError(f"{task_id}: the episode did not end: {infos[-1]['next_state'].content}")


@pytest.fixture(scope="module")
def base_tag():
    from envs.sandbox import images

    return images.ensure_image("base")


# ---- without a sandbox ---------------------------------------------------------------------------
def test_task_toml_is_read(tmp_path):
    d = _harbor_task(tmp_path, "t", "python:3.12-slim", toml=(
        'version = "1.0"\n[metadata]\ndifficulty = "easy"\n[agent]\ntimeout_sec = 90.0\n[verifier]\ntimeout_sec = 30\n'
        '[environment]\nbuild_timeout_sec = 300\ncpus = 2\nmemory = "4G"\nstorage_mb = 10240\nallow_internet = true\n'))
    meta = load_task(d).meta
    assert (meta["agent_timeout_s"], meta["verifier_timeout_s"], meta["build_timeout_s"]) == (90.0, 30.0, 300.0)
    assert meta["limits"] == {"cpus": 2.0, "memory_mb": 4096, "disk_mb": 10240}
    assert '"timeout": 90.0' in load_task(d).oracle[0]  # the oracle's command has the agent's time
    (d / "task.toml").write_text('[environment]\nmemory = "lots"\n')
    with pytest.raises(ValueError, match=r"\[environment\] memory = 'lots' is not a size"):
        load_task(d)
    (d / "task.toml").write_text("[agent]\ntimeout_sec = -1\n")
    with pytest.raises(ValueError, match=r"\[agent\] timeout_sec = -1 must be a positive number"):
        load_task(d)


def test_from_images_of_a_dockerfile():
    text = ("# syntax=docker/dockerfile:1\nARG PY=3.12\nARG BASE\nFROM --platform=linux/amd64 python:${PY}-slim AS build\n"
            "RUN echo a \\\n && echo b\nFROM build\nFROM ${BASE}\nFROM scratch\nFROM ubuntu:24.04\n")
    assert from_images(text) == ["python:3.12-slim", "ubuntu:24.04"]


# ---- on Docker -------------------------------------------------------------------------------------
@pytest.mark.docker
def test_root_task_in_app_oracle_passes_and_nothing_fails(tmp_path, base_tag):
    _harbor_task(tmp_path, "write-app", base_tag)
    env = TerminalEnv(tasks_dir=str(tmp_path), sandbox="docker", pool_size=1)
    try:
        reward, infos = _run(env, "write-app", [bash("id -u; pwd; grep CapEff /proc/self/status"), SUBMIT])
        out = infos[0]["next_state"].data["stdout"].split()
        assert out[:2] == ["0", "/app"] and reward == -1.0  # root in the image's WORKDIR; nothing done fails
        assert int(out[3], 16) == sum(1 << c for c in (0, 1, 3, 4, 5, 6, 7, 10))  # ROOT_CAPS: no DAC_READ_SEARCH
        reward, infos = _run(env, "write-app", env.load_task("write-app").oracle)
        data = infos[-1]["next_state"].data
        assert reward == 1.0 and data["tampered"] == [] and data["changed_outside"] == [], data
        # The holder is pid 1 with no handler: root cannot take the sandbox down, and what it
        # leaves running (even as another uid) is ended before the tests are copied in.
        reward, infos = _run(env, "write-app", [
            bash("kill -TERM 1; kill -KILL 1; kill -KILL -1; true"),
            bash("setpriv --reuid=1000 --regid=1000 --clear-groups nohup sh -c 'until [ -e /tests/test.sh ]; do sleep 0.01; done; "
                 "echo 1 > /logs/verifier/reward.txt' >/dev/null 2>&1 & "
                 "nohup sh -c 'until [ -e /tests/test.sh ]; do sleep 0.01; done; while :; do mkdir -p /app/out; "
                 "echo solved > /app/out/answer.txt; echo 1 > /logs/verifier/reward.txt; sleep 0.01; done' >/dev/null 2>&1 &"),
            SUBMIT])
        assert [i["status"] for i in infos] == ["ok", "ok", "ok"], infos[0]["next_state"].content
        assert reward == -1.0 and infos[-1]["next_state"].data["reward"] == 0.0
        # A reward file the agent left where the verifier's will be is never read.
        reward, infos = _run(env, "write-app", [bash("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt"), SUBMIT])
        assert reward == -1.0
    finally:
        env.close()


@pytest.mark.docker
def test_missing_from_image_is_one_line_or_built_on_a_substitute(tmp_path):
    _harbor_task(tmp_path, "absent-base", "openclaw-test/never-built:0")
    with pytest.raises(ValueError) as e:
        TerminalEnv(tasks_dir=str(tmp_path), sandbox="docker")
    msg = str(e.value)
    assert "\n" not in msg and "FROM openclaw-test/never-built:0" in msg
    assert "docker load" in msg and "env.base_image=base" in msg
    env = TerminalEnv(tasks_dir=str(tmp_path), sandbox="docker", pool_size=1, base_image="base")
    try:
        reward, infos = _run(env, "absent-base", env.load_task("absent-base").oracle)
        assert reward == 1.0, infos[-1]["next_state"].data["verifier_log"]
    finally:
        env.close()


def _setup_task(root, name: str, toml: str, solve: str, test_sh: str):
    d = root / name
    for sub in ("environment", "solution", "tests"):
        (d / sub).mkdir(parents=True)
    (d / "instruction.md").write_text("Write solved to answer.txt.\n")
    (d / "environment" / "setup.sh").write_text("true\n")
    (d / "solution" / "solve.sh").write_text(solve)
    (d / "tests" / "test.sh").write_text(test_sh)
    (d / "task.toml").write_text(toml)


@pytest.mark.parametrize("backend", [pytest.param("docker", marks=pytest.mark.docker),
                                     pytest.param("bwrap", marks=pytest.mark.bwrap)])
def test_task_toml_timeouts_fire_and_limits_bind(tmp_path, backend):
    passes = "grep -qx solved answer.txt && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    _setup_task(tmp_path, "slow-agent", "[agent]\ntimeout_sec = 2\n[environment]\ncpus = 0.5\nmemory = \"300M\"\n",
                "sleep 6; echo solved > answer.txt\n", passes)
    _setup_task(tmp_path, "slow-tests", "[verifier]\ntimeout_sec = 1\n", "echo solved > answer.txt\n", "sleep 6\n" + passes)
    env = TerminalEnv(tasks_dir=str(tmp_path), sandbox=backend, pool_size=1)
    try:
        env.reset(options={"task_id": "slow-agent"})
        if backend == "docker":  # the task's cpus and memory replaced the env's
            from envs.sandbox.engine import client

            host = client().api.inspect_container(env._sb.id)["HostConfig"]
            assert (host["NanoCpus"], host["Memory"]) == (500_000_000, 300 << 20)
        else:
            assert env._sb.limits.memory_mb == 300 and env._sb.limits.cpus == 0.5
        *_, info = env.step(env.load_task("slow-agent").oracle[0])
        assert info["status"] == "env_error" and info["next_state"].data["timed_out"]  # the 2 s deadline cut it
        *_, trunc, info = env.step(bash("echo again"))
        assert trunc and info["status"] == "timeout" and "deadline of 2s" in info["next_state"].content
        reward, infos = _run(env, "slow-tests", env.load_task("slow-tests").oracle)
        data = infos[-1]["next_state"].data
        assert reward == -1.0 and data["reward"] == 0.0 and "[verifier timed out]" in data["verifier_log"]
    finally:
        env.close()


# ---- Harbor's defaults: no environment/ -------------------------------------------------------------
# A task with only instruction.md, tests/ and solution/. Its solution installs a tool the way a
# package would (a command on PATH, a Python module in site-packages, a config file in /etc) and
# writes /app; its tests use all three.
INSTALL = """mkdir -p /app && echo solved > /app/answer.txt
printf '#!/bin/sh\\necho hello\\n' > /usr/local/bin/greet && chmod +x /usr/local/bin/greet
site=$(python3 -c 'import site; print(site.getsitepackages()[0])') && mkdir -p "$site/greetlib" && echo 'WORD = "hello"' > "$site/greetlib/__init__.py"
mkdir -p /etc/greet && echo 'word=hello' > /etc/greet/greet.conf
"""
INSTALL_TEST = """#!/bin/bash
mkdir -p /logs/verifier
if grep -qx solved /app/answer.txt && [ "$(greet)" = hello ] && grep -qx word=hello /etc/greet/greet.conf \\
   && python3 -c 'import greetlib, sys; sys.exit(greetlib.WORD != "hello")'; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
SITE = "$(python3 -c 'import site; print(site.getsitepackages()[0])')"
# Each would give +1 without solving the task if the verifier trusted what the agent can touch.
ROOT_ATTACKS = {
    "planted sitecustomize": (f"echo 'import os; os.makedirs(\"/logs/verifier\", exist_ok=True); "
                              f"open(\"/logs/verifier/reward.txt\", \"w\").write(\"1\"); os._exit(0)' > {SITE}/sitecustomize.py"),
    "planted .pth": (f"echo 'import os; os.makedirs(\"/logs/verifier\", exist_ok=True); "
                     f"open(\"/logs/verifier/reward.txt\", \"w\").write(\"1\"); os._exit(0)' > {SITE}/zz.pth"),
    "shadowed python3": "printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/python3 && chmod +x /usr/local/bin/python3",
    "replaced grep": "printf '#!/bin/sh\\nexit 0\\n' > /usr/bin/grep",
    "PATH and login-file hooks": ("mkdir -p /fake && printf '#!/bin/sh\\nexit 0\\n' > /fake/grep && cp /fake/grep /fake/python3 && "
                                  "chmod +x /fake/* && echo 'PATH=/fake:$PATH' >> /etc/environment && "
                                  "echo 'export PATH=/fake:$PATH' | tee -a /etc/profile /etc/bash.bashrc /root/.bashrc >/dev/null"),
    "background writer": ("nohup sh -c 'until [ -e /tests/test.sh ]; do sleep 0.01; done; while :; do "
                          "echo 1 > /logs/verifier/reward.txt; sleep 0.01; done' >/dev/null 2>&1 &"),
}


def _bare_task(root, name: str, solve: str, test_sh: str):
    d = root / name
    for sub in ("solution", "tests"):
        (d / sub).mkdir(parents=True)
    (d / "instruction.md").write_text("Do it.\n")
    (d / "solution" / "solve.sh").write_text(solve)
    (d / "tests" / "test.sh").write_text(test_sh)
    (d / "tests" / "check.py").write_text("assert open('/app/answer.txt').read().strip() == 'solved'\n")


@pytest.mark.docker
def test_task_without_environment_runs_as_root_in_app_and_may_install(tmp_path):
    _bare_task(tmp_path, "install-tool", INSTALL, INSTALL_TEST)
    attack_test = ("#!/bin/bash\nmkdir -p /logs/verifier\nif grep -qx solved /app/answer.txt && python3 /tests/check.py; "
                   "then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n")
    _bare_task(tmp_path, "attacked", "mkdir -p /app && echo solved > /app/answer.txt\n", attack_test)
    env = TerminalEnv(tasks_dir=str(tmp_path), sandbox="docker", pool_size=1)
    try:
        reward, infos = _run(env, "install-tool", [bash("id -u; pwd"), SUBMIT])
        assert infos[0]["next_state"].data["stdout"].split() == ["0", "/app"] and reward == -1.0
        reward, infos = _run(env, "install-tool", env.load_task("install-tool").oracle)
        data = infos[-1]["next_state"].data
        assert reward == 1.0 and data["tampered"] == [], data  # a system change its tests need is no tampering
        assert "A /usr/local/bin/greet" in data["changed_outside"] and any("/etc/greet" in c for c in data["changed_outside"])
        for name, attack in ROOT_ATTACKS.items():
            reward, infos = _run(env, "attacked", [bash(attack), SUBMIT])
            assert reward == -1.0, (name, infos[-1]["next_state"].data)
            if name in ("planted sitecustomize", "planted .pth", "shadowed python3", "replaced grep"):
                assert infos[-1]["next_state"].data["tampered"], name
        reward, infos = _run(env, "attacked", env.load_task("attacked").oracle)
        assert reward == 1.0, infos[-1]["next_state"].data
    finally:
        env.close()


@pytest.mark.docker
def test_bundled_tasks_keep_their_non_root_user():
    env = TerminalEnv(sandbox="docker", pool_size=1)
    try:
        env.reset(options={"task_id": env.task_ids()[0]})
        _, _, _, _, info = env.step(bash("id -un"))
        assert info["next_state"].data["stdout"].strip() == "agent"
    finally:
        env.close()
