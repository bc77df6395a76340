"""Subsampled Gaussian steps (DP-SGD, Noisy MB-SGD, ``jfed account``): eps for a noise, and the
noise for one target eps or a whole grid, through the one accountant system of
:mod:`jfed.privacy.accounting`.

Each function builds the steps' event (:func:`~jfed.privacy.accountants.subsampled_gaussian_event`)
and hands it to :func:`~jfed.privacy.accounting.spent`, :func:`~jfed.privacy.calibrate` or
:func:`~jfed.privacy.calibrate_grid`; closed-form accountants (zCDP, the analytic and classic
Gaussian) answer full participation in closed form.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from jfed._validation import UsageError, check_open_unit, check_positive
from jfed.privacy.accounting import (
    AccountantSpec,
    Pld,
    accountant_named,
    calibrate,
    calibrate_grid,
    spent,
)
from jfed.privacy.guarantee import Adjacency

# how a step's batch is drawn, by its name on the command line: whether it is a fixed-size batch
# drawn without replacement (else Poisson: each record independently)
SAMPLINGS = {"poisson": False, "without-replacement": True}


@dataclass(frozen=True)
class SubsampledSteps:
    """``steps`` Gaussian steps on a subsample of rate q, as a hashable event factory:
    ``SubsampledSteps(q, steps)(z)`` is their event at noise multiplier z."""

    sampling_rate: float = 1.0
    steps: int = 1
    without_replacement_of: int | None = None

    def __call__(self, noise_multiplier: float):
        from jfed.privacy.accountants import subsampled_gaussian_event

        return subsampled_gaussian_event(
            noise_multiplier, self.sampling_rate, self.steps, self.without_replacement_of
        )


def _setting(
    accountant: str | AccountantSpec, pld_discretization: float, sampling: str,
    dataset_size: int | None, sampling_rate: float, steps: int,
) -> tuple[AccountantSpec, SubsampledSteps]:  # fmt: skip
    spec = accountant_named(accountant) if isinstance(accountant, str) else accountant
    if isinstance(spec, Pld) and isinstance(accountant, str):
        spec = Pld(pld_discretization)
    if sampling not in SAMPLINGS:
        raise UsageError(f"unknown sampling {sampling!r}; expected one of {list(SAMPLINGS)}")
    fixed = SAMPLINGS[sampling] and sampling_rate < 1.0
    if fixed and (dataset_size is None or dataset_size < 1):
        raise UsageError("expected dataset_size >= 1 for sampling without replacement")
    if sampling_rate < 1.0 and not spec.composes_sampling:
        raise UsageError(
            f"the {spec.key} calibration has no subsampling amplification; use 'pld' or 'rdp' "
            f"for sampling_rate={sampling_rate}"
        )
    return spec, SubsampledSteps(sampling_rate, steps, dataset_size if fixed else None)


def epsilon_for_noise(
    noise_multiplier: float,
    delta: float,
    sampling_rate: float = 1.0,
    steps: int = 1,
    accountant: str | AccountantSpec = "pld",
    sampling: str = "poisson",
    dataset_size: int | None = None,
    neighboring: str | Adjacency = "add-or-remove",
    pld_discretization: float = 1e-4,
) -> float:
    """eps at ``delta`` of ``steps`` (subsampled) Gaussian steps with this noise multiplier.

    Args:
      noise_multiplier: noise std / sensitivity of one step (> 0).
      delta: in (0, 1).
      sampling_rate: q in (0, 1] per step (1: every record every step).
      steps: number of composed steps.
      accountant: a spec (``Pld()``, ``Rdp()``, ...) or its key (``"pld"``, ``"rdp"``,
        ``"zcdp"``, ``"analytic"``, ``"classic"``, :data:`~jfed.privacy.ACCOUNTANTS`).
      sampling: ``"poisson"`` or ``"without-replacement"`` (fixed batches of ``round(q n)``).
      dataset_size: n, for sampling without replacement.
      neighboring: the adjacency (see :func:`~jfed.privacy.subsampled_gaussian_event` for how
        dp-accounting reads the noise multiplier under replace-one).
      pld_discretization: the PLD accountant's discretization interval, when ``accountant`` is
        the key ``"pld"`` (a ``Pld`` spec carries its own).
    """
    check_positive("noise_multiplier", noise_multiplier)
    spec, steps_of = _setting(accountant, pld_discretization, sampling, dataset_size,
                              sampling_rate, steps)  # fmt: skip
    adjacency = Adjacency.of(neighboring)
    if adjacency is Adjacency.ADD_OR_REMOVE and not spec.composes_sampling:
        adjacency = Adjacency.BOUNDED  # the closed forms read z as std / the sensitivity
    return spent(steps_of(noise_multiplier), delta, accountant=spec, adjacency=adjacency)


def calibrate_noise_multiplier(
    epsilon: float,
    delta: float,
    sampling_rate: float = 1.0,
    steps: int = 1,
    accountant: str | AccountantSpec = "pld",
    sampling: str = "poisson",
    dataset_size: int | None = None,
    neighboring: str | Adjacency = "add-or-remove",
    tolerance: float = 1e-6,
    pld_discretization: float = 1e-4,
) -> float:
    """Smallest noise multiplier (std / sensitivity) whose ``steps`` steps are (eps, delta)-DP,
    at most ``tolerance`` above the least one (closed forms for full participation under the
    zCDP, analytic and classic accountants; otherwise :func:`~jfed.privacy.calibrate`).

    Args: as in :func:`epsilon_for_noise`, with the target ``epsilon`` > 0 and ``tolerance``
    the absolute tolerance on the noise multiplier.
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    spec, steps_of = _setting(accountant, pld_discretization, sampling, dataset_size,
                              sampling_rate, steps)  # fmt: skip
    if not spec.composes_sampling:
        return float(spec.gaussian_rounds_noise(1.0, epsilon, delta, steps))
    return calibrate(steps_of, epsilon, delta, accountant=spec,
                     adjacency=Adjacency.of(neighboring), tolerance=tolerance)  # fmt: skip


