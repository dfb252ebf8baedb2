#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
printf '4\n8\n15\n16\n23\n42\n' > nums.txt
cat > average.py <<'EOF'
import sys
nums = [float(l) for l in open(sys.argv[1]) if l.strip()]
total = 0
for i in range(1, len(nums)):
    total += nums[i]
print(total / len(nums))
EOF
