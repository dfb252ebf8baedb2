# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
got = [l.strip() for l in open("emails.txt") if l.strip()]
assert got == sorted(["ann@example.com", "bob.smith@mail.org", "zed_99@corp.net", "carl+news@example.co.uk"]), got
