#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
mkdir -p scripts; for f in build.sh test.sh deploy.sh; do echo 'echo hi' > scripts/$f; done
echo data > scripts/data.txt; echo cfg > scripts/app.conf; chmod 755 scripts/app.conf; chmod 644 scripts/*.sh
