#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
cat > report.py <<'EOF'
from collections import Counter

words = "the cat and the hat and the bat".split()
counts = Counter(words)
with open("report.json", "w") as f:
    json.dump(dict(counts), f)
print("written")
EOF
