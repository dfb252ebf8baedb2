#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
mkdir -p photos
for n in beach sunset "my cat" party; do echo "img $n" > "photos/$n.jpeg"; done
echo keep > photos/notes.txt; echo png > photos/logo.png
