# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import subprocess, sys
r = subprocess.run([sys.executable, "-m", "compileall", "-q", "pkg"], capture_output=True, text=True, timeout=20)
assert r.returncode == 0, r.stdout
sys.path.insert(0, ".")
from pkg.sub import geometry, text
import pkg
assert geometry.perimeter(2, 3) == 10 and geometry.area(2, 3) == 6 and text.shout("a") == "A!" and pkg.add(1, 2) == 3
