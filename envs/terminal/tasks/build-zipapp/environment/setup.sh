#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
mkdir -p src/app
touch src/app/__init__.py
printf 'def main():\n    print("hello from app")\n' > src/app/cli.py
