"""Noise calibration for the silo algorithms (docs/specs/silo_sgd.md), per silo.

Each silo's transcript must be (eps_i, delta_i)-DP with respect to replacing one of its records
(ISRL-DP). With per-example gradients clipped to L, one record moves a minibatch mean of K
gradients by at most ``2 L / K``. Three calibrations of Noisy MB-SGD's ``sigma_i`` are offered
(:data:`CALIBRATIONS`, by the name ``--calibration`` gives) and every run records which one it
used:

- :class:`Theorem` (the seed's theorem, advanced composition, as in the authors' code):
  ``sigma^2 = 256 L^2 R ln(2.5 R K / (delta n)) ln(2 / delta) / (n^2 eps^2)``;
- :class:`Experiments` (the seed's experiments, from Abadi et al. 2016 Thm 1):
  ``sigma^2 = 8 L^2 ln(1 / delta) R / (n^2 eps^2)``; that theorem holds only below an eps
  threshold with unstated constants, so the record also reports what the exact accountant
  certifies for this noise;
- :class:`Exact` (beyond the seed): Poisson sampling with rate q = K / n (each record
  independently; the mean is normalised by K, so one record contributes at most L / K), R rounds
  composed by dp-accounting's PLD accountant under replace-one adjacency, sigma found by
  bisection through the events the silo's aggregator states
  (:class:`~jfed.algorithms.silo_aggregators.SiloGaussian`). In PLD's replace-one convention the
  noise multiplier is ``sigma / (L / K)``. dp-accounting cannot account sampling WITH
  replacement, so runs calibrated this way sample with ``poisson``. (Its RDP bound for K-of-n
  sampling without replacement is also available, through :func:`jfed.privacy.epsilon_for_noise`,
  but is far looser at the seed's delta = 1/n^2: for the seed's MNIST setting it certifies eps
  1.40 for a noise that PLD with Poisson sampling certifies at eps below 0.05.)

A formula certifies nothing: its target eps is a claim, beside which a run reports what PLD
certifies for its noise under Poisson sampling. No event is written here: every eps below is
composed from the events of the silo aggregators (:mod:`jfed.algorithms.silo_aggregators`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from jfed._validation import check_int_range, check_open_unit, check_positive
from jfed.algorithms.silo_aggregators import (
    PoissonSampling,
    ShuffledMessages,
    ShuffleParams,
    SiloGaussian,
    named,
)
from jfed.privacy import (
    Adjacency,
    Advanced,
    Pld,
    analytic_gaussian_noise,
    calibrate,
    calibrate_grid,
    rounds_of,
    spent,
)
from jfed.privacy.gaussian import _bisect
from jfed.privacy.shuffle import shuffle_validity_limit

# PLD's estimates are pessimistic at any discretization; 1e-3 is 10x faster than the default 1e-4
# and moved eps by about 1e-5 in the seed's settings.
PLD_DISCRETIZATION = 1e-3
EXACT = Pld(PLD_DISCRETIZATION)  # the exact calibration's accountant, under replace-one
TOLERANCE = 1e-4  # absolute tolerance on the noise multiplier sigma K / L of an exact calibration
SHUFFLE_MARGIN = 1e-6
"""eps0 stays this fraction below the shuffling bound's validity limit, so that the float32 noise
a run reads back never puts it past the limit."""


@dataclass(frozen=True)
class SiloNoise:
    """The noise of one silo and the guarantee behind it.

    Attributes:
      noise_std: sigma_i.
      epsilon: eps the calibration certifies (the target for formula calibrations).
      delta: delta.
      calibration: which calibration (``theorem``, ``experiments``, ``exact``, ...).
      exact_epsilon: eps certified for this noise by the exact PLD accountant (when computed).
    """

    noise_std: float
    epsilon: float
    delta: float
    calibration: str
    exact_epsilon: float | None = None


def _check(n: int, batch: int, rounds: int, epsilon: float, delta: float, clip: float):
    n = check_int_range("n", n, 1, 10**12)
    batch = check_int_range("batch", batch, 1, n)
    rounds = check_int_range("rounds", rounds, 1, 10**9)
    return (
        n,
        batch,
        rounds,
        check_positive("epsilon", epsilon),
        check_open_unit("delta", delta),
        check_positive("clip_norm", clip),
    )


def one_pass_formula(batch: int, epsilon: float, delta: float, clip_norm: float) -> float:
    """The seed's one-pass sigma: ``sigma^2 = 8 L^2 ln(1/delta) / (eps^2 K^2)``."""
    return math.sqrt(8 * clip_norm**2 * math.log(1 / delta)) / (epsilon * batch)


