# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import os
pid = int(open("pid.txt").read().strip())
assert open(f"/proc/{pid}/cmdline").read().split("\0")[:2] == ["sleep", "7777"]
