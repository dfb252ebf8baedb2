# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import subprocess
def git(*a): return subprocess.run(["git", "-C", "project", *a], capture_output=True, text=True, check=True).stdout
assert git("log", "--format=%s").strip() == "initial"
assert sorted(git("ls-files").split()) == ["README.md", "src/app.py"]
assert git("status", "--porcelain").strip() == ""