@dataclass(frozen=True)
class _Formula:
    """A paper's formula: it certifies nothing (its eps is a claim), stated for sampling with
    replacement; one pass takes the seed's one-pass formula."""

    name: ClassVar[str]
    certifies: ClassVar[bool] = False
    sampling: ClassVar[str] = "with-replacement"  # the sampler the formula was stated for

    def one_pass_noise(self, batch, epsilon, delta, clip) -> float:
        return one_pass_formula(batch, epsilon, delta, clip)


@dataclass(frozen=True)
class Theorem(_Formula):
    """The seed's theorem (advanced composition)."""

    name: ClassVar[str] = "theorem"

    def minibatch_noise(self, n, batch, rounds, epsilon, delta, clip) -> float:
        log_term = math.log(max(2.5 * rounds * batch / (delta * n), math.e))
        variance = 256 * clip**2 * rounds * log_term * math.log(2 / delta) / (n * epsilon) ** 2
        return math.sqrt(variance)


@dataclass(frozen=True)
class Experiments(_Formula):
    """The seed's experiments (Abadi et al. 2016 Thm 1)."""

    name: ClassVar[str] = "experiments"

    def minibatch_noise(self, n, batch, rounds, epsilon, delta, clip) -> float:
        del batch
        return math.sqrt(8 * clip**2 * math.log(1 / delta) * rounds) / (n * epsilon)


@dataclass(frozen=True)
class Exact:
    """PLD over the silo aggregator's events (Poisson sampling), bisected to the target."""

    name: ClassVar[str] = "exact"
    certifies: ClassVar[bool] = True
    sampling: ClassVar[str] = "poisson"

    def minibatch_noise(self, n, batch, rounds, epsilon, delta, clip) -> float:
        (noise,) = exact_noises(lambda s: silo_run_event(s, n, batch, rounds, clip), batch, clip,
                                [epsilon], delta)  # fmt: skip
        return noise

    def one_pass_noise(self, batch, epsilon, delta, clip) -> float:
        """The analytic Gaussian of one release of sensitivity 2 L / K."""
        return float(analytic_gaussian_noise(2.0 * clip / batch, epsilon, delta))


Calibration = Theorem | Experiments | Exact
CALIBRATIONS: dict[str, Calibration] = {c.name: c for c in (Theorem(), Experiments(), Exact())}
"""Every calibration of the silo noise by its name (``--calibration``)."""
SILO_CALIBRATIONS = tuple(CALIBRATIONS)


def calibration_named(calibration: Calibration | str) -> Calibration:
    """``calibration`` as an object (a name is looked up in :data:`CALIBRATIONS`)."""
    return named(CALIBRATIONS, calibration, "calibration")


def silo_run_event(
    noise_std: float, n: int, batch: int, rounds: int, clip_norm: float, steps: int = 1
):
    """The event of one silo of n records over R rounds of Poisson-sampled (q = K / n) minibatch
    means with noise sigma, ``steps`` of them a round: what its aggregator
    (:class:`~jfed.algorithms.silo_aggregators.SiloGaussian`) states, composed over the rounds."""
    aggregator = SiloGaussian(PoissonSampling(), batch, (n,), steps)
    return rounds_of(aggregator.silo_event(clip_norm, noise_std, n), rounds)


