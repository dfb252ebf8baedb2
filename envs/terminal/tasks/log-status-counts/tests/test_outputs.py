# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import json
from collections import Counter
want = Counter(l.split('"')[2].split()[0] for l in open("access.log"))
assert json.load(open("status.json")) == dict(want)
