#!/usr/bin/env bash
# Set up (idempotent), then run every test group: fast, slow, docker, browser, full suites, on
# parallel workers (TEST_WORKERS, default 3: most tests wait on Docker, subprocesses or HTTP, so
# three workers keep two cores busy; tests/conftest.py keeps each file on one worker).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -m "" -q --durations=40 -n "${TEST_WORKERS:-3}" --dist loadgroup "$@"
