#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
cat > users.json <<'EOF'
[{"name": "zoe", "active": true, "roles": ["admin", "dev"]},
 {"name": "adam", "active": false, "roles": ["admin"]},
 {"name": "mia", "active": true, "roles": ["dev"]},
 {"name": "bea", "active": true, "roles": ["ops", "admin"]},
 {"name": "kim", "roles": ["admin"]}]
EOF