def exact_noises(
    silo_event: Callable[[float], object],
    batch: int,
    clip_norm: float,
    epsilons: list[float],
    delta: float,
) -> list[float]:
    """sigma for each target eps: the least noise whose ``silo_event(sigma)`` (a silo's whole
    run) is (eps, delta)-DP under PLD with replace-one adjacency, searched over the multiplier
    ``z = sigma K / L`` to :data:`TOLERANCE`. Several targets share one PLD grid
    (:func:`jfed.privacy.calibrate_grid`: interpolated, every answer verified to meet its
    target)."""
    share = clip_norm / batch

    def make_event(multiplier: float):
        return silo_event(multiplier * share)

    setting = dict(accountant=EXACT, adjacency=Adjacency.REPLACE_ONE, tolerance=TOLERANCE)
    if len(epsilons) < 2:
        return [calibrate(make_event, e, delta, **setting) * share for e in epsilons]
    multipliers, _ = calibrate_grid(make_event, np.asarray(epsilons, np.float64), delta,
                                    verify=True, **setting)  # fmt: skip
    return [float(m) * share for m in multipliers]


def exact_epsilon(event, delta: float) -> float:
    """eps (PLD at :data:`PLD_DISCRETIZATION`, replace-one) of a silo run's ``event``."""
    return spent(event, delta, accountant=EXACT, adjacency=Adjacency.REPLACE_ONE)


def exact_mbsgd_epsilon(
    noise_std: float, n: int, batch: int, rounds: int, delta: float, clip_norm: float
) -> float:
    """eps (PLD, replace-one) of R rounds of Poisson-sampled (q = K/n) sums / K with noise sigma."""
    return exact_epsilon(silo_run_event(noise_std, n, batch, rounds, clip_norm), delta)


def mbsgd_noise(
    n: int,
    batch: int,
    rounds: int,
    epsilon: float,
    delta: float,
    clip_norm: float,
    calibration: Calibration | str = "exact",
) -> SiloNoise:
    """sigma_i of Noisy MB-SGD for a silo of n records (see the module docstring).

    ``exact_epsilon`` reports what PLD certifies for the resulting noise under Poisson sampling
    (for the formula calibrations, which sample with replacement, it is a reference only).
    """
    n, batch, rounds, epsilon, delta, clip = _check(n, batch, rounds, epsilon, delta, clip_norm)
    calibration = calibration_named(calibration)
    noise = calibration.minibatch_noise(n, batch, rounds, epsilon, delta, clip)
    exact = exact_mbsgd_epsilon(noise, n, batch, rounds, delta, clip)
    return SiloNoise(noise, exact if calibration.certifies else epsilon, delta, calibration.name,
                     exact)  # fmt: skip


def mbsgd_noises(
    n: int,
    batch: int,
    rounds: int,
    epsilons: list[float],
    delta: float,
    clip_norm: float,
    calibration: Calibration | str = "exact",
) -> list[SiloNoise]:
    """:func:`mbsgd_noise` for several eps at once. With the exact calibration the PLD work is
    shared across the targets (:func:`exact_noises`)."""
    calibration = calibration_named(calibration)
    if not calibration.certifies or len(epsilons) < 2:
        return [mbsgd_noise(n, batch, rounds, e, delta, clip_norm, calibration) for e in epsilons]
    n, batch, rounds, _, delta, clip = _check(n, batch, rounds, min(epsilons), delta, clip_norm)
    noises = exact_noises(lambda s: silo_run_event(s, n, batch, rounds, clip), batch, clip,
                          list(epsilons), delta)  # fmt: skip
    results = []
    for noise in noises:
        spent_epsilon = exact_mbsgd_epsilon(noise, n, batch, rounds, delta, clip)
        results.append(SiloNoise(noise, spent_epsilon, delta, calibration.name, spent_epsilon))
    return results