def calibrate_noise_multipliers(
    epsilons: np.ndarray,
    delta: float,
    sampling_rate: float = 1.0,
    steps: int = 1,
    accountant: str | AccountantSpec = "pld",
    sampling: str = "poisson",
    dataset_size: int | None = None,
    neighboring: str | Adjacency = "add-or-remove",
    tolerance: float = 1e-4,
    grid_size: int = 12,
    max_refinements: int = 6,
    verify: bool | str = "auto",
    pld_discretization: float = 1e-4,
) -> tuple[np.ndarray, dict]:
    """Noise multipliers for a grid of target eps (:func:`~jfed.privacy.calibrate_grid`),
    reusing accountant work across the grid; closed forms answer each eps at once.

    Returns:
      ``(noise_multipliers: f64[len(epsilons)], info)`` as :func:`~jfed.privacy.calibrate_grid`
      (``info["evaluations"]`` is 0 for a closed form).
    """
    epsilons = np.asarray(epsilons, np.float64)
    for value in np.ravel(epsilons):
        check_positive("epsilon", value)
    spec, steps_of = _setting(accountant, pld_discretization, sampling, dataset_size,
                              sampling_rate, steps)  # fmt: skip
    if not spec.composes_sampling:
        values: Any = [
            calibrate_noise_multiplier(e, delta, sampling_rate, steps, spec)
            for e in np.ravel(epsilons)
        ]
        return np.reshape(np.asarray(values, np.float64), epsilons.shape), {"evaluations": 0}
    return calibrate_grid(
        steps_of, epsilons, delta, accountant=spec, adjacency=Adjacency.of(neighboring),
        tolerance=tolerance, grid_size=grid_size, max_refinements=max_refinements, verify=verify,
    )  # fmt: skip


SAMPLER_SHARE = 1e-3
"""The share of the target delta first reserved for float noise's bounded reach
(:func:`~jfed.privacy.reach_delta`); where the reach needs more (large eps), z is searched again
at what is left (:func:`least_within_reach`)."""


def least_within_reach(
    least: Callable[[float], float],
    reach: Callable[[float], float] | None,
    delta: float,
    what: str,
    remedy: str,
) -> tuple[float, float]:
    """``(z, reserve)``: the least z once the delta that float noise's bounded reach adds is
    reserved from the target ``delta``.

    Args:
      least: ``least(share)``, the least z at the target delta less ``share`` (and less any
        term reserved before: a cohort's overflow, a coupling).
      reach: ``reach(z)``, the reach's delta term over the run at z; ``None`` for exact noise,
        which reserves nothing.
      delta: the target delta.
      what, remedy: the run named, and what to change, in the error raised when the reach
        alone needs half of ``delta`` or more.

    First :data:`SAMPLER_SHARE` of delta is reserved; where the reach at the z found needs
    more (large eps), what it needs (more noise reaches less far, so the term only shrinks as
    z grows)."""
    if reach is None:
        return least(0.0), 0.0
    reserve = SAMPLER_SHARE * delta
    z = least(reserve)
    needed = reach(z)
    if needed > reserve:
        if needed >= 0.5 * delta:
            raise UsageError(
                f"{what}: the float32 normals' bounded reach alone adds delta {needed:.2g} "
                f"(target {delta:g}); {remedy}"
            )
        reserve = needed
        z = least(reserve)
    return z, reserve
