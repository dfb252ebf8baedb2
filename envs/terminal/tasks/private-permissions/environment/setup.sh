#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
mkdir -p private/bin; echo key > private/key.pem; echo pw > private/pass.txt; printf '#!/bin/sh\necho t\n' > private/bin/tool
chmod 777 private private/bin; chmod 666 private/key.pem private/pass.txt; chmod 755 private/bin/tool
