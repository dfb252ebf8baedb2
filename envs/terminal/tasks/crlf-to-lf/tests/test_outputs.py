# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
assert open("src/a.txt", "rb").read() == b"line one\nline two\n"
assert open("src/lib/b.py", "rb").read() == b'print("hi")\nprint("there")\n'
