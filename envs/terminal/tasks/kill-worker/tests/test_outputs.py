# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
def alive(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
assert not alive(int(open("worker.pid").read()))
assert alive(int(open("keeper.pid").read()))
