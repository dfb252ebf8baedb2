# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
want = sum(1 for l in open("app.log") if "ERROR" in l)
assert open("error_count.txt").read().strip() == str(want)
