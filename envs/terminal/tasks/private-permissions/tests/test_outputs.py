# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import os, stat
mode = lambda p: stat.S_IMODE(os.stat(p).st_mode)
assert mode("private") == 0o700 and mode("private/bin") == 0o700
assert mode("private/key.pem") == 0o600 and mode("private/pass.txt") == 0o600
assert mode("private/bin/tool") == 0o700
