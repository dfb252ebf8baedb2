# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
def alive(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
import time
for _ in range(20):
    if os.path.exists("server.pid"):
        break
    time.sleep(0.25)
import os
pid = int(open("server.pid").read())
assert alive(pid) and "server.py" in open(f"/proc/{pid}/cmdline").read()
