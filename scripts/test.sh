#!/usr/bin/env bash
# Set up (idempotent), then run every test group: fast, slow, docker, browser, full suites.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -m "" -q --durations=30 "$@"
