#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
git config --global user.email agent@example.com; git config --global user.name Agent; git config --global init.defaultBranch main
mkdir repo && cd repo && git init -q
echo 'print(2 + 2)' > calc.py && git add . && git commit -qm "add calc"
echo 'notes' > notes.txt && git add . && git commit -qm "add notes"
echo 'print(2 +* 2)' > calc.py && git commit -qam "refactor calc"
