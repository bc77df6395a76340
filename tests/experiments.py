"""What tests of a method's calibration share: its experiment prepared and calibrated as the
runner does, and the aggregator at the core of a wrapped release."""

from __future__ import annotations

import math
from typing import Any

from jfed.methods import build_experiment


def calibrated(config: Any) -> tuple[Any, Any, dict]:
    """``(experiment, hyperparams, privacy fields)`` of ``config``, prepared for it alone."""
    experiment = build_experiment(config)
    experiment.prepare([config])
    return experiment, *experiment.calibrated(config)


def innermost(aggregator: Any) -> Any:
    """The aggregator inside every wrapper (``.inner``: a mean, canaries, ...)."""
    while hasattr(aggregator, "inner"):
        aggregator = aggregator.inner
    return aggregator


def squared_bound(grid_norm: int, dimension: int) -> int:
    """B from Kairouz, Liu and Steinke (2021, Theorem 1) at the grid's default beta, beside the
    deterministic ``(L + sqrt(d))^2``: the rounded update's squared norm bound, in closed form."""
    from jfed.privacy.discrete_aggregators import DEFAULT_BETA

    spread = math.sqrt(2 * math.log(1 / DEFAULT_BETA))
    concentrated = grid_norm**2 + dimension / 4 + spread * (grid_norm + math.sqrt(dimension) / 2)
    return math.ceil(min((grid_norm + math.sqrt(dimension)) ** 2, concentrated))


def coupling_variation_per_coordinate(variance: float = 9.0) -> float:
    """The coupling's total variation per coordinate in closed form: ``eta (1 + eta) / (1 -
    eta)^2``, ``eta = 2 e^{-2 pi^2 s^2} / (1 - e^{-6 pi^2 s^2})``."""
    a = 2 * math.pi**2 * variance
    eta = 2 * math.exp(-a) / (1 - math.exp(-3 * a))
    return eta * (1 + eta) / (1 - eta) ** 2
