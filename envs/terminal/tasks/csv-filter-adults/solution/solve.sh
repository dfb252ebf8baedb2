#!/bin/bash
set -e
python3 -c '
import csv, sys
r = csv.reader(open("people.csv")); w = csv.writer(open("adults.csv", "w", newline=""))
w.writerow(next(r))
for row in r:
    if int(row[1]) >= 30: w.writerow(row)
'
