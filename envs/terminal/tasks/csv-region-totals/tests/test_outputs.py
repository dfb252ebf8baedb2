# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import csv
from collections import defaultdict
tot = defaultdict(float)
for row in csv.DictReader(open("sales.csv")):
    tot[row["region"]] += float(row["amount"])
got = list(csv.reader(open("totals.csv")))
assert got[0] == ["region", "total"], got[0]
assert [r[0] for r in got[1:]] == sorted(tot)
for reg, val in got[1:]:
    assert abs(float(val) - tot[reg]) < 0.005 and len(val.split(".")[1]) == 2, (reg, val)
