# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
assert open("config/main.conf").read() == "host=db.internal\nport=5432\n"
assert open("config/svc/proxy.conf").read() == "upstream db.internal:8080\nbackup db.internal\n"
assert open("config/README.txt").read() == "localhost is fine here\n"
