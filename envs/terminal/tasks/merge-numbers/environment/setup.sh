#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
mkdir -p parts
printf '5\n12\n3\n' > parts/a.txt; printf '100\n12\n-4\n' > parts/b.txt; printf '7\n3\n20\n' > parts/c.txt
