"""keynorm_jax/study/stats.py against values worked out by hand or printed in standard tables."""

import math

import numpy as np
import pytest

from keynorm_jax.study import stats


def test_wilson_and_sign_test_by_hand():
  lo, hi = stats.wilson(0, 20)
  assert lo == 0.0 and hi == pytest.approx(0.1611, abs=1e-4)   # z^2 / (n + z^2)
  lo, hi = stats.wilson(10, 20)
  assert (lo, hi) == pytest.approx((0.2993, 0.7007), abs=1e-4)
  assert stats.sign_test(8, 0) == pytest.approx((1 / 256, 2 / 256))
  assert stats.sign_test(4, 1)[0] == pytest.approx(6 / 32)


@pytest.mark.parametrize("df, t, cdf", [
    (1, 1.0, 0.75),                       # Cauchy: 1/2 + atan(t) / pi
    (2, 2.0, 0.5 + 2.0 / (2 * math.sqrt(2 + 4.0))),   # 1/2 + t / (2 sqrt(2 + t^2))
    (7, 0.0, 0.5),
    (7, -1.0, (1 - 0.64938) / 2),      # P(|T| < 1) at 7 df, by numerical integration
])
def test_student_t_cdf_against_closed_forms(df, t, cdf):
  assert stats.student_t_cdf(t, df) == pytest.approx(cdf, abs=2e-4)


@pytest.mark.parametrize("df, quantile", [(1, 12.7062), (7, 2.3646), (30, 2.0423)])
def test_student_t_quantiles_match_the_printed_table(df, quantile):
  assert stats.student_t_quantile(0.975, df) == pytest.approx(quantile, abs=1e-4)


def test_t_interval_by_hand():
  d = [0.1, 0.3, -0.1, 0.2]   # mean 0.125, sd 0.17078, 3 df: t = 3.1824
  mean, lo, hi = stats.t_interval(d)
  half = 3.1824 * np.std(d, ddof=1) / 2
  assert (mean, lo, hi) == pytest.approx((0.125, 0.125 - half, 0.125 + half), abs=1e-4)
  with pytest.raises(ValueError, match="at least two"):
    stats.t_interval([0.5])


def test_paired_permutation_p_by_hand():
  # All 8 positive: only the observed signs and their mirror are as extreme: 2 / 256.
  assert stats.paired_permutation_p([0.1 * (i + 1) for i in range(8)]) == 2 / 256
  # [1, 1, -1]: mean 1/3; the flips with |sum| >= 1 are all 8 (sums are +-1 or +-3).
  assert stats.paired_permutation_p([1.0, 1.0, -1.0]) == 1.0
  # [3, 1, 1]: sums +-5 (2 flips), +-3 (2), +-1 (4): |sum| >= 5 in 2 of 8.
  assert stats.paired_permutation_p([3.0, 1.0, 1.0]) == 2 / 8
