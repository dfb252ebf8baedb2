#!/usr/bin/env bash
# SWE env (envs/swe): swebench's grading code, and one image per bundled repository.
# swebench itself is pinned in requirements-nodeps.txt (installed by scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
say() { printf '[setup swe] %s\n' "$*"; }
py=.venv/bin/python
[ -x "$py" ] || { say "no .venv: skipped"; exit 0; }
if docker info >/dev/null 2>&1; then
  "$py" -c 'from envs.swe import bundled; print(*(t for n in bundled.repo_names() for t in bundled.repo_images(n).values()))'
else
  say "no Docker engine: the SWE images are built on first use"
fi
