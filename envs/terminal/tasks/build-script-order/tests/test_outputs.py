# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import subprocess, shutil
assert open("dist/bundle.txt").read() == "HEADER\nBODY\n"
shutil.rmtree("gen", ignore_errors=True); shutil.rmtree("dist", ignore_errors=True)
r = subprocess.run(["./build.sh"], capture_output=True, text=True, timeout=20)
assert r.returncode == 0 and open("dist/bundle.txt").read() == "HEADER\nBODY\n", r
