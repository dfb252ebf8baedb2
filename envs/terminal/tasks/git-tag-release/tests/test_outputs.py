# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import subprocess
def git(*a): return subprocess.run(["git", "-C", "repo", *a], capture_output=True, text=True, check=True).stdout
assert git("log", "-1", "--format=%s", "v1.0").strip() == "release candidate"
