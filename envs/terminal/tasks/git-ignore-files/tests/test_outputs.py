# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import subprocess
out = subprocess.run(["git", "-C", "repo", "status", "--porcelain", "--untracked-files=all"], capture_output=True, text=True, check=True).stdout
files = sorted(l[3:] for l in out.splitlines())
assert files == [".gitignore", "notes.md"], files
