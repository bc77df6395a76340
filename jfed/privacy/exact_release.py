"""Exact checks of a release as the program runs it: the law of one output coordinate on two
neighbouring inputs, and the hockey-stick divergence between the two laws.

A mechanism is (eps, delta)-DP on a pair of inputs exactly when ``delta >= max(H(P || Q), H(Q ||
P))`` with ``H(P || Q) = sum_y max(0, P(y) - e^eps Q(y))`` over the outputs ``y`` the program can
produce (:func:`hockey_stick`). Here the laws are those of the code that runs, not of the ideal
mechanism:

- the integer-grid aggregators (:mod:`jfed.privacy.discrete_aggregators`): the integer sum plus
  discrete noise whose law is known exactly, then the release's own float operations (computed
  by JAX, as the release computes them), so the output law is the noise's pmf pushed through the
  float map (:func:`grid_release_law`);
- the float mechanisms: JAX's float32 noise is a function of 32 random bits, of which the
  samplers read 23 (the uniform's mantissa), so running the sampler on all 2^23 words (a PRNG
  that replays a counter, :func:`enumerated_noise`) gives every noise value it can draw, each of
  probability 2^-23. ``jax.random.laplace`` reads nothing else; jfed's private normals refine the
  two extreme cells with more bits, whose law is not enumerated: their mass (2^-22) is kept
  apart and every bound below holds whatever it does (:func:`float_release_law`).

Probabilities are float64: a delta computed from the pmf has relative error of order 1e-15 per
term, and the discrete noise's mass beyond the enumerated support (40 standard deviations or
scales) is below 1e-300.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import define_prng_impl

from jfed.privacy import discrete

CELLS = 2**23
"""The number of distinct uniforms behind a float32 draw of ``jax.random`` (23 mantissa bits)."""


class ReleaseLaw(NamedTuple):
    """The law of one output coordinate.

    Attributes:
      outputs: ``f[n]`` the distinct values the program can output (sorted).
      masses: ``f64[n]`` their probabilities (the enumerated part).
      unknown: the probability not enumerated (it may land on any output, or elsewhere).
    """

    outputs: np.ndarray
    masses: np.ndarray
    unknown: float = 0.0


def _grouped(outputs: np.ndarray, masses: np.ndarray, unknown: float = 0.0) -> ReleaseLaw:
    values, inverse = np.unique(outputs, return_inverse=True)
    return ReleaseLaw(values, np.bincount(inverse.ravel(), weights=masses.ravel()), unknown)


def hockey_stick(p: ReleaseLaw, q: ReleaseLaw, epsilon: float) -> float:
    """``max(H(P || Q), H(Q || P))`` at ``epsilon``, exact for enumerated laws; a lower bound
    when a law has unknown mass: the sum runs over the outputs where the enumerated masses
    exceed ``e^eps`` times the other's, charging the other's unknown mass to them."""
    outputs = np.union1d(p.outputs, q.outputs)

    def aligned(law: ReleaseLaw) -> np.ndarray:
        mass = np.zeros(outputs.shape, np.float64)
        mass[np.searchsorted(outputs, law.outputs)] = law.masses
        return mass

    p_mass, q_mass = aligned(p), aligned(q)
    factor = math.exp(epsilon)

    def one_way(first, second, second_unknown):
        excess = first - factor * second
        return max(0.0, float(np.sum(excess[excess > 0])) - factor * second_unknown)

    return max(one_way(p_mass, q_mass, q.unknown), one_way(q_mass, p_mass, p.unknown))


# ------------------------------------------------------------------------- integer-grid releases


def _support(spread: float) -> np.ndarray:
    reach = int(40 * spread) + 40
    return np.arange(-reach, reach + 1, dtype=np.int64)


def grid_release_law(aggregator: Any, params: Any, integer_sum: int) -> ReleaseLaw:
    """The law of one coordinate of ``aggregator.release`` (a
    :class:`~jfed.privacy.discrete_aggregators.DiscreteGaussianSum` or
    :class:`~jfed.privacy.discrete_aggregators.DiscreteLaplaceSum`) when the clients' integer
    sum at that coordinate is ``integer_sum``: the noise's exact pmf, with the noise parameters
    the device computes for ``params``, pushed through the release's float map (run by JAX)."""
    from jfed.privacy.discrete_aggregators import LAPLACE_SCALE_BITS, DiscreteGaussianSum

    params = type(params)(*(jnp.asarray(value, jnp.float32) for value in params))
    if isinstance(aggregator, DiscreteGaussianSum):
        bits, quotient, in_range = jax.jit(aggregator.noise_parameters)(params)
        if not bool(in_range):
            raise ValueError("the parameters leave the discrete Gaussian sampler's range")
        variance = float(2 ** int(bits) * int(quotient))
        noise = _support(math.sqrt(variance))
        masses = np.exp(discrete.discrete_gaussian_log_pmf(noise, variance))
    else:
        scale = 2.0**LAPLACE_SCALE_BITS / int(jax.jit(aggregator.divisor)(params))
        noise = _support(scale)
        masses = np.exp(discrete.discrete_laplace_log_pmf(noise, scale))

    @jax.jit
    def released(totals):  # the release's float map of the noised integer sums
        return totals.astype(jnp.float32) * (params.clip_norm / aggregator.grid_norm)

    totals = jnp.asarray(integer_sum + noise, jnp.int32)
    return _grouped(np.asarray(released(totals)), masses)


