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

import jax
import jax.numpy as jnp
import numpy as np

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


# Largest number of shuffled reports the numerical bound sums over in full (its pair of
# distributions has about n^2 / 2 outcomes).
CLONES_MAX_REPORTS = 2048


def clones_pair(epsilon0: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The pair of distributions that dominates n shuffled eps0-LDP reports (Feldman, McMillan
    and Talwar, "Hiding among the clones", Thm 3.2): with ``C ~ Bin(n - 1, e^-eps0)``,
    ``A ~ Bin(C, 1/2)`` and ``D ~ Bern(e^eps0 / (e^eps0 + 1))``,

        P = (A + D, C - A + 1 - D),    Q = (A + 1 - D, C - A + D).

    For every divergence that is jointly convex and satisfies post-processing (hockey-stick,
    hence every (eps, delta)), the shuffled reports of two neighbouring data sets are no further
    apart than P and Q, whatever the randomizers and the other n - 1 clients' data.

    Returns:
      ``(p, q)``, each ``f64[n, n + 1]``: the probability of outcome ``(c, a)`` (``C = c`` and
      first coordinate ``a``; zero where ``a > c + 1``).
    """
    epsilon0 = check_positive("epsilon0", epsilon0)
    n = check_int_range("n", n, 1, CLONES_MAX_REPORTS)
    from scipy import stats

    c = np.arange(n)[:, None]
    a = np.arange(n + 1)[None, :]
    clones = stats.binom.pmf(c, n - 1, math.exp(-epsilon0))
    heads = stats.binom.pmf(a, c, 0.5)  # P(A = a | C = c)
    heads_before = stats.binom.pmf(a - 1, c, 0.5)  # P(A = a - 1 | C = c)
    keep = math.exp(epsilon0) / (math.exp(epsilon0) + 1.0)
    p = clones * (heads_before * keep + heads * (1.0 - keep))
    q = clones * (heads_before * (1.0 - keep) + heads * keep)
    return p, q


def clones_delta(epsilon0: float, n: int, epsilon: float) -> float:
    """delta(eps) of ONE shuffle of n eps0-LDP reports by the numerical bound: the hockey-stick
    divergence ``sum_o (P(o) - e^eps Q(o))_+`` of :func:`clones_pair`."""
    p, q = clones_pair(epsilon0, n)
    return float(np.sum(np.maximum(p - math.exp(check_nonnegative("epsilon", epsilon)) * q, 0.0)))


# Compositions of up to this many shuffles go through dp-accounting's PLD (tight); beyond, its
# grid grows with the composed loss (about 10^6 shuffles of 10 reports exhausted 24 GB here) and
# the Renyi divergences of the pair are composed instead (an upper bound, at any count).
CLONES_PLD_MAX_COUNT = 64


def clones_renyi(epsilon0: float, n: int, orders) -> np.ndarray:
    """``f64[len(orders)]``: the Renyi divergence of each order of :func:`clones_pair`, the larger
    of ``D_a(P || Q)`` and ``D_a(Q || P)`` (P and Q share their support)."""
    p, q = clones_pair(epsilon0, n)
    support = (p > 0) & (q > 0)
    log_p, log_q = np.log(p[support]), np.log(q[support])
    from scipy.special import logsumexp

    divergences = []
    for order in orders:
        forward = logsumexp(order * log_p + (1.0 - order) * log_q) / (order - 1.0)
        backward = logsumexp(order * log_q + (1.0 - order) * log_p) / (order - 1.0)
        divergences.append(max(forward, backward, 0.0))
    return np.asarray(divergences)


def clones_epsilon(epsilon0: float, n: int, delta: float, count: int = 1) -> float:
    """Central eps at ``delta`` of ``count`` shuffles, each of n eps0-LDP reports of which one
    is the protected client's (e.g. one per weight position and round), by the numerical bound
    of :func:`clones_pair` composed ``count`` times: by dp-accounting's privacy loss
    distribution up to :data:`CLONES_PLD_MAX_COUNT` shuffles, beyond by Renyi DP (the pair's
    divergences at dp-accounting's default orders, converted by its ``compute_epsilon``). Never
    above the optimal composition of the ``count`` local reports themselves (what the server
    would learn without the shuffle), of which the shuffled transcript is a post-processing.

    Unlike :func:`shuffle_epsilon` this holds at every n and eps0; it is a statement about a
    trusted shuffler (the server sees each shuffle's multiset, not who sent what)."""
    from jfed.privacy.accountants import randomized_response_composition_epsilon

    delta = check_open_unit("delta", delta)
    count = check_int_range("count", count, 1, 10**12)
    local = randomized_response_composition_epsilon(epsilon0, count, delta)
    if count <= CLONES_PLD_MAX_COUNT:
        from dp_accounting.pld import privacy_loss_distribution

        p, q = clones_pair(epsilon0, n)
        outcomes = np.argwhere((p > 0) | (q > 0))
        upper = {int(c * (n + 1) + a): math.log(p[c, a]) for c, a in outcomes if p[c, a] > 0}
        lower = {int(c * (n + 1) + a): math.log(q[c, a]) for c, a in outcomes if q[c, a] > 0}
        pld = privacy_loss_distribution.from_two_probability_mass_functions(lower, upper)
        return min(local, float(pld.self_compose(count).get_epsilon_for_delta(delta)))
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    orders = rdp.DEFAULT_RDP_ORDERS
    composed = count * clones_renyi(epsilon0, n, orders)
    epsilon, _ = rdp.compute_epsilon(orders, composed, delta)
    return min(local, float(epsilon))


def split_and_shuffle(key: jax.Array, reports: jax.Array) -> jax.Array:
    """What the server receives from a split and shuffle: ``reports: f32[k, P]`` (row j from one
    client) become ``f32[P, k]``, every position's k values in a random order of its own (a
    uniform permutation per position, independent across positions), so no position's value
    can be linked to a client or to another position. The mean of a position does not change:
    a server that only averages needs no shuffle."""
    k, positions = reports.shape
    order = jnp.argsort(jax.random.uniform(key, (positions, k)), axis=1)
    return jnp.take_along_axis(reports.T, order, axis=1)
