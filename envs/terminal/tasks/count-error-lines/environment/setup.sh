#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
python3 - <<'EOF'
import random
r = random.Random(7)
lines = []
for i in range(500):
    lvl = r.choice(["INFO", "INFO", "WARN", "ERROR", "DEBUG"])
    lines.append(f"2024-01-01T00:{i%60:02d}:00 {lvl} request {i} handled")
open("app.log", "w").write("\n".join(lines) + "\n")
EOF