# ------------------------------------------------------------------------------- float releases


def _replay_seed(seed: jax.Array) -> jax.Array:
    return jnp.reshape(jnp.asarray(seed, jnp.uint32), (1,))


def _replay_split(data: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return jnp.broadcast_to(data, (*shape, 1))


def _replay_fold_in(data: jax.Array, value: Any) -> jax.Array:
    del value
    return data


def _replay_bits(data: jax.Array, bit_width: int, shape: tuple[int, ...]) -> jax.Array:
    if bit_width != 32:
        raise ValueError("the enumerating PRNG draws 32-bit words only")
    count = int(np.prod(shape))
    # word j is cell j's first word (the mantissa the samplers read), from the key's start cell
    cells = data[0] + jnp.arange(count, dtype=jnp.uint32)
    return (cells << np.uint32(9)).reshape(shape)


ENUMERATE = define_prng_impl(key_shape=(1,), seed=_replay_seed, split=_replay_split,
                             random_bits=_replay_bits, fold_in=_replay_fold_in,
                             name="jfed_enumerate", tag="jfe")  # fmt: skip
"""A PRNG whose j-th 32-bit word is ``(start + j) << 9``: a sampler that reads the top 23 bits
of word j draws the value of uniform cell ``start + j`` (splits and folds keep the start)."""


def enumerated_noise(sample, cells: int = CELLS) -> np.ndarray:
    """``sample(key, shape)`` (a float noise function of a PRNG key) on the enumerating key:
    ``f32[cells]``, the value of every uniform cell in order."""
    key = jax.random.wrap_key_data(jnp.zeros((1,), jnp.uint32), impl=ENUMERATE)
    return np.asarray(jax.jit(lambda k: sample(k, (cells,)))(key))


def float_release_law(
    total: float, noise: np.ndarray, excluded_cells: tuple[int, ...] = ()
) -> ReleaseLaw:
    """The law of ``float32(total) + noise`` (float32 addition, as a release adds its noise) for
    the enumerated ``noise: f32[2^23]`` (one value per cell, each of probability 2^-23), the
    ``excluded_cells`` kept apart as unknown mass."""
    keep = np.ones(noise.shape, bool)
    keep[list(excluded_cells)] = False
    outputs = np.asarray(jnp.float32(total) + jnp.asarray(noise[keep]))
    masses = np.full(outputs.shape, 1.0 / noise.size)
    return _grouped(outputs, masses, unknown=len(excluded_cells) / noise.size)


PRIVATE_NORMAL_TAIL_CELLS = (0, CELLS - 1)
"""The cells jfed's private normals refine with further bits (not enumerated)."""
