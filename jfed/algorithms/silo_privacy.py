"""Noise calibration for the silo algorithms (docs/specs/silo_sgd.md), per silo.

Each silo's transcript must be (eps_i, delta_i)-DP with respect to replacing one of its records
(ISRL-DP). With per-example gradients clipped to L, one record moves a minibatch mean of K
gradients by at most ``2 L / K``. Three calibrations of Noisy MB-SGD's ``sigma_i`` are offered and
every run records which one it used:

- ``theorem`` (the seed's theorem, advanced composition, as in the authors' code):
  ``sigma^2 = 256 L^2 R ln(2.5 R K / (delta n)) ln(2 / delta) / (n^2 eps^2)``;
- ``experiments`` (the seed's experiments, from Abadi et al. 2016 Thm 1):
  ``sigma^2 = 8 L^2 ln(1 / delta) R / (n^2 eps^2)``; that theorem holds only below an eps
  threshold with unstated constants, so the record also reports what the exact accountant
  certifies for this noise;
- ``exact`` (beyond the seed): Poisson sampling with rate q = K / n (each record independently;
  the mean is normalised by K, so one record contributes at most L / K), R rounds composed by
  dp-accounting's PLD accountant under replace-one adjacency, sigma found by bisection. In PLD's
  replace-one convention the noise multiplier is ``sigma / (L / K)``. dp-accounting cannot
  account sampling WITH replacement, so runs calibrated this way sample with ``poisson``.
  (Its RDP bound for K-of-n sampling without replacement is also available, through
  :func:`jfed.privacy.epsilon_for_noise`, but is far looser at the seed's delta = 1/n^2: for the
  seed's MNIST setting it certifies eps 1.40 for a noise that PLD with Poisson sampling certifies
  at eps below 0.05.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from jfed import catalog
from jfed._validation import check_int_range, check_open_unit, check_positive
from jfed.privacy import (
    AdvancedComposition,
    ApproximateDpEvent,
    Pld,
    analytic_gaussian_noise,
    calibrate,
    calibrate_noise_multipliers,
    poisson_rounds_event,
    shuffle_epsilon,
    spent,
)
from jfed.privacy.gaussian import _bisect
from jfed.privacy.shuffle import shuffle_validity_limit

SILO_CALIBRATIONS = catalog.SILO_CALIBRATIONS
# PLD's estimates are pessimistic at any discretization; 1e-3 is 10x faster than the default 1e-4
# and moved eps by about 1e-5 in the seed's settings.
PLD_DISCRETIZATION = 1e-3
EXACT = Pld(PLD_DISCRETIZATION)  # the exact calibration's accountant, under replace-one


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


def exact_mbsgd_epsilon(
    noise_std: float, n: int, batch: int, rounds: int, delta: float, clip_norm: float
) -> float:
    """eps (PLD, replace-one) of R rounds of Poisson-sampled (q = K/n) sums / K with noise sigma."""
    event = poisson_rounds_event(noise_std * batch / clip_norm, min(1.0, batch / n), rounds)
    return spent(event, delta, accountant=EXACT, adjacency="replace-one")


def mbsgd_noise(
    n: int,
    batch: int,
    rounds: int,
    epsilon: float,
    delta: float,
    clip_norm: float,
    calibration: str = "exact",
) -> SiloNoise:
    """sigma_i of Noisy MB-SGD for a silo of n records (see the module docstring).

    ``exact_epsilon`` reports what PLD certifies for the resulting noise under Poisson sampling
    (for the formula calibrations, which sample with replacement, it is a reference only).
    """
    n, batch, rounds, epsilon, delta, clip = _check(n, batch, rounds, epsilon, delta, clip_norm)
    if calibration == "theorem":
        log_term = math.log(max(2.5 * rounds * batch / (delta * n), math.e))
        variance = 256 * clip**2 * rounds * log_term * math.log(2 / delta) / (n * epsilon) ** 2
        noise = math.sqrt(variance)
    elif calibration == "experiments":
        noise = math.sqrt(8 * clip**2 * math.log(1 / delta) * rounds) / (n * epsilon)
    elif calibration == "exact":
        multiplier = calibrate(
            lambda z: poisson_rounds_event(z, min(1.0, batch / n), rounds), epsilon, delta,
            accountant=EXACT, adjacency="replace-one", tolerance=1e-4,
        )  # fmt: skip
        noise = multiplier * clip / batch
    else:
        raise ValueError(f"unknown calibration {calibration!r}; expected {SILO_CALIBRATIONS}")
    exact = exact_mbsgd_epsilon(noise, n, batch, rounds, delta, clip)
    spent = exact if calibration == "exact" else epsilon
    return SiloNoise(noise, spent, delta, calibration, exact)


def mbsgd_noises(
    n: int,
    batch: int,
    rounds: int,
    epsilons: list[float],
    delta: float,
    clip_norm: float,
    calibration: str = "exact",
) -> list[SiloNoise]:
    """:func:`mbsgd_noise` for several eps at once. With the exact calibration the PLD work is
    shared across the targets (:func:`jfed.privacy.calibration.calibrate_noise_multipliers`: one
    grid, interpolated, every answer verified to meet its target and its eps reported)."""
    if calibration != "exact" or len(epsilons) < 2:
        return [mbsgd_noise(n, batch, rounds, e, delta, clip_norm, calibration) for e in epsilons]
    n, batch, rounds, _, delta, clip = _check(n, batch, rounds, min(epsilons), delta, clip_norm)
    multipliers, info = calibrate_noise_multipliers(
        np.asarray(epsilons, np.float64), delta, min(1.0, batch / n), rounds, EXACT,
        neighboring="replace-one", tolerance=1e-4, verify=True,
    )  # fmt: skip
    return [
        SiloNoise(float(m) * clip / batch, spent, delta, calibration, spent)
        for m, spent in zip(multipliers, info["achieved_epsilons"], strict=True)
    ]


def one_pass_noise(
    batch: int, epsilon: float, delta: float, clip_norm: float, calibration: str = "exact"
) -> SiloNoise:
    """sigma of the one-pass algorithms: disjoint batches, so by parallel composition one round's
    Gaussian release (sensitivity 2L/K) must be (eps, delta)-DP. ``theorem`` / ``experiments``:
    the seed's ``sigma^2 = 8 L^2 ln(1/delta) / (eps^2 K^2)``; ``exact``: the analytic Gaussian."""
    batch = check_int_range("batch", batch, 1, 10**12)
    epsilon, delta = check_positive("epsilon", epsilon), check_open_unit("delta", delta)
    sensitivity = 2.0 * check_positive("clip_norm", clip_norm) / batch
    if calibration in ("theorem", "experiments"):
        noise = math.sqrt(8 * clip_norm**2 * math.log(1 / delta)) / (epsilon * batch)
    elif calibration == "exact":
        noise = float(analytic_gaussian_noise(sensitivity, epsilon, delta))
    else:
        raise ValueError(f"unknown calibration {calibration!r}; expected {SILO_CALIBRATIONS}")
    return SiloNoise(noise, epsilon, delta, f"one-pass-{calibration}")


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
    exact = exact_mbsgd_epsilon(noise, n, 1, steps * rounds, delta, clip)
    return SiloNoise(noise, epsilon, delta, "local-sgd-seed", exact)


