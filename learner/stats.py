"""The statistics a learning curve is read with: intervals for rates and means, unbiased pass@k,
and a paired test between two modes.

- Rates (pass@1 over held-out tasks): Wilson score interval, which stays inside [0, 1] and is
  honest at 0 or n successes where the normal interval collapses to a point.
- Means (outcomes in [-1, 1], a figure averaged over seeds): percentile bootstrap of the mean,
  seeded so a report is reproducible; or Student's t interval, the one for a handful of seeds:
  a percentile bootstrap never leaves the range of the values (over seeds 0.1, 0.2, 0.3 it
  gives [0.1, 0.3], where t with 2 df gives [-0.05, 0.45]).
- pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k) (the unbiased estimator of
  Chen et al. 2021), averaged over tasks.
- Two modes on the same items (held-out tasks, or seeds): a two-sided paired sign-flip
  permutation test on the differences, exact up to 2^16 items, Monte Carlo beyond.
Only numpy: no scipy in the runtime.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any, Sequence

import numpy as np

Z95 = 1.959963984540054  # the normal quantile of 0.975


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A point estimate with its 95% interval [lo, hi] over `n` items."""

    value: float
    lo: float
    hi: float
    n: int

    @property
    def half_width(self) -> float:
        return max(self.value - self.lo, self.hi - self.value)

    def fmt(self, digits: int = 2) -> str:
        """`0.41 ± 0.05` (the larger side, for an asymmetric interval)."""
        return f"{self.value:.{digits}f} ± {self.half_width:.{digits}f}"

    def to_dict(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)

    def as_row(self, name: str) -> dict[str, float | int]:
        """The estimate under a metrics row's flat names: `name`, `name_lo`, `name_hi`, `name_n`."""
        return {name: self.value, f"{name}_lo": self.lo, f"{name}_hi": self.hi, f"{name}_n": self.n}

    @classmethod
    def from_row(cls, row: dict[str, Any], name: str) -> Estimate | None:
        """The estimate `as_row` wrote into `row`, or None when the row lacks it (or its interval)."""
        if not isinstance(row.get(name), (int, float)) or f"{name}_lo" not in row:
            return None
        return cls(row[name], row[f"{name}_lo"], row[f"{name}_hi"], int(row.get(f"{name}_n", 0)))


def wilson(successes: int, n: int, z: float = Z95) -> Estimate:
    """The success rate with its Wilson score interval."""
    if n <= 0:
        raise ValueError("wilson: need at least one trial")
    if not 0 <= successes <= n:
        raise ValueError(f"wilson: successes must be in [0, {n}], got {successes}")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if successes == 0 else max(0.0, centre - half)  # exact ends, not 1 - 1e-16
    hi = 1.0 if successes == n else min(1.0, centre + half)
    return Estimate(p, lo, hi, n)


def bootstrap_mean(values: Sequence[float], n_boot: int = 10_000, seed: int = 0, alpha: float = 0.05) -> Estimate:
    """The mean with a percentile-bootstrap interval (a single value gets a zero-width one)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("bootstrap_mean: no values")
    if x.size == 1 or np.all(x == x[0]):
        return Estimate(float(x.mean()), float(x.mean()), float(x.mean()), int(x.size))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return Estimate(float(x.mean()), float(lo), float(hi), int(x.size))


# Student t quantiles of 0.975 for 1..30 degrees of freedom (checked against the numerically
# integrated t density to 7 digits); beyond 30 the Cornish-Fisher expansion is within 3e-6.
_T975 = (12.7062047, 4.3026527, 3.1824463, 2.7764451, 2.5705818, 2.4469119, 2.3646243, 2.3060041, 2.2621572,
         2.2281389, 2.2009852, 2.1788128, 2.1603687, 2.1447867, 2.1314495, 2.1199053, 2.1098156, 2.1009220,
         2.0930241, 2.0859634, 2.0796138, 2.0738731, 2.0686576, 2.0638986, 2.0595386, 2.0555294, 2.0518305,
         2.0484071, 2.0452296, 2.0422725)


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom."""
    if df < 1:
        raise ValueError(f"t975: need df >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = Z95
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


def t_mean(values: Sequence[float]) -> Estimate:
    """The mean with its 95% Student t interval, mean ± t975(n-1) s / sqrt(n). One value has no
    spread to go on: its interval is (-inf, inf), not a point."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("t_mean: no values")
    m = float(x.mean())
    if x.size == 1:
        return Estimate(m, -math.inf, math.inf, 1)
    half = t975(x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return Estimate(m, m - half, m + half, int(x.size))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task from n samples of which c are correct (needs k <= n)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def paired_permutation_p(a: Sequence[float], b: Sequence[float], n_perm: int = 100_000, seed: int = 0) -> float:
    """Two-sided p-value of a sign-flip permutation test that the mean of a - b is zero (items
    paired by position: the same held-out task, or the same seed). Exact when there are at most
    16 non-zero differences; otherwise Monte Carlo with `n_perm` draws (the observed sign
    pattern counts as one of them, so p is never 0)."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if d.shape != (len(a),) or len(a) != len(b):
        raise ValueError("paired_permutation_p: a and b must have the same length")
    d = d[d != 0]
    if d.size == 0:
        return 1.0
    observed = abs(d.sum())
    tol = 1e-12 * max(1.0, observed)
    if d.size <= 16:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
        return float(np.mean(np.abs(signs @ d) >= observed - tol))
    rng = np.random.default_rng(seed)
    signs = rng.choice((1.0, -1.0), size=(n_perm, d.size))
    hits = int(np.sum(np.abs(signs @ d) >= observed - tol))
    return (hits + 1) / (n_perm + 1)
