#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
python3 - <<'EOF'
import random
r = random.Random(2)
lines = []
for i in range(300):
    st = r.choice([200, 200, 200, 301, 404, 500, 404, 200])
    lines.append(f'10.0.0.{i%50} - - [10/Oct/2024:13:55:{i%60:02d} +0000] "GET /p/{i} HTTP/1.1" {st} {r.randint(10, 5000)}')
open("access.log", "w").write("\n".join(lines) + "\n")
EOF
