#!/bin/bash
set -e
pgrep -f '^sleep 7777$' > pid.txt
