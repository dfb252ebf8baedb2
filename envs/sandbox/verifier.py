"""Running a task's verifier out of the agent's reach (both backends' `Sandbox.verify`).

In order, each backend: (1) kills every process of the agent, after a snapshot of them (pid as
the sandbox sees it, state, argv), so nothing the agent left running can act after submit;
(2) lists what the agent changed outside its writable areas; (3) only then copies the tests in
to /tests and makes /logs/verifier, /logs/home and /logs/agent/processes.json (the snapshot),
fresh and owned by root, where the agent never could write; (4) runs tests/test.sh as root (with
only the capabilities to read and write any file: DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER) in a
new process with a fixed environment (`clean_env`: no inherited variables or functions, system
PATH, no user site-packages, HOME a verifier-owned folder); the script's text is passed as an
argument, so nothing rewrites it while it runs; (5) kills what the verifier left running and only
then reads /logs/verifier/reward.txt.

Tampering is what could steer the verifier's own process tree (`tampered_by`), not any change to
a system path: a task may install a package or edit /etc and still pass. The verifier already
ignores the agent's environment, shell functions, login files and processes (1, 4); what is left
is the file system it runs from: Python start-up hooks (sitecustomize, usercustomize, .pth
files), the loader's preload list, the commands it runs itself (bash, env, timeout, python3...)
and those its test script names, where the agent changed or removed them or put one ahead of
the image's on PATH, and the Python standard library or the C library changed in place.
"""
from __future__ import annotations

import dataclasses
import posixpath
import re
from typing import Callable

TESTS_DIR = "/tests"
LOGS_DIR = "/logs"
REWARD_FILE = "/logs/verifier/reward.txt"
PROCESSES_FILE = "/logs/agent/processes.json"  # the agent's processes when it submitted (tests read it)
VERIFIER_HOME = "/logs/home"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PATH_DIRS = tuple(PATH.split(":"))  # where the verifier finds its commands, in order
PYTHON_HOOKS = ("sitecustomize.py", "usercustomize.py")  # imported by every Python start (so are .pth files)
PRELOAD = "/etc/ld.so.preload"  # loaded into every process
TOOLCHAIN = frozenset({"bash", "sh", "dash", "env", "timeout", "python", "python3", "perl", "ld.so"})  # the verifier's own
CORE_LIBS = ("libc.so", "libc-", "ld-linux", "libpython", "libpthread", "libdl")  # every command links them
CAPS = ("DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER")  # the verifier reads what the agent made private
MAX_LOG = 32_768


@dataclasses.dataclass
class Verification:
    reward_text: str | None  # what the verifier wrote to the reward file (None: no file)
    log: str  # its stdout and stderr (head and tail)
    timed_out: bool
    changed: list[str]  # what the agent changed outside its writable areas ("A /path", "C /path", "D /path")
    tampered: list[str]  # the part of `changed` under a system path
    processes: list[dict]  # the agent's processes at submit, before they were killed


def clean_env() -> dict[str, str]:
    """The verifier's whole environment. git is told to trust the agent's repositories (they
    belong to another user); the rest is what any test needs."""
    return {
        "PATH": PATH, "HOME": VERIFIER_HOME, "USER": "root", "LOGNAME": "root", "SHELL": "/bin/bash",
        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb", "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1", "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*",
    }


def command(script: str, workdir: str, timeout: float) -> list[str]:
    """argv that runs `script` (test.sh's text) from `workdir` with `clean_env` only, killed with
    its whole process group at `timeout`."""
    env = [f"{k}={v}" for k, v in clean_env().items()]
    inner = 'cd -- "$1" || exit 1; exec /bin/bash --noprofile --norc -c "$2" ' + f"{TESTS_DIR}/test.sh"
    return ["/usr/bin/env", "-i", *env, "/usr/bin/timeout", "-s", "KILL", f"{timeout:g}",
            "/bin/bash", "--noprofile", "--norc", "-c", inner, "verifier", workdir, script]


def outside(changes: list[tuple[str, str]], writable: list[str], script: str = "",
            exists: Callable[[str], bool] = lambda path: False) -> tuple[list[str], list[str]]:
    """(changed, tampered) from (kind, path) pairs ("A" added, "C" changed, "D" deleted, "M" a
    mount): changes inside a writable area are left out, and so is a folder marked changed
    because something under it is listed; `tampered` is the part of `changed` that could steer
    the verifier (`tampered_by`). `script`: the test script's text; `exists(path)`: whether the
    sandbox holds `path` now (for a command put ahead of the image's on PATH)."""
    def under(p: str, root: str) -> bool:
        return p == root or p.startswith(root.rstrip("/") + "/")

    paths = [posixpath.normpath(p) for _, p in changes]
    kept = [(k, p) for k, p in zip((k for k, _ in changes), paths) if not any(under(p, w) for w in writable)]
    changed = sorted(f"{k} {p}" for k, p in kept
                     if not (k == "C" and any(q != p and under(q, p) for q in paths)))
    named = set(re.findall(r"[A-Za-z0-9_.+-]+", script)) | TOOLCHAIN
    tampered = [c for c in changed if tampered_by(c[0], c[2:], named, exists)]
    return changed, tampered


def tampered_by(kind: str, path: str, commands: set[str] | frozenset[str],
                exists: Callable[[str], bool]) -> bool:
    """Whether a change of `kind` to `path` could steer a verifier that runs `commands`."""
    folder, name = posixpath.split(path)
    if kind == "M" or name in PYTHON_HOOKS or name.endswith(".pth") or path == PRELOAD:
        return True
    if folder in PATH_DIRS and name in commands:
        if kind in ("C", "D") or name in TOOLCHAIN:
            return True
        later = PATH_DIRS[PATH_DIRS.index(folder) + 1:]
        return any(exists(posixpath.join(d, name)) for d in later)  # ahead of the image's own on PATH
    if kind in ("C", "D"):  # the standard library or the C library changed in place
        stdlib = re.match(r"/usr(/local)?/lib/python3[^/]*/", path) and not re.search(r"/(site|dist)-packages/", path)
        return bool(stdlib) or (name.startswith(CORE_LIBS) and re.match(r"/(usr/)?lib", path) is not None)
    return False


def cap(text: str) -> str:
    if len(text) <= MAX_LOG:
        return text
    half = MAX_LOG // 2
    return f"{text[:half]}\n[... {len(text) - MAX_LOG} characters cut ...]\n{text[-half:]}"


# Run as root in the sandbox (docker) to snapshot, then kill, every process of uid argv[1];
# prints the snapshot as JSON. Three quiet passes 10 ms apart end it (a fork bomb respawns).
SEAL_PY = r"""
import json, os, signal, sys, time
uid, me, seen = int(sys.argv[1]), os.getpid(), {}
def procs():
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != me:
            try:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    yield int(d)
            except OSError:
                pass
for pid in procs():
    try:
        stat = open(f"/proc/{pid}/stat").read()
        argv = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\0")[:-1]
        seen[pid] = {"pid": pid, "state": stat[stat.rfind(")") + 2:].split()[0], "cmdline": argv}
    except OSError:
        pass
quiet, end = 0, time.monotonic() + 10
while quiet < 3 and time.monotonic() < end:
    hit = 0
    for pid in procs():
        try:
            stat = open(f"/proc/{pid}/stat").read()
            if stat[stat.rfind(")") + 2:].split()[0] != "Z":
                os.kill(pid, signal.SIGKILL); hit += 1
        except OSError:
            pass
    quiet = 0 if hit else quiet + 1
    time.sleep(0.01)
print(json.dumps(sorted(seen.values(), key=lambda p: p["pid"])))
"""
