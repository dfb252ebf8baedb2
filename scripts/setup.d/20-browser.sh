#!/usr/bin/env bash
# Headless Chromium for the GUI env (MiniWoB++): Debian's chromium + chromium-driver, then a
# smoke test that one browser starts and quits with no process left. Idempotent: installed
# packages are left alone. The machine has no network: envs/gui/browser.py starts Chromium
# with background networking, sync and component updates off and sets SE_OFFLINE=true so
# Selenium Manager never tries to download a driver.
set -euo pipefail
cd "$(dirname "$0")/../.."
say() { printf '[setup/browser] %s\n' "$*"; }

need=""
for p in chromium chromium-driver; do dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"; done
if [ -n "$need" ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    say "missing$need and this is not root with apt-get: GUI tests (-m browser) will fail"
    exit 0
  fi
  say "installing$need"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null
fi

say "$(chromium --version 2>/dev/null | head -1); $(chromedriver --version | cut -d' ' -f1-2)"
timeout 120 .venv/bin/python - <<'PY'
from envs.gui.browser import Browser
from envs.gui.procs import browser_pids

b = Browser()
assert b.run("return 1 + 1;") == 2
b.quit()
assert not browser_pids(b.marker), "browser processes survived quit()"
print("[setup/browser] headless chromium starts and stops cleanly")
PY
