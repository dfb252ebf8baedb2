#!/bin/bash
set -e
python3 -c '
import json
from collections import Counter
json.dump(Counter(l.split("\"")[2].split()[0] for l in open("access.log")), open("status.json", "w"))
'
