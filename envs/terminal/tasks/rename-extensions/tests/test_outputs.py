# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import os
fs = sorted(os.listdir("photos"))
assert fs == sorted(["beach.jpg", "sunset.jpg", "my cat.jpg", "party.jpg", "notes.txt", "logo.png"]), fs
assert open("photos/my cat.jpg").read() == "img my cat\n"
