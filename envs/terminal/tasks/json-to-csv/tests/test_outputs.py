# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import csv
rows = list(csv.reader(open("items.csv")))
assert rows == [["id", "name", "price"], ["1", "pen", "1.5"], ["2", "paper, A4", "4.25"], ["3", 'ink "black"', "12"]], rows
