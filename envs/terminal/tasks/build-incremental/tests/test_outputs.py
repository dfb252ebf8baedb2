# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import subprocess, os, time
run = lambda: subprocess.run(["./build.sh"], capture_output=True, text=True, timeout=20).stdout.split()
assert sorted(run()) == ["out/a.up", "out/b.up"]
assert open("out/a.up").read() == "ALPHA\n"
assert run() == []
time.sleep(1.1)
open("src/b.txt", "w").write("gamma\n")
assert run() == ["out/b.up"] and open("out/b.up").read() == "GAMMA\n"
open("src/c.txt", "w").write("c\n")
assert run() == ["out/c.up"]
