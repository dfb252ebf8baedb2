# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import csv
rows = list(csv.reader(open("adults.csv")))
assert rows == [["name", "age", "city"], ["Ann", "34", "Oslo"], ["Cara", "30", "Rome"], ["Lee, Dan", "45", "New York, NY"]], rows
