#!/bin/bash
set -e
printf '*.log\nbuild/\n' > repo/.gitignore
