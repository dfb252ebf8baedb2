#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
echo '{"name": "app", "db": {"host": "a", "port": 1, "opts": {"ssl": false, "pool": 5}}, "tags": [1, 2], "debug": false}' > base.json
echo '{"db": {"host": "b", "opts": {"ssl": true}}, "tags": [3], "extra": {"x": 1}}' > override.json
