#!/usr/bin/env bash
# SWE env (envs/swe): swebench's grading code, and one image per bundled repository.
# swebench 5.0.2 is installed without its dependencies: they include modal and datasets, which
# grading does not import (envs/swe/grading.py); unidiff (which it does import) is in requirements.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
say() { printf '[setup swe] %s\n' "$*"; }
py=.venv/bin/python
[ -x "$py" ] || { say "no .venv: skipped"; exit 0; }
if [ "$("$py" -c 'import importlib.metadata as m; print(m.version("swebench"))' 2>/dev/null)" != "5.0.2" ]; then
  say "installing swebench==5.0.2 --no-deps"
  .venv/bin/pip install -q --no-deps swebench==5.0.2
fi
if docker info >/dev/null 2>&1; then
  "$py" -c 'from envs.swe import bundled; print(*(bundled.repo_image(n) for n in bundled.repo_names()))'
else
  say "no Docker engine: the SWE images are built on first use"
fi
