#!/bin/bash
set -e
tr 'A-Z' 'a-z' < text.txt | grep -oE '[a-z]+' | sort | uniq -c | sort -rn | head -5 | awk '{print $2}' > top5.txt
