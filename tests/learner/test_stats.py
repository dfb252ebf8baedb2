"""learner.stats against hand-computed cases."""
from __future__ import annotations

import math

import numpy as np
import pytest

from learner.stats import Estimate, bootstrap_mean, paired_permutation_p, pass_at_k, t975, t_mean, wilson


def test_wilson_matches_the_textbook_values():
    # 8/10: centre (0.8 + 1.96^2/20) / (1 + 1.96^2/10), half 1.96 sqrt(0.016 + 0.0096) / (1 + 0.38415)
    e = wilson(8, 10)
    assert (e.value, e.n) == (0.8, 10)
    assert (e.lo, e.hi) == pytest.approx((0.4902, 0.9433), abs=1e-4)
    zero = wilson(0, 10)  # the normal interval would be [0, 0]
    assert zero.lo == 0.0 and zero.hi == pytest.approx(0.2775, abs=1e-4)
    assert wilson(10, 10).hi == 1.0 and wilson(10, 10).lo == pytest.approx(0.7225, abs=1e-4)
    with pytest.raises(ValueError):
        wilson(3, 2)
    with pytest.raises(ValueError):
        wilson(0, 0)


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(4, 1, 1) == 0.25  # pass@1 is the sample success rate
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - math.comb(7, 5) / math.comb(10, 5))
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_bootstrap_mean_is_seeded_and_close_to_the_normal_interval():
    x = np.random.default_rng(0).normal(0.3, 1.0, size=400)
    a, b = bootstrap_mean(x, seed=1), bootstrap_mean(x, seed=1)
    assert a == b and a.value == pytest.approx(float(x.mean()))
    se = float(x.std(ddof=1)) / math.sqrt(x.size)
    assert a.half_width == pytest.approx(1.96 * se, rel=0.1)
    assert a.lo < a.value < a.hi
    assert bootstrap_mean([0.5]) == Estimate(0.5, 0.5, 0.5, 1)
    assert bootstrap_mean([1.0, 1.0, 1.0]).half_width == 0.0


def test_paired_permutation_test_exact_cases():
    # differences [1, 1, 1]: of the 8 sign patterns only +++ and --- reach |sum| 3
    assert paired_permutation_p([2, 2, 2], [1, 1, 1]) == pytest.approx(2 / 8)
    # [1, 2, 3, 4]: |sum| 10 only for all-plus and all-minus
    assert paired_permutation_p([1, 2, 3, 4], [0, 0, 0, 0]) == pytest.approx(2 / 16)
    # zero differences carry no information; identical modes give p = 1
    assert paired_permutation_p([1, 0, 1], [1, 0, 1]) == 1.0
    assert paired_permutation_p([1, 5], [0, 5]) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        paired_permutation_p([1, 2], [1])


def test_paired_permutation_test_monte_carlo_separates_real_differences():
    rng = np.random.default_rng(0)
    base = rng.normal(size=40)
    assert paired_permutation_p(base + 1.0, base, n_perm=20_000) < 0.001
    assert paired_permutation_p(base + rng.normal(0, 0.1, 40), base, n_perm=20_000) > 0.01


def test_estimate_formats_with_the_larger_side():
    assert Estimate(0.41, 0.36, 0.46, 10).fmt() == "0.41 ± 0.05"
    assert Estimate(0.9, 0.7, 0.95, 10).fmt() == "0.90 ± 0.20"


def test_t_interval_by_hand_and_against_the_bootstrap():
    # [0.1, 0.2, 0.3]: mean 0.2, s 0.1, half 4.3027 * 0.1 / sqrt(3) = 0.24841
    e = t_mean([0.1, 0.2, 0.3])
    assert (e.value, e.n) == (pytest.approx(0.2), 3)
    assert (e.lo, e.hi) == (pytest.approx(0.2 - 0.248414, abs=1e-6), pytest.approx(0.2 + 0.248414, abs=1e-6))
    assert e.fmt() == "0.20 ± 0.25"
    # the percentile bootstrap of three values cannot leave their range
    b = bootstrap_mean([0.1, 0.2, 0.3])
    assert (b.lo, b.hi) == (pytest.approx(0.1), pytest.approx(0.3))
    # [1, 3]: mean 2, s sqrt(2), half 12.7062 * sqrt(2) / sqrt(2)
    assert t_mean([1.0, 3.0]).hi == pytest.approx(2 + 12.7062047)
    one = t_mean([0.4])  # one seed: no interval at all, not a point
    assert one.value == 0.4 and (one.lo, one.hi) == (-math.inf, math.inf)
    assert t_mean([0.5, 0.5, 0.5]).half_width == 0.0
    with pytest.raises(ValueError):
        t_mean([])


def test_t_quantiles_from_the_table_and_the_expansion():
    assert (t975(1), t975(2), t975(30)) == (12.7062047, 4.3026527, 2.0422725)
    assert t975(40) == pytest.approx(2.0210754, abs=1e-5) and t975(120) == pytest.approx(1.9799304, abs=1e-5)
    assert t975(31) < t975(30) and t975(10**6) == pytest.approx(1.959964, abs=1e-5)
    with pytest.raises(ValueError):
        t975(0)
