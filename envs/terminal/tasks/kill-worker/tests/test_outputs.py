# Checks the task's results (run from the work dir); exits non-zero on failure.
# The agent's processes are gone when the tests run: /logs/agent/processes.json lists them as they were at submit.
import json
alive = {p["pid"] for p in json.load(open("/logs/agent/processes.json")) if p["state"] != "Z"}
assert int(open("worker.pid").read()) not in alive
assert int(open("keeper.pid").read()) in alive
