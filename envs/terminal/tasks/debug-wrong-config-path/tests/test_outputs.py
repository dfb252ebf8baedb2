# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import subprocess, os
assert open("site/index.html").read() == "<h1>My Site</h1><p>by Ann</p>\n"
os.remove("site/index.html")
r = subprocess.run(["./deploy.sh"], capture_output=True, text=True, timeout=10)
assert r.returncode == 0 and open("site/index.html").read() == "<h1>My Site</h1><p>by Ann</p>\n", r
