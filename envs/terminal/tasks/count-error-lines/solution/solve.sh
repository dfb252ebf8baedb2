#!/bin/bash
set -e
grep -c ERROR app.log > error_count.txt
