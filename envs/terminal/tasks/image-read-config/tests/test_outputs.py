# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
assert open("/app/port.txt").read().strip() == "8137"
