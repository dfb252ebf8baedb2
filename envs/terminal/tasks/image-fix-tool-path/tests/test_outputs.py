# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import os, subprocess
link = os.path.expanduser("~/bin/appctl")
assert os.path.islink(link) and os.path.realpath(link) == "/opt/tools/libexec/appctl"
assert open("status.txt").read().strip() == "appctl: all services running"
