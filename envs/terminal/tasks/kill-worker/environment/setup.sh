#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
nohup sleep 100000 >/dev/null 2>&1 & echo $! > worker.pid
nohup sleep 100001 >/dev/null 2>&1 & echo $! > keeper.pid
