# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import os
assert sorted(os.listdir("dup")) == ["a.txt", "m.txt", "y.txt"], os.listdir("dup")
