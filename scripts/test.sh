#!/usr/bin/env bash
# Set up (idempotent), then run every test group: fast, slow, docker, browser, full suites.
# Most tests wait on Docker, subprocesses or HTTP, so TEST_WORKERS (default 3) parallel workers
# keep two cores busy (tests/conftest.py keeps each file on one worker); the few tests that
# measure the whole machine (marker `serial`) run alone afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
pytest=(.venv/bin/python -m pytest -q)
rc=0
"${pytest[@]}" -m "not serial" -n "${TEST_WORKERS:-3}" --dist loadgroup --durations=40 "$@" || rc=$?
"${pytest[@]}" -m serial --durations=5 "$@" || { r=$?; [ $r = 5 ] || rc=$r; }  # 5: none of "$@" is serial
exit $rc
