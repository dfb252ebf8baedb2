#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
mkdir -p dup
echo alpha > dup/c.txt; echo alpha > dup/a.txt; echo alpha > dup/b.txt
echo beta > dup/z.txt; echo beta > dup/y.txt; echo gamma > dup/m.txt
