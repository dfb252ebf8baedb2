# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import subprocess, os
os.makedirs("/tmp/extra dir", exist_ok=True)
open("/tmp/extra dir/a b.txt", "w").write("1\n2\n")
assert subprocess.run(["./count.sh", "notes"], capture_output=True, text=True, timeout=10).stdout.strip() == "6"
assert subprocess.run(["./count.sh", "/tmp/extra dir"], capture_output=True, text=True, timeout=10).stdout.strip() == "2"
