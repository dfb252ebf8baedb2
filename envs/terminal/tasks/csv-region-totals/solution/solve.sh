#!/bin/bash
set -e
python3 - <<'EOF'
import csv
from collections import defaultdict
tot = defaultdict(float)
for row in csv.DictReader(open("sales.csv")):
    tot[row["region"]] += float(row["amount"])
with open("totals.csv", "w") as f:
    f.write("region,total\n")
    for k in sorted(tot):
        f.write(f"{k},{tot[k]:.2f}\n")
EOF
