"""The two-point mechanism of LDP-FL (seed 002; docs/specs/ldp_fl.md), pure eps-LDP per scalar.

A value ``w`` in ``[c - r, c + r]`` is reported as one of two points

    c + r (e^eps + 1)/(e^eps - 1)   with probability p(w)
    c - r (e^eps + 1)/(e^eps - 1)   otherwise,

    p(w) = ((w - c)(e^eps - 1) + r (e^eps + 1)) / (2 r (e^eps + 1)).

The probability of the high point lies in [1/(e^eps + 1), e^eps/(e^eps + 1)], so any two inputs
give output probabilities within a factor e^eps: eps-LDP. ``E[w*] = w`` and
``Var[w*] = r^2 ((e^eps + 1)/(e^eps - 1))^2 - (w - c)^2``.

Sampling is exact at every eps: the high point is reported when a 64-bit uniform integer falls
below a 64-bit threshold (:mod:`jfed._random`), and every threshold is kept inside
``[G, 2^64 - G]`` with ``G / 2^64 >= 1/(e^eps + 1)`` (:func:`jfed._random.floor_threshold`), so
the realised ratio of any output's probabilities under two inputs is at most e^eps exactly. (A
comparison ``uniform(f32) < p`` resolves probabilities only to 2^-23: above eps of about 16 the low
probability rounds to 0 and the ratio is unbounded.) The probabilities are exact to about
``(64 + eps) 2^-21`` relative up to eps of about 27 and never fall below 2^-64 beyond.

:class:`TwoPointSum` is the mechanism as a local randomizer over a vector of P values (an
aggregator, :mod:`jfed.privacy.aggregators`): each client reports every value, the server sums
the reports, and one release is P pure eps-DP reports per client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jfed import _random
from jfed._validation import check_int_range, check_positive
from jfed.privacy.guarantee import Adjacency
from jfed.privacy.randomized_response import report_event


def _checked(name: str, value):
    """Host values are checked; traced values (a sweep's eps) are the caller's to check."""
    return check_positive(name, value) if isinstance(value, int | float) else value


def high_probability(w: jax.Array, center, radius, epsilon) -> jax.Array:
    """Probability of reporting the high point for ``w`` (clipped to the range first), in the
    stable form ``(1 + tanh(eps/2) (w - c)/r) / 2`` (finite at every eps; near 0 it is limited by
    f32 absolute resolution: :func:`high_threshold` is what sampling uses)."""
    slope = jnp.tanh(jnp.asarray(epsilon, jnp.float32) / 2.0)
    w = jnp.clip(w, center - radius, center + radius)
    return 0.5 + 0.5 * slope * (w - center) / radius


def output_points(center, radius, epsilon) -> tuple[jax.Array, jax.Array]:
    """``(low, high)``: the two reportable values, ``c -+ r (e^eps + 1)/(e^eps - 1)``."""
    # (e^eps + 1)/(e^eps - 1) is exactly 1 in f32 from eps = 17 on; capping eps keeps it finite
    capped = jnp.minimum(jnp.asarray(epsilon, jnp.float32), 80.0)
    spread = radius * (jnp.exp(capped) + 1.0) / jnp.expm1(capped)
    return center - spread, center + spread


def high_threshold(w: jax.Array, center, radius, epsilon) -> tuple[jax.Array, jax.Array]:
    """The 64-bit threshold ``T(w)`` (``(high, low)`` words): the high point is reported with
    probability exactly ``T(w) / 2^64``, inside ``[G, 2^64 - G]`` (G from
    :func:`jfed._random.floor_threshold`).

    With ``g = 1/(e^eps + 1)`` and ``s = tanh(eps/2)``, ``p(w) = g + s (w - c + r)/(2r)`` and
    ``1 - p(w) = g + s (c + r - w)/(2r)``: the smaller of the two is computed in f32 from its own
    side (relative accuracy, no cancellation) and the larger is ``2^64`` minus it."""
    epsilon = jnp.asarray(epsilon, jnp.float32)
    floor = _random.floor_threshold(epsilon)
    slope = jnp.tanh(epsilon / 2.0)
    w = jnp.clip(w, center - radius, center + radius)
    floor_scaled = jnp.exp(np.float32(_random.LOG_TWO_64) - jax.nn.softplus(epsilon))
    span = np.float32(_random.TWO_64) * slope / (2.0 * radius)
    high_side = floor_scaled + span * (w - (center - radius))
    low_side = floor_scaled + span * ((center + radius) - w)
    smaller = _random.threshold_clip(
        _random.threshold_floor(jnp.minimum(high_side, low_side)), floor, _random.HALF
    )
    complement = _random.threshold_complement(smaller)
    high_is_smaller = high_side <= low_side
    return (
        jnp.where(high_is_smaller, smaller[0], complement[0]),
        jnp.where(high_is_smaller, smaller[1], complement[1]),
    )


def perturb(key: jax.Array, w: jax.Array, center, radius, epsilon) -> jax.Array:
    """Report every entry of ``w: f32[...]`` independently with the two-point mechanism.

    ``center``, ``radius`` and ``epsilon`` may be host floats (checked) or traced scalars, and
    ``center`` / ``radius`` may broadcast against ``w`` (a range per position). Each entry reads
    two random words (:func:`jfed._random.bernoulli_words`)."""
    radius, epsilon = _checked("radius", radius), _checked("epsilon", epsilon)
    return perturb_with_words(
        _random.bernoulli_words(key, jnp.shape(w)), w, center, radius, epsilon
    )


def perturb_with_words(
    words: tuple[jax.Array, jax.Array], w: jax.Array, center, radius, epsilon
) -> jax.Array:
    """:func:`perturb` with its random words given: ``words = (high, low): u32[...]`` each."""
    low, high = output_points(center, radius, epsilon)
    up = _random.threshold_less(words, high_threshold(w, center, radius, epsilon))
    return jnp.where(up, high, low).astype(jnp.float32)


def variance(w: float, center: float, radius: float, epsilon: float) -> float:
    """``Var[w*] = r^2 ((e^eps + 1)/(e^eps - 1))^2 - (w - c)^2``."""
    ratio = 1.0 / np.tanh(epsilon / 2.0)  # (e^eps + 1)/(e^eps - 1), finite at every eps
    return float(radius**2 * ratio**2 - (w - center) ** 2)


class TwoPointParams(NamedTuple):
    """Parameters of :class:`TwoPointSum` (``f32[]`` each on the device, floats on the host).

    Attributes:
      epsilon: eps of one reported value (> 0).
      radius: r > 0, the range's half-width.
    """

    epsilon: Any
    radius: Any


@dataclass(frozen=True)
class TwoPointSum:
    """Local DP: each client clips every value of its vector ``w: f32[size]`` into the range
    ``[c - r, c + r]`` and reports it with the two-point mechanism (:func:`perturb`, from the
    key ``preprocess`` gets: the client's privacy stream); the server sums the reports.

    The range's center ``c`` is the state (``f32[]`` or ``f32[size]``, public: what the server
    broadcast), the radius and eps are parameters. One release is ``size`` reports of a client,
    each pure eps-DP with the likelihood ratio of binary randomized response, whatever the two
    inputs (bounded adjacency): :meth:`event` is ``size`` of them, composed; a run composes its
    releases over the rounds (local: no sampling amplification is claimed).

    Attributes:
      size: P, the values a client reports per release.
    """

    size: int
    Params: ClassVar[type] = TwoPointParams
    local: ClassVar[bool] = True
    adjacency: ClassVar[Adjacency] = Adjacency.BOUNDED

    def __post_init__(self) -> None:
        check_int_range("size", self.size, 1, 2**62)

    def init(self, params: TwoPointParams, template: jax.Array) -> jax.Array:
        """A range centered at 0."""
        del params, template
        return jnp.zeros((), jnp.float32)

    def preprocess(
        self, params: TwoPointParams, center: jax.Array, update: jax.Array, key: jax.Array
    ) -> dict:
        """ONE client's reports of ``update: f32[size]`` and how many of its values lay outside
        the range (``clipped: f32[]``, a simulation diagnostic outside the transcript)."""
        outside = (update < center - params.radius) | (update > center + params.radius)
        reported = perturb(key, update, center, params.radius, params.epsilon)
        return {"value": reported, "clipped": jnp.sum(outside).astype(jnp.float32)}

    def release(
        self, params: TwoPointParams, center: jax.Array, summed: dict, key: jax.Array
    ) -> tuple[jax.Array, jax.Array, dict]:
        """The summed reports as they are (the noise is the clients')."""
        del params, key
        return summed["value"], center, {"clipped_count": summed["clipped"]}

    def event(self, params: TwoPointParams):
        """``size`` binary randomized-response reports of eps, composed (host side)."""
        from jfed.privacy.accounting import rounds_of

        return rounds_of(report_event(check_positive("epsilon", params.epsilon)), self.size)
