"""Amplification by shuffling (Feldman, McMillan and Talwar, "Hiding among the clones", Thm 3.1).

n reports of an eps0-LDP randomizer, uniformly shuffled, are (eps, delta)-DP with

    eps = ln(1 + (e^eps0 - 1)/(e^eps0 + 1) * (8 sqrt(e^eps0 ln(4/delta)) / sqrt(n) + 8 e^eps0 / n))

provided ``eps0 <= ln(n / (16 ln(2/delta)))``. Outside that range the theorem says nothing and
:func:`shuffle_epsilon` raises. For (eps0, delta0) randomizers the same eps holds with
``delta_total = delta + (e^eps + 1)(1 + e^{-eps0}/2) n delta0`` (the paper's extension to
approximate local randomizers).
"""

from __future__ import annotations

import math

from jfed._validation import check_int_range, check_nonnegative, check_open_unit, check_positive


def shuffle_validity_limit(n: int, delta: float) -> float:
    """Largest eps0 the closed-form bound covers: ``ln(n / (16 ln(2/delta)))``."""
    n = check_int_range("n", n, 1, 10**15)
    delta = check_open_unit("delta", delta)
    return math.log(n / (16.0 * math.log(2.0 / delta)))


def shuffle_epsilon(
    epsilon0: float, n: int, delta: float, delta0: float = 0.0
) -> tuple[float, float]:
    """Central ``(eps, delta_total)`` of n shuffled (eps0, delta0)-LDP reports.

    Args:
      epsilon0: the local randomizer's eps0 (> 0).
      n: number of shuffled reports.
      delta: the delta spent by the amplification itself, in (0, 1).
      delta0: the local randomizer's delta0 (0 for pure LDP).

    Raises:
      ValueError: eps0 outside ``(0, ln(n / (16 ln(2/delta)))]``.
    """
    epsilon0 = check_positive("epsilon0", epsilon0)
    delta0 = check_nonnegative("delta0", delta0)
    limit = shuffle_validity_limit(n, delta)
    if epsilon0 > limit:
        raise ValueError(
            f"expected epsilon0 <= ln(n / (16 ln(2/delta))) = {limit:.4g} for the shuffling bound "
            f"(n={n}, delta={delta}), got epsilon0={epsilon0}; the bound does not apply"
        )
    e0 = math.exp(epsilon0)
    inner = 8.0 * math.sqrt(e0 * math.log(4.0 / delta)) / math.sqrt(n) + 8.0 * e0 / n
    epsilon = math.log1p((e0 - 1.0) / (e0 + 1.0) * inner)
    delta_total = delta + (math.exp(epsilon) + 1.0) * (1.0 + math.exp(-epsilon0) / 2.0) * n * delta0
    return epsilon, delta_total
