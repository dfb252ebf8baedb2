#!/bin/bash
set -e
nohup python3 server.py >/dev/null 2>&1 &
sleep 1
