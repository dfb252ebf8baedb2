# Checks the task's results (run from the work dir); exits non-zero on failure.
# The agent's processes are gone when the tests run: /logs/agent/processes.json lists them as they were at submit.
import json
procs = {p["pid"]: p for p in json.load(open("/logs/agent/processes.json"))}
pid = int(open("server.pid").read())
assert pid in procs and procs[pid]["state"] != "Z" and "server.py" in " ".join(procs[pid]["cmdline"])
