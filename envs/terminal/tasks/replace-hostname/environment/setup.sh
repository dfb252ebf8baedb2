#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
mkdir -p config/svc
printf 'host=localhost\nport=5432\n' > config/main.conf
printf 'upstream localhost:8080\nbackup localhost\n' > config/svc/proxy.conf
printf 'localhost is fine here\n' > config/README.txt
