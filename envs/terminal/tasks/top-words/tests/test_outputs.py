# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
got = [l.strip() for l in open("top5.txt") if l.strip()]
assert got == ["apple", "banana", "cherry", "date", "elder"], got
