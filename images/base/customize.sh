# Runs inside the new root file system (mmdebstrap customize hook) before `docker import`.
set -e
useradd --create-home --uid 1000 --shell /bin/bash agent
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/*.log
