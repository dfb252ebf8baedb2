#!/usr/bin/env bash
# An extra Docker engine on this machine, beside the main one and not touching it: its own data
# root, exec root, pid file and socket; no bridge and no iptables rules (the main engine owns
# docker0 and the NAT rules, so its sandboxes have no network: Limits.network must stay off).
# For trying `sandbox.hosts=[...]` on one machine and for tests/envs/sandbox/test_sandbox_hosts.py.
#
#   bash scripts/docker2.sh start|stop|status [NAME]     (as root; NAME defaults to docker2)
#
# NAME's engine answers at unix:///run/openclaw-NAME.sock; its images stay in
# /var/lib/openclaw-NAME across restarts (`stop NAME --purge` deletes them).
set -euo pipefail
cmd=${1:-status}
name=${2:-docker2}
purge=${3:-}
[[ $name =~ ^[a-z0-9-]+$ ]] || { echo "bad engine name: $name" >&2; exit 2; }
sock=/run/openclaw-$name.sock
run=/run/openclaw-$name           # exec root (short: containerd's socket paths live under it)
data=/var/lib/openclaw-$name
pidfile=$run.pid
log=/var/log/openclaw-$name.log
say() { printf '[%s] %s\n' "$name" "$*"; }
answers() { timeout 5 docker -H "unix://$sock" version --format '{{.Server.Version}}' >/dev/null 2>&1; }
pid() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null && cat "$pidfile"; }

case $cmd in
  start)
    if answers; then say "already running: unix://$sock"; exit 0; fi
    [ "$(id -u)" = 0 ] || { say "starting a Docker engine needs root"; exit 1; }
    command -v dockerd >/dev/null || { say "no dockerd (bash scripts/setup.d/10-docker.sh installs it)"; exit 1; }
    mkdir -p "$data" "$run"
    # Its own session: the engine must outlive the shell (and process group) that started it.
    setsid nohup dockerd --data-root "$data" --exec-root "$run" --pidfile "$pidfile" -H "unix://$sock" \
      --bridge=none --iptables=false --ip-masq=false --cgroup-parent="openclaw-$name" \
      >>"$log" 2>&1 </dev/null &
    for _ in $(seq 1 120); do answers && break; sleep 0.5; done
    answers || { say "did not answer within 60 s; see $log"; exit 1; }
    say "running: unix://$sock (log: $log)"
    ;;
  stop)
    if p=$(pid); then
      kill "$p"
      for _ in $(seq 1 120); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
      if kill -0 "$p" 2>/dev/null; then say "did not stop within 60 s (pid $p)"; exit 1; fi
      say "stopped"
    else
      say "not running"
    fi
    if [ "$purge" = --purge ]; then rm -rf "$data" "$run"; say "deleted $data"; fi
    ;;
  status)
    if answers; then say "running: unix://$sock"; else say "not running"; exit 3; fi
    ;;
  *)
    echo "usage: $0 start|stop|status [NAME] [--purge]" >&2; exit 2
    ;;
esac
