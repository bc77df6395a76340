"""The calibration of a local randomizer's releases: the noise for R releases of one randomizer
(every client in every round) to be (eps, delta)-DP, through an accountant.

A calibration, not a guarantee: what a run certifies comes from the releases its aggregators
made (:meth:`jfed.methods.Experiment.certify_run`, the composition of their events). The local
randomizers' methods (the modulated map, DP-SGD's clipped gradients) calibrate here, because the
Gaussian has closed forms under zCDP, the analytic and the classic accountant that a search would
only approach, and certify from their ledger.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jfed._validation import check_int_range, check_open_unit, check_positive
from jfed.privacy.guarantee import Adjacency

if TYPE_CHECKING:
    import dp_accounting

    from jfed.privacy.accounting import AccountantSpec


@dataclass(frozen=True)
class PrivacyPlan:
    """The noise of R releases of a local randomizer, calibrated.

    Attributes:
      noise_std: the noise scale per coordinate per release (the Gaussian's sigma; a Laplace
        randomizer's b).
      sensitivity: the sensitivity of one release, in the norm its noise is calibrated in (L2
        for Gaussian noise, L1 for Laplace noise).
      rounds: releases per protected unit.
      release: noise multiplier -> the ``DpEvent`` of one release.
    """

    noise_std: float
    sensitivity: float
    rounds: int
    release: Callable[[float], Any]

    @property
    def noise_multiplier(self) -> float:
        """``noise_std / sensitivity``."""
        return self.noise_std / self.sensitivity

    @property
    def event(self) -> dp_accounting.DpEvent:
        """The ``DpEvent`` the noise was calibrated for: ``rounds`` releases of
        ``release(noise_multiplier)``."""
        from jfed.privacy.accounting import rounds_of

        return rounds_of(self.release(self.noise_multiplier), self.rounds)


def rounds_plan(
    sensitivity: float,
    epsilon: float,
    delta: float,
    rounds: int,
    *,
    accountant: AccountantSpec,
    randomizer: Any = None,
    adjacency: Adjacency | str = Adjacency.BOUNDED,
) -> PrivacyPlan:
    """Calibrate ``rounds`` releases of a randomizer (every protected unit in every round) to
    (eps, delta) under ``accountant``.

    Args:
      sensitivity: the sensitivity of one release in the randomizer's norm (> 0); 1 gives the
        noise multiplier as ``noise_std``.
      epsilon, delta: the target of the whole run.
      rounds: releases per unit, R >= 1.
      accountant: :class:`~jfed.privacy.Zcdp`, :class:`~jfed.privacy.Pld`, ...
      randomizer: a :class:`~jfed.privacy.NoiseRandomizer` (default
        :class:`~jfed.privacy.GaussianNoise`); its ``rounds_noise`` calibrates where it has one
        (the Gaussian's: the accountant's closed form), else the noise multiplier is searched
        through ``accountant`` on the randomizer's own event.
      adjacency: of that search (a local randomizer's: bounded).
    """
    from jfed.privacy.accounting import calibrate, rounds_of
    from jfed.privacy.privatizers import GaussianNoise

    randomizer = GaussianNoise() if randomizer is None else randomizer
    sensitivity = check_positive("sensitivity", sensitivity)
    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    rounds = check_int_range("rounds", rounds, 1, 10**9)
    if hasattr(randomizer, "rounds_noise"):
        noise_std = float(randomizer.rounds_noise(accountant, sensitivity, epsilon, delta, rounds))
    else:
        multiplier = calibrate(lambda z: rounds_of(randomizer.dp_event(z), rounds), epsilon,
                               delta, accountant=accountant, adjacency=adjacency)  # fmt: skip
        noise_std = multiplier * sensitivity
    return PrivacyPlan(noise_std, sensitivity, rounds, randomizer.dp_event)
