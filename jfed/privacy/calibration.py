"""Noise calibration for a target (eps, delta): one target, or a whole eps grid at once.

- Closed forms (zCDP, classic, analytic Gaussian) are vectorised: a grid costs about one call.
- Subsampled Gaussian over many steps (RDP / PLD via ``dp_accounting``): one target is calibrated
  by ``dp_accounting.calibrate_dp_mechanism`` (bisection on the noise multiplier). A grid of
  targets reuses work: eps(noise) is evaluated on a shared log-spaced grid of noise multipliers,
  inverted by monotone (PCHIP) interpolation of log noise against log eps, and refined where a
  check at interval midpoints disagrees with the interpolant by more than ``tolerance``. The
  answers are then raised by the largest disagreement still seen, so every returned noise is at
  least the exact one up to that tolerance (conservative).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.interpolate import PchipInterpolator

from jfed._validation import check_open_unit, check_positive
from jfed.catalog import CALIBRATION_ACCOUNTANTS
from jfed.privacy import gaussian, zcdp

# doublings / halvings from a noise multiplier of 1 before giving up: 2^+-40 covers every noise
# a guarantee can use, and a failed search stops in seconds rather than running on
_MAX_BRACKET_STEPS = 40


def _event_factory(sampling_rate, steps, sampling, dataset_size):
    from jfed.privacy.accountants import subsampled_gaussian_event

    def make_event(noise_multiplier: float):
        return subsampled_gaussian_event(
            noise_multiplier, sampling_rate, steps, sampling, dataset_size
        )

    return make_event


def _named(accountant: Any, pld_discretization: float) -> tuple[str, float]:
    """``(name, PLD discretization)`` of an accountant given by name or as an accountant object
    (:class:`~jfed.privacy.Pld`, :class:`~jfed.privacy.Rdp`, ...; a ``Pld`` carries its own
    discretization)."""
    if isinstance(accountant, str):
        return accountant, pld_discretization
    name = {"analytic-gaussian": "analytic"}.get(accountant.name, accountant.name)
    return name, getattr(accountant, "discretization", pld_discretization)


def _check_closed_form(accountant: str, sampling_rate: float, steps: int) -> None:
    if sampling_rate != 1.0:
        raise ValueError(
            f"the {accountant} calibration has no subsampling amplification; use 'pld' or 'rdp' "
            f"for sampling_rate={sampling_rate}"
        )
    if accountant in ("analytic", "classic") and steps != 1:
        raise ValueError(
            f"the {accountant} calibration is for one release; got steps={steps} "
            "(use 'zcdp', 'pld' or 'rdp' to compose)"
        )


def epsilon_for_noise(
    noise_multiplier: float,
    delta: float,
    sampling_rate: float = 1.0,
    steps: int = 1,
    accountant: str | Any = "pld",
    sampling: str = "poisson",
    dataset_size: int | None = None,
    neighboring: str = "add-or-remove",
    pld_discretization: float = 1e-4,
) -> float:
    """eps at ``delta`` of ``steps`` (subsampled) Gaussian steps with this noise multiplier."""
    accountant, pld_discretization = _named(accountant, pld_discretization)
    from jfed.privacy.accountants import make_accountant, subsampled_gaussian_event

    check_positive("noise_multiplier", noise_multiplier)
    if accountant == "analytic":
        _check_closed_form(accountant, sampling_rate, steps)
        return float(gaussian.analytic_gaussian_epsilon(1.0, noise_multiplier, delta))
    if accountant == "classic":
        _check_closed_form(accountant, sampling_rate, steps)
        return gaussian.classic_gaussian_epsilon(1.0, noise_multiplier, delta)
    event = subsampled_gaussian_event(
        noise_multiplier, sampling_rate, steps, sampling, dataset_size
    )
    accountant_ = make_accountant(accountant, neighboring, pld_discretization)
    return accountant_.compose(event).epsilon(delta)


def calibrate_noise_multiplier(
    epsilon: float,
    delta: float,
    sampling_rate: float = 1.0,
    steps: int = 1,
    accountant: str | Any = "pld",
    sampling: str = "poisson",
    dataset_size: int | None = None,
    neighboring: str = "add-or-remove",
    tolerance: float = 1e-6,
    pld_discretization: float = 1e-4,
) -> float:
    """Smallest noise multiplier (std / sensitivity) whose ``steps`` steps are (eps, delta)-DP.

    Args:
      epsilon, delta: the target; eps > 0, delta in (0, 1).
      sampling_rate: q in (0, 1] per step (1: every record every step).
      steps: number of composed steps.
      accountant: ``pld`` (tight), ``rdp``, ``zcdp`` (closed form, q = 1), ``analytic`` or
        ``classic`` (closed form, one release).
      sampling, dataset_size, neighboring: see :func:`~jfed.privacy.subsampled_gaussian_event`.
      tolerance: absolute bisection tolerance on the noise multiplier (pld / rdp).
      pld_discretization: the PLD accountant's discretization interval (see
        :func:`~jfed.privacy.make_accountant`).
    """
    accountant, pld_discretization = _named(accountant, pld_discretization)
    import dp_accounting

    from jfed.privacy.accountants import make_accountant

    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    if accountant == "zcdp":
        _check_closed_form(accountant, sampling_rate, steps)
        return float(zcdp.calibrate_gaussian(1.0, epsilon, delta, steps))
    if accountant == "analytic":
        _check_closed_form(accountant, sampling_rate, steps)
        return float(gaussian.analytic_gaussian_noise(1.0, epsilon, delta))
    if accountant == "classic":
        _check_closed_form(accountant, sampling_rate, steps)
        return gaussian.classic_gaussian_noise(1.0, epsilon, delta)
    if accountant not in ("pld", "rdp"):
        raise ValueError(
            f"unknown accountant {accountant!r}; expected one of {CALIBRATION_ACCOUNTANTS}"
        )
    make_event = _event_factory(sampling_rate, steps, sampling, dataset_size)
    lo, hi = _bracket(
        lambda noise: epsilon_for_noise(
            noise, delta, sampling_rate, steps, accountant, sampling, dataset_size, neighboring,
            pld_discretization,
        ),
        epsilon,
        epsilon,
    )  # fmt: skip
    from jfed.privacy.accountants import DpAccountingAccountant

    def fresh():  # dp-accounting's own accountant, as its calibration asks for one
        made = make_accountant(accountant, neighboring, pld_discretization)
        assert isinstance(made, DpAccountingAccountant)  # "pld" and "rdp" only, checked above
        return made.dp_accounting_accountant

    return float(
        dp_accounting.calibrate_dp_mechanism(
            fresh,
            make_event,
            epsilon,
            delta,
            bracket_interval=dp_accounting.ExplicitBracketInterval(lo, hi),
            tol=tolerance,
        )
    )


def _bracket(
    eps_at: Callable[[float], float], low_target: float, high_target: float
) -> tuple[float, float]:
    """Noise multipliers ``(lo, hi)`` with eps(lo) >= high_target and eps(hi) <= low_target
    (eps decreases in the noise), found by doubling and halving from 1."""
    hi = 1.0
    for _ in range(_MAX_BRACKET_STEPS):
        if eps_at(hi) <= low_target:
            break
        hi *= 2.0
    else:
        raise ValueError(
            f"cannot bracket the noise multiplier: eps stays above {low_target:g} up to a noise "
            f"multiplier of {hi:g}"
        )
    lo = hi / 2.0
    for _ in range(_MAX_BRACKET_STEPS):
        if eps_at(lo) >= high_target:
            break
        lo /= 2.0
    else:
        raise ValueError(
            f"cannot bracket the noise multiplier: eps stays below {high_target:g} down to a "
            f"noise multiplier of {lo:g}"
        )
    return lo, hi


def calibrate_noise_multipliers(
    epsilons: np.ndarray,
    delta: float,
    sampling_rate: float = 1.0,
    steps: int = 1,
    accountant: str | Any = "pld",
    sampling: str = "poisson",
    dataset_size: int | None = None,
    neighboring: str = "add-or-remove",
    tolerance: float = 1e-4,
    grid_size: int = 12,
    max_refinements: int = 6,
    verify: bool | str = "auto",
    pld_discretization: float = 1e-4,
) -> tuple[np.ndarray, dict]:
    """Noise multipliers for a grid of target eps, reusing accountant work across the grid.

    Args:
      epsilons: target eps values (any order, > 0).
      delta, sampling_rate, steps, accountant, sampling, dataset_size, neighboring: as in
        :func:`calibrate_noise_multiplier`.
      tolerance: relative accuracy in the noise multiplier that the interpolation must reach at
        every checked midpoint (the returned values are inflated by the residual disagreement).
      grid_size: initial number of grid points.
      max_refinements: rounds of midpoint checks.
      verify: evaluate the exact eps at every returned noise and raise the noise (by factors of
        ``1 + tolerance``) until it meets its target. ``"auto"`` verifies for ``rdp``, whose
        eps(noise) has kinks (a minimum over a finite set of orders) where interpolation can err
        between checks, and whose evaluations are cheap; PLD's curve is smooth, and its answers
        are inflated by the largest disagreement seen at the checks instead.
      pld_discretization: the PLD accountant's discretization interval.

    Returns:
      ``(noise_multipliers: f64[len(epsilons)], info)`` with ``info["evaluations"]`` (accountant
      evaluations spent), ``info["max_relative_error"]`` (the last midpoint disagreement) and,
      when verified, ``info["achieved_epsilons"]`` (the exact eps of every returned multiplier,
      flattened).
    """
    accountant, pld_discretization = _named(accountant, pld_discretization)
    epsilons = np.asarray(epsilons, np.float64)
    for value in np.ravel(epsilons):
        check_positive("epsilon", value)
    delta = check_open_unit("delta", delta)
    if accountant in ("zcdp", "analytic", "classic"):
        if accountant == "classic":
            values: Any = [
                calibrate_noise_multiplier(e, delta, sampling_rate, steps, accountant)
                for e in np.ravel(epsilons)
            ]
        elif accountant == "zcdp":
            _check_closed_form(accountant, sampling_rate, steps)
            values = zcdp.calibrate_gaussian(1.0, epsilons, delta, steps)
        elif accountant == "analytic":
            _check_closed_form(accountant, sampling_rate, steps)
            values = gaussian.analytic_gaussian_noise(1.0, epsilons, delta)
        return np.reshape(np.asarray(values, np.float64), epsilons.shape), {"evaluations": 0}

    cache: dict[float, float] = {}

    def eps_at(noise: float) -> float:
        if noise not in cache:
            cache[noise] = epsilon_for_noise(
                noise, delta, sampling_rate, steps, accountant, sampling, dataset_size, neighboring,
                pld_discretization,
            )  # fmt: skip
        return cache[noise]

    low_target, high_target = float(epsilons.min()), float(epsilons.max())
    lo, hi = _bracket(eps_at, low_target, high_target)
    nodes = sorted(np.geomspace(lo, hi, grid_size))
    # intervals worth checking: those whose eps range meets [low_target, high_target]
    active = [
        (left, right)
        for left, right in itertools.pairwise(nodes)
        if eps_at(right) <= high_target and eps_at(left) >= low_target
    ]
    max_error = math.inf
    for _ in range(max_refinements + 1):
        interpolant = _inverse_interpolant(nodes, [eps_at(x) for x in nodes])
        errors = {}
        for left, right in active:
            middle = math.sqrt(left * right)
            errors[(left, middle, right)] = abs(interpolant(eps_at(middle)) / middle - 1.0)
        max_error = max(errors.values(), default=0.0)
        # every evaluated midpoint becomes a node; only the halves of failed intervals are checked
        # again (eps(noise) may have kinks: RDP takes a minimum over a finite set of orders)
        nodes = sorted(set(nodes) | {middle for _, middle, _ in errors})
        active = [
            half
            for (left, middle, right), error in errors.items()
            if error > tolerance
            for half in ((left, middle), (middle, right))
        ]
        if not active:
            break
    interpolant = _inverse_interpolant(sorted(set(nodes)), [eps_at(x) for x in sorted(set(nodes))])
    noise = np.array([interpolant(e) for e in np.ravel(epsilons)]) * (1.0 + max_error)
    info: dict = {"max_relative_error": max_error}
    if verify is True or (verify == "auto" and accountant == "rdp"):
        for index, target in enumerate(np.ravel(epsilons)):
            while eps_at(float(noise[index])) > target:
                noise[index] *= 1.0 + tolerance
        info["achieved_epsilons"] = [eps_at(float(value)) for value in noise]
    info["evaluations"] = len(cache)
    return noise.reshape(epsilons.shape), info


def _inverse_interpolant(noise: list[float], eps: list[float]) -> Callable[[float], float]:
    """noise as a function of eps, monotone, interpolated in log-log space."""
    order = np.argsort(eps)
    log_eps = np.log(np.asarray(eps)[order])
    log_noise = np.log(np.asarray(noise)[order])
    keep = np.concatenate([[True], np.diff(log_eps) > 0])  # strictly increasing abscissae
    spline = PchipInterpolator(log_eps[keep], log_noise[keep], extrapolate=False)

    def evaluate(epsilon: float) -> float:
        return float(np.exp(spline(np.log(epsilon))))

    return evaluate
