#!/bin/bash
set -e
python3 -c 'import json; print("\n".join(sorted(u["name"] for u in json.load(open("users.json")) if u.get("active") and "admin" in u["roles"])))' > admins.txt
