#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
cat > grades.csv <<'EOF'
student,subject,grade
ann,math,90
bob,math,70
ann,art,85
bob,art,75
ann,bio,78
cid,bio,100
EOF
