#!/bin/bash
set -e
python3 -c '
import json
def merge(a, b):
    out = dict(a)
    for k, v in b.items():
        out[k] = merge(a[k], v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
    return out
json.dump(merge(json.load(open("base.json")), json.load(open("override.json"))), open("merged.json", "w"))
'
