# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import os, subprocess
link = "/home/agent/bin/appctl"  # the agent's home (the tests run as root)
assert os.path.islink(link) and os.path.realpath(link) == "/opt/tools/libexec/appctl"
assert open("status.txt").read().strip() == "appctl: all services running"
