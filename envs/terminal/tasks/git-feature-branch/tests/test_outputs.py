# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import subprocess
def git(*a): return subprocess.run(["git", "-C", "repo", *a], capture_output=True, text=True, check=True).stdout
assert git("rev-list", "--count", "main").strip() == "1"
assert git("rev-list", "--count", "feature").strip() == "2"
assert git("show", "feature:feature.txt") == "done\n"
assert "feature.txt" not in git("ls-tree", "-r", "--name-only", "main")
