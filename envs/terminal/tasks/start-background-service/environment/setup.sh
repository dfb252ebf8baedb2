#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
cat > server.py <<'EOF'
import os, time
open("server.pid", "w").write(str(os.getpid()))
open("server.log", "a").write("up\n")
while True:
    time.sleep(1)
EOF
