# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import json
assert json.load(open("merged.json")) == {"name": "app", "db": {"host": "b", "port": 1, "opts": {"ssl": True, "pool": 5}}, "tags": [3], "debug": False, "extra": {"x": 1}}
