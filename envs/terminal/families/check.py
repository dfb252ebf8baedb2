"""A generated task's result checks (copied into its tests/ with expected.json; standard library only).

`python3 /tests/check.py /tests/expected.json` runs from the work dir, as root, after the agent's
processes are gone, and exits 0 only when every check holds. The expected values were computed
when the task was made; nothing the agent wrote states them. Outputs must be plain files (a
symlink could point at what only the verifier can read). git runs with hooks, fsmonitor and
signature programs off and reads objects only (a repository's own config could name a program
to run). A script the task asked for is run, as the bundled tasks' tests do, but only after
every other check and after expected.json is deleted (so it cannot print the stored answer), in
a session of its own that is killed when it returns.
"""
import gzip
import json
import os
import signal
import stat
import subprocess
import sys
import tarfile

MAX_BYTES = 1 << 20  # more than any expected output: a bigger file is wrong anyway


def read(path: str) -> bytes:
    assert not os.path.islink(path) and os.path.isfile(path), f"{path} is not a file"
    with open(path, "rb") as f:
        return f.read(MAX_BYTES)


def same_text(got: bytes, want: str, what: str) -> None:
    """Equal up to the final newline (a file written without one still holds the same lines)."""
    assert got.decode(errors="replace").rstrip("\n") == want.rstrip("\n"), f"{what}: {got[:300]!r} != {want[:300]!r}"


def git(repo: str, *args: str) -> str:
    safe = ["core.hooksPath=/dev/null", "core.fsmonitor=false", "log.showSignature=false", "gpg.program=false",
            "gpg.ssh.program=false", "gpg.x509.program=false"]
    cmd = ["git", *(w for kv in safe for w in ("-c", kv)), "-C", repo, *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=20).stdout


def run_alone(argv: list) -> str:
    """The agent's program's stdout; it runs in a new session, and whatever it left behind in that
    session is killed when it returns."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                         text=True, start_new_session=True)
    try:
        return p.communicate(timeout=10)[0]
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def check(c: dict) -> None:
    kind = c["kind"]
    if kind == "text":
        same_text(read(c["path"]), c["content"], c["path"])
    elif kind == "number":
        assert read(c["path"]).decode(errors="replace").strip() == str(c["value"]), f"{c['path']}: not {c['value']}"
    elif kind == "absent":
        assert not os.path.lexists(c["path"]), f"{c['path']} is still there"
    elif kind == "mode":
        assert not os.path.islink(c["path"]), f"{c['path']} is a symlink"
        mode = stat.S_IMODE(os.stat(c["path"]).st_mode)
        assert mode & c["set"] == c["set"] and not mode & c["clear"], f"{c['path']}: mode {mode:o}"
    elif kind == "gzip":
        read(c["path"])
        with gzip.open(c["path"], "rb") as f:
            same_text(f.read(MAX_BYTES), c["content"], c["path"])
    elif kind == "tar":
        read(c["path"])
        with tarfile.open(c["path"], "r:gz") as t:
            files = {m.name.removeprefix("./"): m for m in t.getmembers() if m.isfile()}
            for name, content in c["members"].items():
                assert name in files, f"{c['path']} lacks {name}: {sorted(files)[:10]}"
                same_text(t.extractfile(files[name]).read(MAX_BYTES), content, f"{c['path']}:{name}")
    elif kind == "run":
        path = c["argv"][0]
        assert not os.path.islink(path) and os.access(path, os.X_OK), f"{path} is not an executable file"
        out = run_alone(c["argv"])
        assert out == c["stdout"], f"{' '.join(c['argv'])} printed {out[:300]!r}, not {c['stdout']!r}"
    elif kind == "git_log":
        got = git(c["repo"], "log", "--format=%s", c["ref"]).splitlines()
        assert got == c["messages"], f"{c['repo']} {c['ref']}: commits {got[:10]}"
    elif kind == "git_count":
        got = git(c["repo"], "rev-list", "--count", c["ref"]).strip()
        assert got == str(c["count"]), f"{c['repo']} {c['ref']}: {got} commits"
    elif kind == "git_file":
        names = git(c["repo"], "ls-tree", "-r", "--name-only", c["ref"]).splitlines()
        if c["content"] is None:
            assert c["path"] not in names, f"{c['repo']} {c['ref']} has {c['path']}"
        else:
            assert c["path"] in names, f"{c['repo']} {c['ref']} lacks {c['path']}"
            same_text(git(c["repo"], "cat-file", "blob", f"{c['ref']}:{c['path']}").encode(), c["content"], c["path"])
    elif kind == "git_same":
        got = {git(c["repo"], "rev-parse", "--verify", "-q", f"{ref}^{{commit}}").strip() for ref in c["refs"]}
        assert len(got) == 1, f"{c['repo']}: {c['refs']} are different commits"
    else:
        raise AssertionError(f"unknown check {kind!r}")


def main() -> int:
    with open(sys.argv[1]) as f:
        checks = json.load(f)
    os.unlink(sys.argv[1])  # no program the agent wrote may read the answers
    checks.sort(key=lambda c: c["kind"] == "run")  # the agent's programs run last (stable: the rest keep their order)
    for c in checks:
        try:
            check(c)
        except (AssertionError, OSError, subprocess.SubprocessError, tarfile.TarError, EOFError) as e:
            print(f"FAIL {c['kind']}: {e}")
            return 1
    print(f"ok: {len(checks)} checks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
