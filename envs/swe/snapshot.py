"""How an SWE image gets its repository: the history up to the base commit and nothing else.

The host writes a `git bundle` of the base commit's history alone (`bundle`); the image's
Dockerfile fetches it into a fresh repository (`unpack_step`). So no later commit, branch, tag,
reflog, stash or unreachable object (the fix above all) is ever in the build context or the
image. Both the bundled instances (bundled.py) and own-repo instances (build.py) use it.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

REF = "refs/openclaw/base"
# Fixed settings, so the same history gives the same bundle bytes (the image tag hashes them).
_GIT = ("git", "-c", "pack.threads=1")


def bundle(repo: str | Path, commit: str, dest: str | Path, timeout: float = 600) -> None:
    """Write to `dest` a git bundle of `commit`'s history in `repo`, under REF.
    Raises RuntimeError with git's first complaint."""
    for args in (("update-ref", REF, commit), ("bundle", "create", "-q", str(dest), REF)):
        proc = subprocess.run([*_GIT, "-C", str(repo), *args], capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
            raise RuntimeError(lines[0] if lines else f"git {args[0]} failed")


def unpack_step(bundle_path: str, workdir: str) -> str:
    """The shell command (for a Dockerfile RUN) that makes `workdir` a fresh repository holding
    only the bundle's history, checked out on branch main at the base commit."""
    return (f"git init -q -b main {workdir} && git -C {workdir} fetch -q {bundle_path} {REF} "
            f"&& git -C {workdir} reset -q --hard FETCH_HEAD && rm -f {workdir}/.git/FETCH_HEAD")
