#!/bin/bash
set -e
mkdir -p ~/bin && ln -sf /opt/tools/libexec/appctl ~/bin/appctl && ~/bin/appctl status > status.txt
