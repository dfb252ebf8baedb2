#!/bin/bash
set -e
cat parts/*.txt | sort -n -u > merged.txt
