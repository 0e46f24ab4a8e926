"""The study's statistics, in one place: intervals and exact tests over a handful of runs.

Plain Python (math only): the counts are small (20 prompts a cell, 8 pairs), so every test here is
exact or a closed form, and each is checked by hand in tests/test_stats.py.
"""

import itertools
import math
import statistics


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
  """The 95% Wilson score interval of k successes in n trials, as fractions."""
  p = k / n
  centre = (p + z * z / (2 * n)) / (1 + z * z / n)
  half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
  return max(0.0, centre - half), min(1.0, centre + half)


def sign_test(wins: int, losses: int) -> tuple[float, float]:
  """Exact sign test of `wins` against `losses`: (one-sided p for wins, two-sided p)."""
  n = wins + losses
  one = sum(math.comb(n, k) for k in range(wins, n + 1)) / 2 ** n
  return one, min(1.0, 2 * min(one, 1 - one + math.comb(n, wins) / 2 ** n))


def student_t_cdf(t: float, df: int) -> float:
  """P(T <= t) for Student's t with `df` degrees of freedom, from the regularized incomplete beta
  function I_x(df/2, 1/2) with x = df / (df + t^2), by its continued fraction."""
  x = df / (df + t * t)
  tail = 0.5 * _incomplete_beta(x, df / 2, 0.5)
  return 1.0 - tail if t > 0 else tail


def _incomplete_beta(x: float, a: float, b: float) -> float:
  """I_x(a, b) (Numerical Recipes' continued fraction, Lentz's method)."""
  if x <= 0.0:
    return 0.0
  if x >= 1.0:
    return 1.0
  front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                   + a * math.log(x) + b * math.log1p(-x))
  if x > (a + 1) / (a + b + 2):
    return 1.0 - _incomplete_beta(1.0 - x, b, a)
  tiny = 1e-300
  c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
  d = 1.0 / (d if abs(d) > tiny else tiny)
  f = d
  for m in range(1, 300):
    for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                      -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
      d = 1.0 + numerator * d
      d = 1.0 / (d if abs(d) > tiny else tiny)
      c = 1.0 + numerator / c
      c = c if abs(c) > tiny else tiny
      f *= c * d
    if abs(c * d - 1.0) < 1e-15:
      break
  return front * f / a


def student_t_quantile(p: float, df: int) -> float:
  """The t with P(T <= t) = p (0 < p < 1), by bisection on student_t_cdf."""
  low, high = -1e4, 1e4
  for _ in range(200):
    middle = (low + high) / 2
    low, high = (middle, high) if student_t_cdf(middle, df) < p else (low, middle)
  return (low + high) / 2


def t_interval(differences, level: float = 0.95) -> tuple[float, float, float]:
  """(mean, low, high): the mean of paired differences and its Student-t interval (n - 1 degrees
  of freedom; needs two differences or more)."""
  n = len(differences)
  if n < 2:
    raise ValueError(f"an interval needs at least two differences, got {n}.")
  mean = statistics.fmean(differences)
  half = (student_t_quantile(0.5 + level / 2, n - 1) * statistics.stdev(differences)
          / math.sqrt(n))
  return mean, mean - half, mean + half


def paired_permutation_p(differences) -> float:
  """Exact two-sided p of a paired permutation test: the share of the 2^n sign flips of the
  differences whose mean is at least as far from 0 as the observed mean."""
  observed = abs(sum(differences))
  flips = list(itertools.product((1, -1), repeat=len(differences)))
  extreme = sum(abs(sum(s * d for s, d in zip(signs, differences))) >= observed - 1e-12
                for signs in flips)
  return extreme / len(flips)
