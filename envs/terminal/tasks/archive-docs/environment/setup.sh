#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
mkdir -p docs/img; echo "# Guide" > docs/guide.md; echo notes > docs/notes.txt; printf 'PNG' > docs/img/a.png
