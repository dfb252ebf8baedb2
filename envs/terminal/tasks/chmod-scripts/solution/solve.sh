#!/bin/bash
set -e
chmod u+x scripts/*.sh && chmod a-x scripts/data.txt scripts/app.conf
