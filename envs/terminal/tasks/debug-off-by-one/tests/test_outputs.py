# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import subprocess
open("/tmp/n2.txt", "w").write("1\n2\n3\n10\n")
for f, want in (("nums.txt", 18.0), ("/tmp/n2.txt", 4.0)):
    out = subprocess.run(["python3", "average.py", f], capture_output=True, text=True, timeout=10).stdout
    assert abs(float(out) - want) < 1e-9, out
