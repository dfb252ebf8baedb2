#!/bin/bash
set -e
cd project && git init -q && git add -A && git commit -qm initial
