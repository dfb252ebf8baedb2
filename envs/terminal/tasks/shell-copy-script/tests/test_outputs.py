# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import subprocess, os, shutil
assert os.access("sync.sh", os.X_OK)
shutil.rmtree("/tmp/dst x", ignore_errors=True)
subprocess.run(["./sync.sh", "in dir", "/tmp/dst x"], check=True, timeout=10)
assert sorted(os.listdir("/tmp/dst x")) == ["a.txt", "b c.txt"]
assert open("/tmp/dst x/b c.txt").read() == "b\n"
