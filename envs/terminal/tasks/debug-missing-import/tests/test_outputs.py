# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import json, subprocess, os
if os.path.exists("report.json"):
    os.remove("report.json")
r = subprocess.run(["python3", "report.py"], capture_output=True, text=True, timeout=10)
assert r.returncode == 0, r.stderr
assert json.load(open("report.json")) == {"the": 3, "cat": 1, "and": 2, "hat": 1, "bat": 1}
