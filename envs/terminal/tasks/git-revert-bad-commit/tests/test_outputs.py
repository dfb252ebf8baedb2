# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import subprocess
def git(*a): return subprocess.run(["git", "-C", "repo", *a], capture_output=True, text=True, check=True).stdout
subjects = git("log", "--format=%s").splitlines()
assert len(subjects) == 4 and subjects[1] == "refactor calc", subjects
assert subprocess.run(["python3", "calc.py"], cwd="repo", capture_output=True, text=True).stdout.strip() == "4"
assert git("status", "--porcelain").strip() == ""
