#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
python3 - <<'EOF'
import random
r = random.Random(11)
rows = ["date,region,amount"]
for i in range(200):
    rows.append(f"2024-02-{i%28+1:02d},{r.choice(['north','south','east','west'])},{r.randint(100, 99999)/100:.2f}")
open("sales.csv", "w").write("\n".join(rows) + "\n")
EOF
