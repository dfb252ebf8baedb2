#!/bin/bash
set -e
mkdir -p out && for i in $(seq 1 20); do echo "$i" > "out/file_$(printf %02d "$i").txt"; done
