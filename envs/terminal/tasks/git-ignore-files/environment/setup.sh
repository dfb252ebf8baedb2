#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
git config --global user.email agent@example.com; git config --global user.name Agent; git config --global init.defaultBranch main
mkdir -p repo/build repo/sub && cd repo && git init -q
echo x > a.log; echo y > sub/b.log; echo bin > build/out.o; echo notes > notes.md
