# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import os
want = sorted(os.path.join(d, f) for d, _, fs in os.walk("data") for f in fs if os.path.getsize(os.path.join(d, f)) > 1000)
got = [l.strip() for l in open("large.txt") if l.strip()]
assert got == want, (got, want)
