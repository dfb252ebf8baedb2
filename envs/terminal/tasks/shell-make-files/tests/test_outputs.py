# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import os
assert sorted(os.listdir("out")) == [f"file_{i:02d}.txt" for i in range(1, 21)]
for i in range(1, 21):
    assert open(f"out/file_{i:02d}.txt").read() == f"{i}\n"
