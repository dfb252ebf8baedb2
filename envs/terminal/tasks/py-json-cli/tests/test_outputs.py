# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import subprocess, json
def run(x): return json.loads(subprocess.run(["python3", "stats.py"], input=json.dumps(x), capture_output=True, text=True, timeout=10).stdout)
assert run([1, 2, 3, 10]) == {"count": 4, "sum": 16, "min": 1, "max": 10, "mean": 4.0}
assert run([]) == {"count": 0}
assert run([-2.5]) == {"count": 1, "sum": -2.5, "min": -2.5, "max": -2.5, "mean": -2.5}
