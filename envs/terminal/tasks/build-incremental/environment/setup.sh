#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
mkdir -p src; echo alpha > src/a.txt; echo beta > src/b.txt
