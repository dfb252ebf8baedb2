#!/bin/sh
# Playwright's node driver in a session of its own (envs/ecosystem/browsergym.py points
# PLAYWRIGHT_NODEJS_PATH here), so a terminal's Ctrl-C reaches only the runner, which then stops
# the driver: a driver killed first leaves Playwright 1.44's call in flight waiting forever.
# Playwright runs `NODE <driver>/package/cli.js run-driver`; its own node is <driver>/node.
exec setsid "$(dirname "$(dirname "$1")")/node" "$@"
