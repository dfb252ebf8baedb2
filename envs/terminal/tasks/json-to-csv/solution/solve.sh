#!/bin/bash
set -e
python3 -c '
import csv, json
w = csv.writer(open("items.csv", "w", newline=""))
w.writerow(["id", "name", "price"])
for it in json.load(open("items.json")): w.writerow([it["id"], it["name"], it["price"]])
'
