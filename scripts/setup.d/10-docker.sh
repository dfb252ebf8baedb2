#!/usr/bin/env bash
# Docker engine + sandbox images. Idempotent: an engine that answers is left alone; images
# whose recipe did not change are not rebuilt (tags carry the recipe's content hash).
# Without root on Debian we cannot install or start an engine: say so, exit 0, and the
# sandboxes fall back to bubblewrap (sandbox=bwrap).
set -euo pipefail
cd "$(dirname "$0")/../.."
say() { printf '[setup/docker] %s\n' "$*"; }
log=/var/log/openclaw-dockerd.log

if ! docker info >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || [ ! -f /etc/debian_version ] || ! command -v apt-get >/dev/null; then
    say "no Docker engine answers and this is not root on Debian: skipping (use sandbox=bwrap)"
    exit 0
  fi
  need=""
  for p in docker.io mmdebstrap; do dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"; done
  if [ -n "$need" ]; then
    say "installing$need"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null
  fi
  # No systemd here: run dockerd in the background, its log in a file (dockerd logs are the
  # first thing to read when the daemon misbehaves under load).
  if ! pgrep -x dockerd >/dev/null; then
    say "starting dockerd (log: $log)"
    # its own session: it must outlive the shell (and process group) that ran the setup
    setsid nohup dockerd >>"$log" 2>&1 </dev/null &
  fi
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  if ! docker info >/dev/null 2>&1; then
    say "dockerd did not answer within 60 s; see $log (use sandbox=bwrap meanwhile)"
    exit 0
  fi
fi
say "engine: $(docker version --format '{{.Server.Version}}' 2>/dev/null)"
py=.venv/bin/python
[ -x "$py" ] || py=python3
# How Limits.disk_mb will bind: a loop-mounted file system per sandbox (the kernel's cap) needs
# root and loop devices; without them it says why, and the disk watchdog (a poll) holds the caps.
say "$("$py" -m envs.sandbox.layerfs 2>&1 | tail -1)"

# Base image (mmdebstrap + docker import) and the per-env-type layers (docker build --network none).
"$py" -m envs.sandbox.images build
