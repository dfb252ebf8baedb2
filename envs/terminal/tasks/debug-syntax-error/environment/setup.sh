#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
cat > app.py <<'EOF'
def total(xs)
    return sum(xs)

print("total:", total([10, 12, 20])
EOF
