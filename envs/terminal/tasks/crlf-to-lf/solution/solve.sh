#!/bin/bash
set -e
find src -type f -exec sed -i 's/\r$//' {} +
