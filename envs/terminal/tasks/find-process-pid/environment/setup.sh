#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
for s in 5555 6666 7777 8888; do nohup sleep $s >/dev/null 2>&1 & done