def one_pass_noise(
    batch: int, epsilon: float, delta: float, clip_norm: float,
    calibration: Calibration | str = "exact",
) -> SiloNoise:  # fmt: skip
    """sigma of the one-pass algorithms: disjoint batches, so by parallel composition one round's
    Gaussian release (sensitivity 2L/K) must be (eps, delta)-DP. ``theorem`` / ``experiments``:
    the seed's ``sigma^2 = 8 L^2 ln(1/delta) / (eps^2 K^2)``; ``exact``: the analytic Gaussian."""
    batch = check_int_range("batch", batch, 1, 10**12)
    epsilon, delta = check_positive("epsilon", epsilon), check_open_unit("delta", delta)
    clip_norm = check_positive("clip_norm", clip_norm)
    calibration = calibration_named(calibration)
    noise = calibration.one_pass_noise(batch, epsilon, delta, clip_norm)
    return SiloNoise(noise, epsilon, delta, f"one-pass-{calibration.name}")


def local_sgd_noise(
    n: int, steps: int, rounds: int, epsilon: float, delta: float, clip_norm: float
) -> SiloNoise:
    """sigma per local step of ISRL-DP Local SGD by the seed's formula (appendix I):
    ``sigma^2 = 8 K^2 L^2 ln(1/delta) R / (n^2 eps^2)``.

    ``exact_epsilon`` is what PLD certifies for this noise over the K R local steps, each
    Poisson-sampled at rate 1 / n (replace-one): the accounting of the ``exact`` calibration
    (:func:`mbsgd_noise` with K = 1 and K R rounds). The formula's own runs draw one record with
    replacement per step, which no accountant here models exactly, so for them it is a reference.
    """
    n, steps, rounds, epsilon, delta, clip = _check(n, steps, rounds, epsilon, delta, clip_norm)
    noise = math.sqrt(8 * steps**2 * clip**2 * math.log(1 / delta) * rounds) / (n * epsilon)
    exact = exact_epsilon(silo_run_event(noise, n, 1, rounds, clip, steps), delta)
    return SiloNoise(noise, epsilon, delta, "local-sgd-seed", exact)


@dataclass(frozen=True)
class ShuffleNoise:
    """Per-record noise of shuffle-DP MB-SGD and the amplification chain behind it.

    Attributes:
      noise_std: sigma0 of one message.
      epsilon0, message_delta: one message's guarantee (eps0, delta0) as a local randomizer.
      shuffle_delta: the delta one round's shuffling spends (delta / 3R).
      epsilon_round: eps of one shuffled round.
      epsilon, delta: the run's central guarantee (advanced composition over the rounds).
      messages: messages shuffled per round.
      message_coupling: the share of delta0 an exact message's coupling to the continuous
        Gaussian takes (:meth:`~jfed.algorithms.silo_aggregators.ShuffledGridMessages.
        message_guarantee`; 0 for float messages).
    """

    noise_std: float
    epsilon0: float
    message_delta: float
    shuffle_delta: float
    epsilon_round: float
    epsilon: float
    delta: float
    messages: int
    message_coupling: float = 0.0

    def carried_coupling(self, rounds: int) -> float:
        """The run's delta that the messages' coupling takes: R rounds of the shuffling bound's
        ``(e^eps_r + 1)(1 + e^-eps0 / 2) n`` times :attr:`message_coupling` (Feldman, McMillan
        and Talwar's extension to (eps0, delta0) randomizers, :func:`jfed.privacy.
        shuffle_epsilon`), the composition adding the rounds' deltas."""
        carried = (math.exp(self.epsilon_round) + 1.0) * (1.0 + math.exp(-self.epsilon0) / 2.0)
        return rounds * carried * self.messages * self.message_coupling


def shuffle_run_epsilon(messages: int, rounds: int, delta: float) -> Callable[..., float]:
    """``params -> eps``: the run's eps at ``delta`` from the shuffle aggregator's event of one
    round (:class:`~jfed.algorithms.silo_aggregators.ShuffledMessages`), R rounds composed by
    advanced composition (replace-one)."""

    def run_epsilon(params: ShuffleParams) -> float:
        event = rounds_of(ShuffledMessages(messages=messages).event(params), rounds)
        return spent(event, delta, accountant=Advanced(), adjacency=Adjacency.REPLACE_ONE)

    return run_epsilon


