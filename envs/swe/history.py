"""Build a bundled repository's git history: one commit of the finished library (`initial`),
and per bug a root commit of the library with the bug put in and its tests taken out: that is
the bug's base_commit, and `git diff base_commit initial` splits into its gold patch and test
patch. A base commit has no parent: the finished library is not in its history, so an image
holding that history alone (snapshot.py) holds no trace of the fix.

Commit ids depend only on content, author, date and message, all fixed here, so the instance
records and the images, made in different processes, name the same commits.
"""
from __future__ import annotations

import os
import shutil
import subprocess

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
        git(dest, "checkout", "-q", "--orphan", f"base-{bid}", shas["initial"])
        path = os.path.join(dest, bug["file"])
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if text.count(bug["fixed"]) != 1:
            raise ValueError(f"bug {bid}: the fixed code occurs {text.count(bug['fixed'])} times in {bug['file']} (need 1)")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(bug["fixed"], bug["buggy"]))
        git(dest, "rm", "-q", "-f", "--", *bug["tests"])  # -f: on an orphan branch every file is staged
        git(dest, "commit", "-q", "-a", "-m", f"State before issue {bid}")
        shas[bid] = git(dest, "rev-parse", "HEAD").strip()
    git(dest, "checkout", "-q", INITIAL_BRANCH)
    return shas

