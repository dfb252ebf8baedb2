# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import subprocess
out = subprocess.run(["git", "-C", "repo", "log", "--format=%H", "-S", "SECRET_KEY", "--reverse"], capture_output=True, text=True, check=True).stdout.split()
assert open("commit.txt").read().strip() == out[0]
