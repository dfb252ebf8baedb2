#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
git config --global user.email agent@example.com; git config --global user.name Agent; git config --global init.defaultBranch main
mkdir -p project/src; echo "print('x')" > project/src/app.py; echo "# Project" > project/README.md
