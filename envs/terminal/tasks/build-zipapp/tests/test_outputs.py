# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import subprocess, zipfile
assert zipfile.is_zipfile("app.pyz")
r = subprocess.run(["python3", os.path.abspath("app.pyz")], capture_output=True, text=True, timeout=10, cwd="/tmp")
assert r.stdout == "hello from app\n", r
