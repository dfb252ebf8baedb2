# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import os, stat
for f in os.listdir("scripts"):
    m = os.stat(f"scripts/{f}").st_mode
    if f.endswith(".sh"):
        assert m & stat.S_IXUSR, f
    else:
        assert not m & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH), f
