"""What tests of a method's calibration share: its experiment prepared and calibrated as the
runner does, and the aggregator at the core of a wrapped release."""

from __future__ import annotations

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
