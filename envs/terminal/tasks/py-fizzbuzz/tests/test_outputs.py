# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import subprocess
def fb(i): return "FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else str(i)
for n in (1, 15, 31):
    out = subprocess.run(["python3", "fizzbuzz.py", str(n)], capture_output=True, text=True, timeout=10).stdout.split()
    assert out == [fb(i) for i in range(1, n + 1)], (n, out)
