"""Build a bundled repository's git history: one commit of the finished library, then one
commit per bug on top of it (the bug put in, its tests taken out): that is the bug's
base_commit, and `git diff base_commit initial` splits into its gold patch and test patch.

Commit ids depend only on content, author, date and message, all fixed here, so the host
(which writes the instance records) and `docker build` (which runs this file with the image's
python3 and git) get the same ids. Standard library only, for that reason.

    python3 history.py SRC_DIR BUGS_JSON DEST_DIR     # prints {bug id: base commit} as JSON
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

_ENV = {
    "GIT_AUTHOR_NAME": "OpenClaw", "GIT_AUTHOR_EMAIL": "swe@openclaw.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "OpenClaw", "GIT_COMMITTER_EMAIL": "swe@openclaw.invalid",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+0000",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
}
INITIAL_BRANCH = "main"


def git(repo: str, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", repo, "-c", "commit.gpgsign=false", "-c", "core.autocrlf=false", *args],
        capture_output=True, text=True, env={**os.environ, **_ENV}, timeout=60,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip()}")
    return proc.stdout


def build(src: str, bugs: list[dict], dest: str) -> dict[str, str]:
    """Create the repository in `dest` (which must not exist); returns {bug id: base commit}
    plus {"initial": the finished library's commit}. The work tree is left at `initial`."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
    git(dest, "init", "-q", "-b", INITIAL_BRANCH)
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "Initial version")
    shas = {"initial": git(dest, "rev-parse", "HEAD").strip()}
    for bug in bugs:
        bid = str(bug["id"])
        git(dest, "checkout", "-q", "-b", f"base-{bid}", shas["initial"])
        path = os.path.join(dest, bug["file"])
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if text.count(bug["fixed"]) != 1:
            raise ValueError(f"bug {bid}: the fixed code occurs {text.count(bug['fixed'])} times in {bug['file']} (need 1)")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(bug["fixed"], bug["buggy"]))
        git(dest, "rm", "-q", "--", *bug["tests"])
        git(dest, "commit", "-q", "-a", "-m", f"State before issue {bid}")
        shas[bid] = git(dest, "rev-parse", "HEAD").strip()
    git(dest, "checkout", "-q", INITIAL_BRANCH)
    return shas


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    with open(sys.argv[2], encoding="utf-8") as f:
        print(json.dumps(build(sys.argv[1], json.load(f), sys.argv[3])))
