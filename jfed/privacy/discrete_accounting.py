"""The guarantees of the discrete mechanisms: their events, RDP curves, exact 1-D deltas, and an
RDP accountant that composes them.

Host side, float64. dp-accounting has ``DiscreteLaplaceDpEvent`` (its PLD accountant composes it,
add-or-remove) but no discrete Gaussian or Skellam event, so they are defined here in the style of
``dp_accounting.dp_event``:

- :class:`DiscreteGaussianDpEvent`: an integer-valued query plus discrete Gaussian noise, either
  drawn by the server (``shares = 1``, Canonne, Kamath and Steinke 2020) or as the sum of
  ``shares`` clients' independent shares (the distributed discrete Gaussian of Kairouz, Liu and
  Steinke 2021, whose sum is only close to a discrete Gaussian: their ``tau`` term).
- :class:`SkellamDpEvent`: an integer-valued query plus symmetric Skellam noise (Agarwal, Kairouz
  and Liu 2021), closed under sums, so it does not matter how many shares made it.

All sensitivities are in grid units (the integers the noise is added to), and every event states
its noise through ``noise_multiplier`` ``z``: the variance of the whole noise per coordinate is at
least ``(z l2_sensitivity)^2`` (the jfed convention, z = noise std / sensitivity).

What each accountant does with them (:func:`rdp_curve`, :func:`zcdp_event`):

=======================  ====================================================================
event                    guarantee
=======================  ====================================================================
discrete Gaussian        ``rho = Delta_2^2 / (2 sigma^2) = 1 / (2 z^2)``-zCDP in any dimension
(``shares = 1``)         (CKS Theorem 14), as the continuous Gaussian's; RDP ``alpha rho``. In
                         one dimension the exact delta(eps) by summation
                         (:func:`discrete_gaussian_delta`, CKS Theorem 7), which dp-accounting's
                         PLD of the discrete Gaussian reproduces (tested).
distributed discrete     RDP ``min(alpha/2 l2^2 + tau d, alpha/2 (l2^2 + 2 l1 tau + tau^2 d),
Gaussian (``shares =     alpha/2 (l2 + sqrt(d) tau)^2)``, ``l2 = 1/z``, ``l1 = Delta_1 / sigma``,
n``)                     ``tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 s^2 k / (k + 1))`` with
                         ``s^2 = sigma^2 / n`` a share's variance (KLS Theorem 1, Proposition 14).
Skellam                  RDP ``alpha Delta_2^2 / (2 mu) + min(((2 alpha - 1) Delta_2^2 + 6
                         Delta_1) / (4 mu^2), 3 Delta_1 / (2 mu))``, ``mu`` the variance
                         (AKL Theorem 3.5 / Corollary 3.6); integer orders.
discrete Laplace         pure ``eps = a Delta_1`` (``DiscreteLaplaceDpEvent(a, Delta_1)``);
                         RDP ``min(eps, alpha eps^2 / 2)``.
=======================  ====================================================================

Poisson sampling of any of them (``PoissonSampledDpEvent``) is amplified by Zhu and Wang's (2019)
general upper bound for integer orders (:func:`poisson_subsampled_rdp`), as google-research's
distributed-DP accounting does; it holds for any mechanism with the given RDP curve. The
discrete Gaussian's curve equals the continuous Gaussian's, but the Gaussian's sharper subsampled
analysis (Mironov et al. 2019) is proved for the continuous Gaussian only, so it is not used.

The central discrete Gaussian can also be certified by the continuous Gaussian's accountants
(PLD, any sampling and adjacency they cover): ``N_Z(0, sigma^2)`` is, to within a total
variation of 10^-77 per coordinate, the continuous ``N(0, sigma^2 - 9)`` followed by a
data-independent randomization (:func:`coupled_gaussian`, :func:`coupling_total_variation`),
so the continuous mechanism's (eps, delta) holds for the discrete one with ``(1 + e^eps)`` times
the run's total variation added to delta.

:class:`DiscreteRdpAccountant` composes all of these (and Gaussian, Poisson-subsampled Gaussian
and zCDP events, as dp-accounting's RDP accountant does) over integer orders and converts with
dp-accounting's RDP-to-(eps, delta) conversion; :class:`jfed.privacy.DiscreteRdp` makes it in the
one accountant table. Stated for the adjacency of the events: the aggregators that emit them say
which (add-or-remove for the central ones, zero-out for the distributed ones). The zCDP
accountant takes them too, through :func:`zcdp_event`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import attr
import numpy as np
from dp_accounting import dp_event as events
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib
from scipy import special

from jfed._validation import UsageError, check_nonnegative, check_open_unit, check_positive
from jfed.privacy._accountant_base import Walker
from jfed.privacy.guarantee import Adjacency

Orders = Sequence[float] | np.ndarray
"""RDP orders: a sequence or an array of numbers > 1."""

ORDERS = (*range(2, 257), 320, 384, 512, 768, 1024)
"""Integer RDP orders (the general subsampling bound needs integers)."""


@attr.s(frozen=True, slots=True, auto_attribs=True)
class DiscreteGaussianDpEvent(events.DpEvent):
    """An integer-valued query plus discrete Gaussian noise per coordinate.

    The query's outputs on neighbouring inputs differ by an integer vector of L2 norm at most
    ``l2_sensitivity`` and L1 norm at most ``l1_sensitivity``; the noise is the sum of ``shares``
    independent vectors of ``N_Z(0, s^2)`` coordinates with ``shares s^2 >= (z
    l2_sensitivity)^2`` (one share: the server's; several: clients' shares summed by secure
    aggregation, where ``shares`` is the least number of shares in any release).

    Attributes:
      noise_multiplier: z > 0.
      l2_sensitivity: Delta_2 > 0 (grid units; an integer's square root in practice).
      l1_sensitivity: Delta_1 > 0 (grid units); used by the distributed bound only.
      dimension: d >= 1, the number of coordinates.
      shares: n >= 1.
    """

    noise_multiplier: float
    l2_sensitivity: float
    l1_sensitivity: float
    dimension: int
    shares: int = 1


@attr.s(frozen=True, slots=True, auto_attribs=True)
class SkellamDpEvent(events.DpEvent):
    """An integer-valued query plus symmetric Skellam noise (``Poisson(mu/2) - Poisson(mu/2)``,
    variance ``mu``) per coordinate, ``mu >= (z l2_sensitivity)^2``; a sum of Skellam shares is
    Skellam, so shares need no counting.

    Attributes:
      noise_multiplier: z > 0.
      l2_sensitivity: Delta_2 > 0 (grid units).
      l1_sensitivity: Delta_1 > 0 (grid units).
      dimension: d >= 1 (not used by the bound; stated for the record).
    """

    noise_multiplier: float
    l2_sensitivity: float
    l1_sensitivity: float
    dimension: int


def _check_event(event) -> None:
    check_positive("noise_multiplier", event.noise_multiplier)
    check_positive("l2_sensitivity", event.l2_sensitivity)
    check_positive("l1_sensitivity", event.l1_sensitivity)
    if int(event.dimension) != event.dimension or event.dimension < 1:
        raise ValueError(f"expected dimension >= 1 (integer), got dimension={event.dimension}")


# ------------------------------------------------------------------------------- RDP curves


def distributed_tau(share_variance: float, shares: int) -> float:
    """Kairouz, Liu and Steinke's ``tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 s^2 k / (k + 1))``
    (Theorem 1): how far a sum of ``n`` discrete Gaussians of variance parameter ``s^2`` is from
    one discrete Gaussian; 0 for one share."""
    k = np.arange(1, int(shares), dtype=np.float64)
    return float(10.0 * np.sum(np.exp(-2.0 * math.pi**2 * share_variance * k / (k + 1.0))))


def discrete_gaussian_rdp(event: DiscreteGaussianDpEvent, orders: Orders) -> np.ndarray:
    """RDP of one release at ``orders`` (see the module table)."""
    _check_event(event)
    alphas = np.asarray(orders, np.float64)
    l2_scale = 1.0 / event.noise_multiplier
    if event.shares == 1:
        return alphas * l2_scale**2 / 2.0
    variance = (event.noise_multiplier * event.l2_sensitivity) ** 2
    tau = distributed_tau(variance / event.shares, event.shares)
    l1_scale = event.l1_sensitivity / math.sqrt(variance)
    dimension = event.dimension
    return np.minimum.reduce([
        alphas / 2.0 * l2_scale**2 + tau * dimension,
        alphas / 2.0 * (l2_scale**2 + 2.0 * l1_scale * tau + tau**2 * dimension),
        alphas / 2.0 * (l2_scale + math.sqrt(dimension) * tau) ** 2,
    ])  # fmt: skip


def skellam_rdp(event: SkellamDpEvent, orders: Orders) -> np.ndarray:
    """RDP of one Skellam release at ``orders`` (AKL 2021, for integer orders > 1)."""
    _check_event(event)
    alphas = np.asarray(orders, np.float64)
    variance = (event.noise_multiplier * event.l2_sensitivity) ** 2
    squared, l1 = event.l2_sensitivity**2, event.l1_sensitivity
    gaussian = alphas * squared / (2.0 * variance)
    surcharge = np.minimum(
        ((2.0 * alphas - 1.0) * squared + 6.0 * l1) / (4.0 * variance**2),
        3.0 * l1 / (2.0 * variance),
    )
    return gaussian + surcharge


def pure_rdp(epsilon: float, orders: Orders) -> np.ndarray:
    """RDP of a pure eps-DP release: ``min(eps, alpha eps^2 / 2)`` (Bun and Steinke 2016)."""
    return np.minimum(epsilon, np.asarray(orders, np.float64) * epsilon**2 / 2.0)


def discrete_laplace_epsilon(event: events.DiscreteLaplaceDpEvent) -> float:
    """Pure eps of ``DiscreteLaplaceDpEvent(a, Delta_1)``: ``a Delta_1`` (any adjacency whose
    neighbouring outputs differ by at most Delta_1 in L1)."""
    return float(event.noise_parameter) * float(event.sensitivity)


def rdp_curve(event: events.DpEvent, orders: Orders) -> np.ndarray:
    """RDP at ``orders`` of one unsampled discrete event (or a discrete Laplace)."""
    if isinstance(event, DiscreteGaussianDpEvent):
        return discrete_gaussian_rdp(event, orders)
    if isinstance(event, SkellamDpEvent):
        return skellam_rdp(event, orders)
    if isinstance(event, events.DiscreteLaplaceDpEvent):
        return pure_rdp(discrete_laplace_epsilon(event), orders)
    raise ValueError(f"no discrete RDP curve for {type(event).__name__}")


def poisson_subsampled_rdp(
    rdp: Callable[[np.ndarray], Any], sampling_rate: float, orders: Orders
) -> np.ndarray:
    """RDP at integer ``orders`` of a mechanism whose RDP curve is ``rdp`` (a function of an
    array of integer orders) run on a Poisson sample of rate q: Zhu and Wang's (2019) general
    upper bound, taken with the ``min`` of the unsampled curve,

        (1 / (alpha - 1)) log[(1 - q)^(alpha - 1) (alpha q - q + 1)
            + C(alpha, 2) q^2 (1 - q)^(alpha - 2) e^eps(2)
            + 3 sum_{l=3}^alpha C(alpha, l) (1 - q)^(alpha - l) q^l e^((l - 1) eps(l))],

    summed in log space (``scipy.special.logsumexp``)."""
    q = float(sampling_rate)
    if not 0.0 < q <= 1.0:
        raise ValueError(f"expected sampling_rate in (0, 1], got sampling_rate={sampling_rate}")
    given = np.asarray(orders)
    if np.any(given < 2) or np.any(given != np.round(given)):
        raise ValueError(f"expected integer orders >= 2, got {given}")
    alphas = given.astype(np.int64)
    top = int(alphas.max())
    curve = np.concatenate([[0.0, 0.0], np.asarray(rdp(np.arange(2, top + 1)), np.float64)])
    unsampled = curve[alphas]
    if q == 1.0:
        return unsampled
    result = []
    for alpha in alphas:
        levels = np.arange(3, alpha + 1, dtype=np.float64)
        log_binomial = (
            special.gammaln(alpha + 1) - special.gammaln(levels + 1)
            - special.gammaln(alpha - levels + 1)
        )  # fmt: skip
        log_terms = np.concatenate([
            [0.0, float(curve[2])],
            (levels - 1) * curve[3 : alpha + 1] + log_binomial
            + (alpha - levels) * math.log1p(-q) + levels * math.log(q),
        ])  # fmt: skip
        weights = np.concatenate([
            [(1 - q) ** (alpha - 1) * (alpha * q - q + 1),
             special.comb(alpha, 2) * q**2 * (1 - q) ** (alpha - 2)],
            np.full(levels.shape, 3.0),
        ])  # fmt: skip
        result.append(special.logsumexp(log_terms, b=weights) / (alpha - 1))
    return np.minimum(unsampled, np.asarray(result))


def zcdp_event(event: events.DpEvent) -> events.ZCDpEvent:
    """The event as ``ZCDpEvent(rho, xi)`` (RDP ``xi + rho alpha`` at every order), for zCDP
    accountants: the discrete Gaussian ``rho = 1 / (2 z^2)``; the distributed one the better of
    its two pure-rho bounds (``(1/z + sqrt(d) tau)^2 / 2`` and ``(1/z^2 + 2 l1 tau + tau^2 d) /
    2``); Skellam ``rho = Delta^2 / (2 mu) + Delta^2 / (2 mu^2)``, ``xi = (6 Delta_1 -
    Delta^2)^+ / (4 mu^2)``; a discrete Laplace ``rho = eps^2 / 2``."""
    if isinstance(event, DiscreteGaussianDpEvent):
        _check_event(event)
        l2_scale = 1.0 / event.noise_multiplier
        if event.shares == 1:
            return events.ZCDpEvent(rho=l2_scale**2 / 2.0)
        variance = (event.noise_multiplier * event.l2_sensitivity) ** 2
        tau = distributed_tau(variance / event.shares, event.shares)
        l1_scale = event.l1_sensitivity / math.sqrt(variance)
        rho = min(
            (l2_scale + math.sqrt(event.dimension) * tau) ** 2 / 2.0,
            (l2_scale**2 + 2.0 * l1_scale * tau + tau**2 * event.dimension) / 2.0,
        )
        return events.ZCDpEvent(rho=rho)
    if isinstance(event, SkellamDpEvent):
        _check_event(event)
        variance = (event.noise_multiplier * event.l2_sensitivity) ** 2
        squared = event.l2_sensitivity**2
        rho = squared / (2.0 * variance) + squared / (2.0 * variance**2)
        xi = max(0.0, (6.0 * event.l1_sensitivity - squared) / (4.0 * variance**2))
        return events.ZCDpEvent(rho=rho, xi=xi)
    if isinstance(event, events.DiscreteLaplaceDpEvent):
        return events.ZCDpEvent(rho=discrete_laplace_epsilon(event) ** 2 / 2.0)
    raise ValueError(f"no zCDP form for {type(event).__name__}")


# --------------------------------------------------------------------- exact 1-D discrete Gaussian


def discrete_gaussian_delta(epsilon: float, sigma_squared: float, sensitivity: int = 1) -> float:
    """Exact smallest delta for which one release ``x + N_Z(0, sigma^2)`` of an integer ``x``
    with ``|x - x'| <= sensitivity`` is (eps, delta)-DP (Canonne, Kamath and Steinke, Theorem 7):
    the largest, over integer shifts ``1 <= s <= sensitivity``, of
    ``sum_y max(0, P(y) - e^eps P(y - s))`` (the law is symmetric, so one direction suffices).

    Summed in float64 over ``|y| <= 40 sigma + 40 + s`` (the mass beyond is below 1e-340);
    relative error of order 1e-15 per term."""
    epsilon = check_nonnegative("epsilon", epsilon)
    sigma_squared = check_positive("sigma_squared", sigma_squared)
    if int(sensitivity) != sensitivity or sensitivity < 1:
        raise ValueError(f"expected an integer sensitivity >= 1, got {sensitivity}")
    from jfed.privacy.discrete import discrete_gaussian_log_pmf

    reach = int(40 * math.sqrt(sigma_squared)) + 40 + int(sensitivity)
    support = np.arange(-reach, reach + 1, dtype=np.float64)
    log_p = discrete_gaussian_log_pmf(support, sigma_squared)
    worst = 0.0
    for shift in range(1, int(sensitivity) + 1):
        log_q = discrete_gaussian_log_pmf(support - shift, sigma_squared)
        loss = log_p - log_q
        above = loss > epsilon
        terms = np.exp(log_p[above]) * -np.expm1(epsilon - loss[above])
        worst = max(worst, float(np.sum(terms)))
    return worst


def discrete_gaussian_epsilon(delta: float, sigma_squared: float, sensitivity: int = 1) -> float:
    """The least eps with :func:`discrete_gaussian_delta` ``<= delta`` (bisection to 1e-10)."""
    return _least_epsilon(discrete_gaussian_delta, delta, sigma_squared, sensitivity)


def discrete_gaussian_worst_delta(
    epsilon: float, sigma_squared: float, sensitivity: int = 1
) -> float:
    """:func:`discrete_gaussian_delta` computed through the law's lower tail (Canonne, Kamath and
    Steinke, Theorem 7), fast for large integer sensitivities: for a shift ``s`` the privacy
    loss ``(s^2 - 2 s y) / (2 sigma^2)`` exceeds eps exactly for ``y < s / 2 - eps sigma^2 / s``,
    so the shift's delta is ``F(y*) - e^eps F(y* - s)`` with ``F`` the pmf's running sum and
    ``y*`` the largest such integer; every shift ``1 <= s <= sensitivity`` costs one lookup.

    The largest over the shifts, as :func:`discrete_gaussian_delta` (equal to it within about
    1e-12 of the delta: the difference of two running sums)."""
    epsilon = check_nonnegative("epsilon", epsilon)
    sigma_squared = check_positive("sigma_squared", sigma_squared)
    if int(sensitivity) != sensitivity or sensitivity < 1:
        raise ValueError(f"expected an integer sensitivity >= 1, got {sensitivity}")
    from jfed.privacy.discrete import discrete_gaussian_log_pmf

    shifts = np.arange(1, int(sensitivity) + 1, dtype=np.float64)
    reach = int(40 * math.sqrt(sigma_squared)) + 40 + int(sensitivity)
    support = np.arange(-reach, reach + 1, dtype=np.float64)
    running = np.cumsum(np.exp(discrete_gaussian_log_pmf(support, sigma_squared)))
    # the largest integer y with (s^2 - 2 s y) / (2 sigma^2) > eps
    largest = np.ceil(shifts / 2.0 - epsilon * sigma_squared / shifts).astype(np.int64) - 1

    def below(y: np.ndarray) -> np.ndarray:  # P(Y <= y)
        index = np.clip(y + reach, -1, 2 * reach)
        return np.where(index < 0, 0.0, running[np.maximum(index, 0)])

    loss_at = (shifts**2 - 2.0 * shifts * largest) / (2.0 * sigma_squared)
    largest = np.where(loss_at > epsilon, largest, largest - 1)  # float rounding at the edge
    tail = below(largest - shifts.astype(np.int64))
    # e^eps tail in log space: e^eps alone overflows past eps = 709, and any term above 1 makes
    # the shift's delta negative (its first term is a probability), so it is capped there
    log_term = epsilon + np.log(np.where(tail > 0.0, tail, 1.0))
    scaled = np.where(tail > 0.0, np.exp(np.minimum(log_term, 1.0)), 0.0)
    deltas = below(largest) - scaled
    return float(max(0.0, np.max(deltas)))


def discrete_gaussian_worst_epsilon(
    delta: float, sigma_squared: float, sensitivity: int = 1
) -> float:
    """The least eps with :func:`discrete_gaussian_worst_delta` ``<= delta`` (bisection to
    1e-10): :func:`discrete_gaussian_epsilon`, fast for large integer sensitivities."""
    return _least_epsilon(discrete_gaussian_worst_delta, delta, sigma_squared, sensitivity)


def _least_epsilon(delta_of, delta: float, sigma_squared: float, sensitivity: int) -> float:
    delta = check_open_unit("delta", delta)
    low, high = 0.0, 1.0
    while delta_of(high, sigma_squared, sensitivity) > delta:
        high *= 2.0
    if delta_of(0.0, sigma_squared, sensitivity) <= delta:
        return 0.0
    while high - low > 1e-10 * max(1.0, high):
        middle = 0.5 * (low + high)
        if delta_of(middle, sigma_squared, sensitivity) <= delta:
            high = middle
        else:
            low = middle
    return high


# --------------------------------------------------------------------- the continuous coupling

COUPLING_VARIANCE = 9.0
"""``s^2`` of the coupling of ``N_Z(0, sigma^2)`` to the continuous ``N(0, sigma^2 - s^2)``
(:func:`coupled_gaussian`): it costs the continuous mechanism ``s^2`` of its variance (a relative
``9 / sigma^2``: 10^-6 on jfed's grids) and leaves a total variation of about ``2 e^{-2 pi^2
s^2}`` (10^-77) per coordinate."""


def coupling_total_variation(draws: int) -> float:
    """Upper bound on the total variation distance between ``draws`` coordinates of discrete
    Gaussian noise as jfed's sampler draws them (:func:`jfed.privacy.discrete.discrete_gaussian`,
    each ``N_Z(0, sigma^2)`` with ``sigma^2 > s^2`` = :data:`COUPLING_VARIANCE`) and the same
    coordinates drawn as ``K(N(0, sigma^2 - s^2))``: a continuous Gaussian followed by the
    kernel ``K(g)`` that draws an integer ``n`` with probability proportional to ``exp(-(n -
    g)^2 / (2 s^2))``, which commutes with integer shifts and reads no data.

    Per coordinate (``phi_v`` the ``N(0, v)`` density): ``K(N(0, sigma^2 - s^2))`` puts mass
    ``int phi_(sigma^2 - s^2)(g) phi_(s^2)(n - g) / (Z_s(g) / sqrt(2 pi s^2)) dg`` on ``n``, with
    ``Z_s(g) = sum_m exp(-(m - g)^2 / (2 s^2))``, and ``N_Z(0, sigma^2)`` puts ``phi_(sigma^2)(n)
    / c``, ``c = sum_m phi_(sigma^2)(m)``. By Poisson summation ``Z_s(g) / sqrt(2 pi s^2)`` and
    ``c`` lie within ``1 +- eta``, ``eta = 2 sum_(k >= 1) exp(-2 pi^2 s^2 k^2) <= 2 e^{-2 pi^2
    s^2} / (1 - e^{-6 pi^2 s^2})`` (``sigma^2 >= s^2``), and the convolution of the two
    Gaussian densities is ``phi_(sigma^2)``: both masses are ``phi_(sigma^2)(n)`` times a factor
    in ``[1 / (1 + eta), 1 / (1 - eta)]``, so their total variation is at most ``eta (1 + eta) /
    (1 - eta)^2``. The sampler's own law is the exact one conditioned on the int32 range, which
    adds :func:`jfed.privacy.discrete.int32_conditioning_mass` per coordinate (0 in float64).
    Total variation adds over independent coordinates and over the releases of a run (each
    release's noise is independent of the past given its input)."""
    from jfed.privacy.discrete import int32_conditioning_mass

    if int(draws) != draws or draws < 0:
        raise ValueError(f"expected an integer draws >= 0, got draws={draws}")
    tail = math.exp(-2.0 * math.pi**2 * COUPLING_VARIANCE)
    eta = 2.0 * tail / (1.0 - tail**3)
    per_coordinate = eta * (1.0 + eta) / (1.0 - eta) ** 2 + int32_conditioning_mass(16)
    return float(draws) * per_coordinate


def discrete_coordinates(event: events.DpEvent) -> int:
    """How many central discrete Gaussian coordinates ``event`` draws (every round's noise is
    drawn whatever the cohort's sampling; a self-composition counts each time): the draws whose
    total variation :func:`coupled_gaussian`'s coupling adds (:func:`coupling_total_variation`)."""
    if isinstance(event, DiscreteGaussianDpEvent):
        return int(event.dimension)
    if isinstance(event, events.SelfComposedDpEvent):
        return int(event.count) * discrete_coordinates(event.event)
    if isinstance(event, events.ComposedDpEvent):
        return sum(discrete_coordinates(part) for part in event.events)
    inner = getattr(event, "event", None)  # sampled events wrap one
    return 0 if inner is None else discrete_coordinates(inner)


def coupling_delta(epsilon: float, total_variation: float) -> float:
    """``(1 + e^eps) T``: what a coupling of total variation ``T`` (:func:`coupling_total_variation`
    over every coupled coordinate) adds to delta at ``epsilon``: a mechanism within ``T`` of one
    that is (eps, delta)-DP is (eps, delta + (1 + e^eps) T)-DP (the triangle inequality on both
    neighbours' output laws). ``epsilon`` is capped at 700 (e^700 is a float64)."""
    return (1.0 + math.exp(min(epsilon, 700.0))) * total_variation


def delta_after_coupling(epsilon: float, total_variation: float, delta: float) -> float:
    """``delta - coupling_delta(epsilon, total_variation)``: the delta an accountant certifies
    the coupled Gaussian at. Refused (``UsageError`` naming ``--epsilon``) where the coupling's
    share ``(1 + e^eps) T`` leaves none: ``e^eps`` grows past any delta (at eps = 1e6 the share
    is some 1e290), so the largest eps the exact noise certifies, ``ln(delta / T - 1)``, is said
    instead of a negative delta."""
    share = coupling_delta(epsilon, total_variation)
    check_coupling_share(epsilon, share, delta)
    return delta - share


def check_coupling_share(epsilon: float, share: float, delta: float) -> None:
    """Refuse (``UsageError`` naming ``--epsilon`` and the largest it certifies) a coupling's
    share of delta (:func:`coupling_delta` at ``epsilon``) that leaves no delta to certify."""
    if share < delta:
        return
    variation = share / (1.0 + math.exp(min(epsilon, 700.0)))  # T, as coupling_delta caps eps
    limit = math.log(delta / variation - 1.0) if 0 < variation < delta / 2 else 0.0
    raise UsageError(
        f"expected --epsilon below {limit:.4g} with exact grid noise at delta={delta:.3g}, got "
        f"--epsilon={epsilon:g}: the coupling that certifies the grid adds (1 + e^eps) T to "
        f"delta (T = {variation:.3g}), {share:.3g} here; lower --epsilon or use --noise float"
    )


def coupled_gaussian(event: events.DpEvent) -> events.DpEvent:
    """``event`` with every central discrete Gaussian (:class:`DiscreteGaussianDpEvent`, one
    share) replaced by the continuous Gaussian it is coupled to: ``GaussianDpEvent(z_1)``,
    ``z_1 = sqrt(z^2 Delta^2 - s^2) / Delta`` (variance ``sigma^2 - s^2``, ``s^2`` =
    :data:`COUPLING_VARIANCE`, at the event's L2 sensitivity Delta), inside any sampled,
    composed or parallel event.

    Why it certifies the discrete release: the discrete noise is, up to
    :func:`coupling_total_variation`, the continuous ``N(0, sigma^2 - s^2)`` followed by a
    randomization that reads no data and commutes with the integer query, i.e. a post-processing
    of the continuous Gaussian mechanism on the same integer query; so if an accountant gives
    the returned event (eps, delta), a run whose noise draws are ``T`` total variation away is
    (eps, delta + (1 + e^eps) T)-DP. The continuous mechanism's accounting holds for the integer
    query's sensitivity, under whatever sampling and adjacency the accountant models. Refused
    for distributed shares (their sum is not a discrete Gaussian) and for a variance at most
    ``s^2``."""
    if isinstance(event, DiscreteGaussianDpEvent):
        _check_event(event)
        if event.shares != 1:
            raise ValueError(
                f"a sum of {event.shares} discrete Gaussian shares is not coupled to one "
                "continuous Gaussian: account it with DiscreteRdp()"
            )
        variance = (event.noise_multiplier * event.l2_sensitivity) ** 2
        if variance <= COUPLING_VARIANCE:
            raise ValueError(
                f"a discrete Gaussian of variance {variance:.4g} grid units is coupled to a "
                f"continuous one only above {COUPLING_VARIANCE:g}: use a finer grid"
            )
        return events.GaussianDpEvent(
            math.sqrt(variance - COUPLING_VARIANCE) / event.l2_sensitivity
        )
    if not attr.has(type(event)):
        return event
    changes: dict[str, Any] = {}
    for field in attr.fields(type(event)):
        value = getattr(event, field.name)
        if isinstance(value, events.DpEvent):
            changes[field.name] = coupled_gaussian(value)
        elif isinstance(value, (list, tuple)) and any(isinstance(v, events.DpEvent) for v in value):
            changes[field.name] = type(value)(coupled_gaussian(v) for v in value)
    return attr.evolve(event, **changes) if changes else event


# ------------------------------------------------------------------------------- the accountant


_DISCRETE = (DiscreteGaussianDpEvent, SkellamDpEvent, events.DiscreteLaplaceDpEvent)


def _discrete_parts(event: events.DpEvent) -> list[events.DpEvent]:
    """The discrete events a ``ComposedDpEvent`` composes (flattened), or ``[]`` when it is not
    one or composes anything else."""
    if not isinstance(event, events.ComposedDpEvent):
        return []
    parts: list[events.DpEvent] = []
    for part in event.events:
        inner = _discrete_parts(part) if isinstance(part, events.ComposedDpEvent) else []
        if isinstance(part, _DISCRETE):
            parts.append(part)
        elif inner:
            parts.extend(inner)
        else:
            return []
    return parts


class DiscreteRdpAccountant(Walker):
    """An RDP accountant (integer orders, :data:`ORDERS`) for the discrete events, alone or
    Poisson-sampled, next to Gaussian, Poisson-subsampled Gaussian and zCDP events (the same
    curves as dp-accounting's RDP accountant) and discrete Laplace events; converts to (eps,
    delta) with dp-accounting's RDP-to-(eps, delta) conversion.

    The events' sensitivities are the distances between neighbouring outputs, which is how
    add-or-remove, zero-out (the distributed sums) and bounded adjacency read them; replace-one is
    refused (a clipped sum moves by twice its clip norm there, which these events do not say).
    Composed, self-composed, no-op and non-private events are walked as by jfed's other
    accountants (:class:`jfed.privacy._accountant_base.Walker`).

    Args:
      orders: integer RDP orders >= 2 (the general subsampling bound needs integers).
      adjacency: :class:`~jfed.privacy.Adjacency` (not ``REPLACE_ONE``).
    """

    def __init__(
        self, orders: Sequence[int] = ORDERS, adjacency: Adjacency | str = Adjacency.ADD_OR_REMOVE
    ) -> None:
        adjacency = Adjacency.of(adjacency)
        if adjacency is Adjacency.REPLACE_ONE:
            raise ValueError(
                "the discrete RDP accountant reads its events' sensitivities as the distance "
                "between neighbouring outputs (add-or-remove, zero-out or bounded adjacency); "
                "got adjacency='replace-one'"
            )
        super().__init__(adjacency)
        self._orders = np.asarray(orders, np.float64)
        self._rdp = np.zeros_like(self._orders)

    def _curve(self, event: events.DpEvent) -> np.ndarray | None:
        if isinstance(event, _DISCRETE):
            return rdp_curve(event, self._orders)
        if isinstance(event, events.GaussianDpEvent):
            if event.noise_multiplier == 0:
                return np.full_like(self._orders, np.inf)
            return rdp_lib._compute_rdp_poisson_subsampled_gaussian(
                1.0, event.noise_multiplier, self._orders
            )
        if isinstance(event, events.ZCDpEvent):
            return event.xi + event.rho * self._orders
        if isinstance(event, events.PoissonSampledDpEvent):
            inner = event.event
            q = event.sampling_probability
            if isinstance(inner, events.GaussianDpEvent) and inner.noise_multiplier > 0:
                return rdp_lib._compute_rdp_poisson_subsampled_gaussian(
                    q, inner.noise_multiplier, self._orders
                )
            if q == 0:
                return np.zeros_like(self._orders)
            if isinstance(inner, _DISCRETE):
                return poisson_subsampled_rdp(
                    lambda alphas: rdp_curve(inner, alphas), q, self._orders.astype(int)
                )
            parts = _discrete_parts(inner)
            if parts:
                # one sample, several releases on it (adaptive clipping's sum and count): the
                # joint mechanism's curve is the sum of theirs, and the general bound holds for
                # any mechanism with that curve
                return poisson_subsampled_rdp(
                    lambda alphas: sum(rdp_curve(part, alphas) for part in parts), q,
                    self._orders.astype(int),
                )  # fmt: skip
        return None

    def _leaf(self, event: events.DpEvent, count: int, do_compose: bool) -> str | None:
        curve = self._curve(event)
        if curve is None:
            return f"the discrete RDP accountant cannot compose {type(event).__name__}"
        if do_compose:
            self._rdp = self._rdp + count * curve
        return None

    def _epsilon(self, delta: float) -> float:
        return float(rdp_lib.compute_epsilon(self._orders, self._rdp, delta)[0])

    def _delta(self, epsilon: float) -> float:
        return float(rdp_lib.compute_delta(self._orders, self._rdp, epsilon)[0])
