# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import json
assert json.load(open("averages.json")) == {"ann": 84.33, "bob": 72.5, "cid": 100}
