# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import subprocess, os
assert os.access("greet.sh", os.X_OK)
run = lambda *a: subprocess.run(["./greet.sh", *a], capture_output=True, text=True, timeout=10).stdout
assert run("Ann", "Bob Smith") == "Hello, Ann!\nHello, Bob Smith!\n"
assert run() == "Hello, world!\n"
