#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
cat > contacts.txt <<'EOF'
Call Ann (ann@example.com) or Bob at bob.smith@mail.org tomorrow.
Reply-to: ann@example.com; cc: zed_99@corp.net
Nothing here. Not an email: foo@ or @bar.com
Last: carl+news@example.co.uk, bob.smith@mail.org
EOF
