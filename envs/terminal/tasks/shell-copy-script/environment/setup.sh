#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
mkdir -p "in dir/sub"; echo a > "in dir/a.txt"; echo b > "in dir/b c.txt"; echo x > "in dir/x.md"; echo s > "in dir/sub/s.txt"
