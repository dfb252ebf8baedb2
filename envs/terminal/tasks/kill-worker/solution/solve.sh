#!/bin/bash
set -e
kill "$(cat worker.pid)"; sleep 0.3