def shuffle_noise(
    messages: int,
    rounds: int,
    epsilon: float,
    delta: float,
    clip_norm: float,
    run_epsilon: Callable[[ShuffleParams], float] | None = None,
    aggregator: ShuffledMessages | None = None,
) -> ShuffleNoise:
    """sigma0 per record so that R rounds of shuffled messages are central (eps, delta)-DP.

    Chain: each message (a clipped gradient, sensitivity 2L) is an (eps0, delta0) Gaussian local
    randomizer (analytic calibration; an exact message through the continuous Gaussian its discrete
    noise is coupled to, the coupling's total variation inside delta0:
    :class:`~jfed.algorithms.silo_aggregators.ShuffledGridMessages`); shuffling ``messages`` of them
    per round gives central (eps_r, delta_r) by :func:`jfed.privacy.shuffle_epsilon`; R rounds
    compose by advanced composition. delta is split in three equal parts (local randomizers,
    shuffling, composition).
    eps0 is the largest value, within the shuffling bound's validity range, meeting the target.

    Args:
      messages, rounds, epsilon, delta, clip_norm: the setting.
      run_epsilon: ``ShuffleParams -> eps`` of the run (default :func:`shuffle_run_epsilon` at
        host precision; a run passes the eps of the events its program released).
      aggregator: the messages' aggregator, whose local randomizer is calibrated and states
        (eps0, delta0) (default: float messages,
        :class:`~jfed.algorithms.silo_aggregators.ShuffledMessages`; the exact ones:
        :class:`~jfed.algorithms.silo_aggregators.ShuffledGridMessages`).
    """
    messages = check_int_range("messages", messages, 1, 10**12)
    rounds = check_int_range("rounds", rounds, 1, 10**9)
    epsilon, delta = check_positive("epsilon", epsilon), check_open_unit("delta", delta)
    clip_norm = check_positive("clip_norm", clip_norm)
    run_epsilon = run_epsilon or shuffle_run_epsilon(messages, rounds, delta)
    aggregator = aggregator or ShuffledMessages(messages=messages)
    shuffle_delta = delta / (3 * rounds)
    limit = shuffle_validity_limit(messages, shuffle_delta)
    if limit <= 0:
        raise ValueError(
            f"expected more shuffled messages per round: with {messages} messages and "
            f"delta={delta} the shuffling bound covers no eps0 > 0 (needs n > 16 ln(2/delta))"
        )

    def params(epsilon0: float) -> ShuffleParams:
        delta0 = delta / (3 * rounds * messages * (math.exp(epsilon0) + 1) * 1.5)
        noise = aggregator.message_noise(clip_norm, epsilon0, delta0)
        return ShuffleParams(clip_norm, noise, delta0, shuffle_delta)

    def too_much(epsilon0: float) -> bool:
        return run_epsilon(params(epsilon0)) > epsilon

    highest = limit * (1.0 - SHUFFLE_MARGIN)
    epsilon0 = highest
    if too_much(highest):
        candidates = _bisect(
            lambda e: np.array([too_much(float(x)) for x in np.atleast_1d(e)]),
            np.array(0.0),
            np.array(highest),
        )
        epsilon0 = float(np.nextafter(float(np.ravel(candidates)[0]), 0.0))
        while too_much(epsilon0):
            epsilon0 *= 1 - 1e-9
    chosen = params(epsilon0)
    message_epsilon, coupling = aggregator.message_guarantee(chosen)
    return ShuffleNoise(
        chosen.noise_std, message_epsilon, chosen.message_delta, shuffle_delta,
        aggregator.event(chosen).epsilon, run_epsilon(chosen), delta, messages, coupling,
    )  # fmt: skip
