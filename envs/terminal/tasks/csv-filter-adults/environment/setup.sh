#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
cat > people.csv <<'EOF'
name,age,city
Ann,34,Oslo
"Smith, Bob",29,Paris
Cara,30,Rome
"Lee, Dan",45,"New York, NY"
Eve,12,Lima
EOF
