# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import sys
sys.path.insert(0, ".")
import primes
ref = [p for p in range(2, 200) if all(p % d for d in range(2, int(p ** 0.5) + 1))]
assert [n for n in range(-5, 200) if primes.is_prime(n)] == ref
assert primes.primes_below(30) == [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]
assert primes.primes_below(2) == []
assert primes.is_prime(7919) and not primes.is_prime(7917)
