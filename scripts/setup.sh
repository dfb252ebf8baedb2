#!/usr/bin/env bash
# Idempotent setup on a fresh Debian machine: system packages, .venv with pinned Python
# packages, then each part's own step in scripts/setup.d/ (Docker engine and images, browser).
# Safe to run again: every step checks before it acts.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[setup] %s\n' "$*"; }

# 1. System packages (root on Debian only; elsewhere we say what is missing and go on).
pkgs=$(grep -v -E '^\s*(#|$)' scripts/apt-packages.txt || true)
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing Debian packages:$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  else
    say "WARNING: missing Debian packages (need root + apt-get):$missing"
  fi
fi

# 2. Python: torch 2.13.0's CPU build lies on disk for Python 3.11.
py=$(command -v python3.11 || command -v python3)
[ -x .venv/bin/python ] || { say "creating .venv with $py"; "$py" -m venv .venv; }
reqs="requirements.txt requirements-dev.txt requirements-nodeps.txt requirements-extras.txt"
want=$(cat $reqs | sha256sum | cut -c1-64)
if [ "$(cat .venv/.requirements.sha 2>/dev/null)" != "$want" ]; then
  say "installing Python packages (requirements.txt, requirements-dev.txt)"
  .venv/bin/pip install -q --upgrade pip >/dev/null
  # --no-compile: compiling every file of every package in line took 77 of the install's 123 s
  # here; step 3 compiles what the harness imports, beside the image builds.
  .venv/bin/pip install -q --no-compile -r requirements.txt -r requirements-dev.txt
  say "installing requirements-nodeps.txt without their dependencies"
  .venv/bin/pip install -q --no-compile --no-deps -r requirements-nodeps.txt
  # The adapters' optional libraries (TextArena, skyrl-gym, BrowserGym): wheels, installed here
  # so the tests of env=textarena, env=skyrl_gym and env=browsergym run; users may leave them out.
  say "installing the optional extras (requirements-extras.txt)"
  .venv/bin/pip install -q --no-compile -r requirements-extras.txt
  echo "$want" > .venv/.requirements.sha
fi

# 3. Bytecode, beside step 4: where PYTHONDONTWRITEBYTECODE is set no import writes a .pyc and
# every process compiled torch and transformers again (scripts/bytecode.py says why and what).
PYTHONDONTWRITEBYTECODE= timeout 600 .venv/bin/python scripts/bytecode.py > .venv/bytecode.log 2>&1 &
compiling=$!
trap 'kill "$compiling" 2>/dev/null' EXIT

# 4. Each part's own setup (services, images, browsers).
for step in scripts/setup.d/*.sh; do
  [ -e "$step" ] || continue
  say "running $step"
  bash "$step"
done
wait "$compiling" || say "WARNING: writing bytecode failed (.venv/bytecode.log); runs start slower"
trap - EXIT
tail -n 1 .venv/bytecode.log
say "done"
