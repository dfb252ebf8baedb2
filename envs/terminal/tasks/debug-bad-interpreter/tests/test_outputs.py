# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import subprocess
r = subprocess.run(["./run.sh"], capture_output=True, text=True, timeout=10)
assert r.returncode == 0 and r.stdout == "ok\n", r
