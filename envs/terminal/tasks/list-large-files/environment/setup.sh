#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
python3 - <<'EOF'
import os, random
r = random.Random(3)
for d in ["data", "data/a", "data/b", "data/a/deep"]:
    os.makedirs(d, exist_ok=True)
for i in range(30):
    d = r.choice(["data", "data/a", "data/b", "data/a/deep"])
    open(f"{d}/f{i:02d}.bin", "wb").write(os.urandom(r.choice([10, 500, 999, 1000, 1001, 5000])))
EOF
