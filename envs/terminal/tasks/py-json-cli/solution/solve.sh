#!/bin/bash
set -e
cat > stats.py <<'EOF'
import json, sys
xs = json.load(sys.stdin)
if not xs:
    print(json.dumps({"count": 0}))
else:
    print(json.dumps({"count": len(xs), "sum": sum(xs), "min": min(xs), "max": max(xs), "mean": sum(xs) / len(xs)}))
EOF
