# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
assert open("admins.txt").read().split() == ["bea", "zoe"]