@dataclass(frozen=True)
class ShuffleNoise:
    """Per-record noise of shuffle-DP MB-SGD and the amplification chain behind it."""

    noise_std: float
    epsilon0: float
    delta0: float
    epsilon_round: float
    epsilon: float
    delta: float
    messages: int


def shuffle_noise(
    messages: int, rounds: int, epsilon: float, delta: float, clip_norm: float
) -> ShuffleNoise:
    """sigma0 per record so that R rounds of shuffled messages are central (eps, delta)-DP.

    Chain: each message (a clipped gradient, sensitivity 2L) is an (eps0, delta0) Gaussian local
    randomizer (analytic calibration); shuffling ``messages`` of them per round gives central
    (eps_r, delta_r) by :func:`jfed.privacy.shuffle_epsilon`; R rounds compose by advanced
    composition. delta is split in three equal parts (local randomizers, shuffling, composition).
    eps0 is the largest value, within the shuffling bound's validity range, meeting the target.
    """
    messages = check_int_range("messages", messages, 1, 10**12)
    rounds = check_int_range("rounds", rounds, 1, 10**9)
    epsilon, delta = check_positive("epsilon", epsilon), check_open_unit("delta", delta)
    delta_shuffle = delta / (3 * rounds)
    limit = shuffle_validity_limit(messages, delta_shuffle)
    if limit <= 0:
        raise ValueError(
            f"expected more shuffled messages per round: with {messages} messages and "
            f"delta={delta} the shuffling bound covers no eps0 > 0 (needs n > 16 ln(2/delta))"
        )

    def chain(epsilon0: float):
        delta0 = delta / (3 * rounds * messages * (math.exp(epsilon0) + 1) * 1.5)
        eps_round, delta_round = shuffle_epsilon(epsilon0, messages, delta_shuffle, delta0)
        composition = AdvancedComposition().compose(
            ApproximateDpEvent(eps_round, delta_round), rounds
        )
        return composition.get_epsilon(delta), delta0, eps_round

    candidates = np.array(limit)
    if chain(limit)[0] > epsilon:
        candidates = _bisect(
            lambda e: np.array([chain(float(x))[0] > epsilon for x in np.atleast_1d(e)]),
            np.array(0.0),
            np.array(limit),
        )
        epsilon0 = float(np.nextafter(float(np.ravel(candidates)[0]), 0.0))
        while chain(epsilon0)[0] > epsilon:
            epsilon0 *= 1 - 1e-9
    else:
        epsilon0 = float(limit)
    total, delta0, eps_round = chain(epsilon0)
    noise = float(analytic_gaussian_noise(2.0 * clip_norm, epsilon0, delta0))
    return ShuffleNoise(noise, epsilon0, delta0, eps_round, total, delta, messages)
