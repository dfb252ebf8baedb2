#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
cat > items.json <<'EOF'
[{"id": 1, "name": "pen", "price": 1.5, "color": "blue"}, {"id": 2, "name": "paper, A4", "price": 4.25},
 {"id": 3, "name": "ink \"black\"", "price": 12}]
EOF
