#!/bin/bash
set -e
git -C repo log --format=%H -S SECRET_KEY --reverse | head -1 > commit.txt
