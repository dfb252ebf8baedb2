#!/bin/bash
set -e
grep -h '^port' /opt/app/etc/*.ini | head -1 | cut -d= -f2 | tr -d ' ' > /app/port.txt
