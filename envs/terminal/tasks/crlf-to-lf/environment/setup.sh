#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
mkdir -p src/lib
printf 'line one\r\nline two\r\n' > src/a.txt
printf 'print("hi")\r\nprint("there")\r\n' > src/lib/b.py
