"""A client's bounded vector released on an integer grid with exact discrete Gaussian noise: the
local randomizer of the exact option (``--noise discrete``) of the one-sample-per-client methods.

One client's vector ``u: f32[d]`` (its message before noise) is clipped to a public radius R and
scaled so that R becomes ``L = grid_norm`` grid units: ``v = u L / R``, ``||v|| <= L``. It is
rounded to integers with a triangular dither, ``r = randomized_round(v + U)`` with ``U`` uniform
on ``[-1/2, 1/2)`` per coordinate, and the rounded vector's squared norm is checked exactly in
integers against ``B = ceil((L + 2 sqrt(d))^2)`` (each coordinate moves by less than 3/2, plus
float32's rounding of ``v + U``, so every draw meets it; the check, not the float arithmetic
before it, is what the guarantee rests on: a vector that failed it would be redrawn, then sent
as zeros). Exact discrete Gaussian noise ``N_Z(0, sigma^2)`` per coordinate, ``sigma^2 = 2^k m
>= z^2 4B`` (:func:`jfed.privacy.discrete.discrete_gaussian`), is added to the integers, and only
then is the release scaled back: ``(r + eta) R / L`` as float32 (post-processing).

Privacy. Any two rounded vectors of one client lie in the ball of radius ``sqrt(B)``, so they
differ by an integer vector of squared norm at most ``4B``, exactly, whatever its input, the
rounding's draws or the float operations before the check: one release is the discrete
Gaussian mechanism of L2 sensitivity ``2 sqrt(B)`` grid units and multiplier ``z``, its event
``DiscreteGaussianDpEvent(z, 2 sqrt(B), min(4B, 2 sqrt(d B)), d)``, ``rho = 1 / (2 z^2)``-zCDP
(Canonne, Kamath and Steinke 2020, Theorem 14), under bounded adjacency (any two inputs of the
client; the release is local, wrapped by no sampling). Dither and rounding draws are independent
of the data, so the guarantee holds for each of them and hence for their mixture.

Moments. The triangular dither makes the rounding error ``e = r - v`` independent of ``v`` in
its first two moments (non-subtractive dither of two quantisation steps: Wannamaker, Lipshitz and
Vanderkooy 2000): ``E[e] = 0``, ``E[e e^T] = I / 4``, for every ``v`` (to within 2^-23, the
resolution of the dither and of the rounding's bits). The noise is independent, of mean zero and
variance ``sigma^2`` (the discrete Gaussian's variance is below ``sigma^2`` by less than
``3 10^-7 sigma^2`` for ``sigma^2 >= 1``, which :meth:`LocalGridGaussian.check` demands, and by
less than ``10^-15 sigma^2`` from ``sigma^2 >= 2``: at the grids :func:`grid_norm_for` picks,
``sigma^2`` is in the millions). So
the release ``m`` of ``u`` has ``E[m] = u`` and ``E[m m^T] = u u^T + gamma^2 (sigma^2 + 1/4) I``,
``gamma = R / L``: a server that removes :meth:`LocalGridGaussian.noise_variance` from its
second moments is exactly as unbiased as with float Gaussian noise of that variance. (Plain
randomized rounding would leave an error variance ``f (1 - f)`` that depends on the data.)

References: C. Canonne, G. Kamath, T. Steinke, "The Discrete Gaussian for Differential Privacy",
NeurIPS 2020; P. Kairouz, Z. Liu, T. Steinke, "The Distributed Discrete Gaussian Mechanism for
Federated Learning with Secure Aggregation", ICML 2021 (rounding with an exact norm check);
R. Wannamaker, S. Lipshitz, J. Vanderkooy, "A Theory of Nonsubtractive Dither", IEEE Trans.
Signal Processing 48(2), 2000.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jfed._validation import check_int_range, check_positive
from jfed.privacy import discrete
from jfed.privacy.client_stream import KeyedUpdate
from jfed.privacy.clipping import clip_to_ball
from jfed.privacy.discrete_aggregators import check_variance, flatten, l1_bound, unflatten
from jfed.privacy.guarantee import Adjacency

if TYPE_CHECKING:
    import dp_accounting

MOST_GRID_NORM = 2**12
"""The finest grid :func:`grid_norm_for` chooses: R is 4,096 grid units where the noise allows."""

ROUNDING_VARIANCE = 0.25
"""``E[e_j^2]`` of the triangularly dithered rounding, in squared grid units, for every input."""

LEAST_NOISE_VARIANCE = 1.0
"""The discrete Gaussian's variance equals ``sigma^2`` to 3 10^-7 from here on (grid units)."""


class GridGaussianParams(NamedTuple):
    """Parameters of :class:`LocalGridGaussian` (``f32[]`` on the device, floats on the host).

    Attributes:
      radius: R > 0, the L2 bound a client's vector is clipped to (value units).
      noise_multiplier: z > 0; the noise variance on the grid is at least ``z^2 4B``.
    """

    radius: Any
    noise_multiplier: Any


@dataclass(frozen=True)
class LocalGridGaussian:
    """ONE client's vector on an integer grid plus exact discrete Gaussian noise (module doc).

    Attributes:
      dimension: d, the coordinates of the vector (static).
      grid_norm: L, the radius R in grid units (an integer in [1, 2^24];
        :func:`grid_norm_for` picks one for a noise multiplier).
      max_tries: roundings drawn before a vector that fails the check is sent as zeros (no
        draw fails it: see :attr:`squared_bound`).
    """

    dimension: int
    grid_norm: int = MOST_GRID_NORM
    max_tries: int = 2

    def __post_init__(self) -> None:
        check_int_range("dimension", self.dimension, 1, 2**24)
        check_int_range("grid_norm", self.grid_norm, 1, 2**24)
        check_int_range("max_tries", self.max_tries, 1, 64)

    @property
    def squared_bound(self) -> int:
        """B: the exact integer bound on a rounded vector's squared L2 norm,
        ``ceil((L + 2 sqrt(d))^2) = L^2 + 4d + ceil(4 L sqrt(d))``, in integer arithmetic. A
        rounded coordinate is within 3/2 of ``v_j`` (the dither's 1/2, the rounding's 1) plus
        the float32 rounding of its fraction plus the dither (below 2^-23); the other
        ``sqrt(d) / 2`` covers that and the clip's float error (a few 2^-24 of L)."""
        L, d = self.grid_norm, self.dimension
        product = 16 * L * L * d
        return L * L + 4 * d + math.isqrt(product - 1) + 1

    @property
    def squared_sensitivity(self) -> int:
        """``4B``: the squared L2 distance two of a client's rounded vectors may be apart."""
        return 4 * self.squared_bound

    def value_sensitivity(self, radius: float) -> float:
        """Host: ``2 sqrt(B) R / L``, the sensitivity in value units (``2 R`` inflated by the
        grid's rounding: :meth:`noise_inflation`)."""
        return 2.0 * math.sqrt(self.squared_bound) * float(radius) / self.grid_norm

    def noise_inflation(self) -> float:
        """``sqrt(B) / L``: the sensitivity over the unrounded vector's ``2 R``."""
        return math.sqrt(self.squared_bound) / self.grid_norm

    def noise_parameters(self, params: GridGaussianParams):
        """``(k, m, in_range)``: the noise ``N_Z(0, 2^k m)`` with ``2^k m >= z^2 4B``
        (:func:`~jfed.privacy.discrete.variance_at_least`, then
        :func:`~jfed.privacy.discrete.discrete_gaussian_parameters`; the host computes the same
        pair from the same float32 ``z``), and whether it is in the sampler's range."""
        least = discrete.variance_at_least(params.noise_multiplier, self.squared_sensitivity)
        bits, quotient = discrete.discrete_gaussian_parameters(least)
        return bits, quotient, discrete.variance_in_range(least)

    def integers(self, key: jax.Array, vector: jax.Array, radius: jax.Array) -> jax.Array:
        """``i32[d]``: ``vector: f32[d]`` clipped to ``radius``, in grid units, rounded with
        the triangular dither and checked exactly against :attr:`squared_bound`."""
        dither_key, rounding_key = jax.random.split(key)
        scaled, _ = clip_to_ball(jnp.asarray(vector, jnp.float32) * (self.grid_norm / radius),
                                 jnp.float32(self.grid_norm))  # fmt: skip
        dither = jax.random.uniform(dither_key, scaled.shape, jnp.float32, -0.5, 0.5)
        floor = jnp.floor(scaled)
        # rounded on the fraction, whose sum with the dither float32 holds to 2^-23 whatever
        # the magnitude of v_j; the floor joins after the rounding
        rounded, _ = discrete.conditional_round(
            rounding_key, (scaled - floor) + dither, self.squared_bound, self.max_tries
        )
        return rounded + floor.astype(jnp.int32)

    def release(self, key: jax.Array, vector: jax.Array, params: GridGaussianParams) -> jax.Array:
        """``f32[d]``: ONE client's release of ``vector: f32[d]``, ``(r + eta) R / L``; NaN
        everywhere if the noise's variance left the sampler's range (the host's :meth:`check`
        refuses such parameters first)."""
        rounding_key, noise_key = jax.random.split(key)
        rounded = self.integers(rounding_key, vector, params.radius)
        bits, quotient, in_range = self.noise_parameters(params)
        noise = discrete.discrete_gaussian(noise_key, rounded.shape, bits, quotient)
        return jnp.where(in_range, self.scaled_back(rounded + noise, params), jnp.nan)

    def scaled_back(self, noised: jax.Array, params: GridGaussianParams) -> jax.Array:
        """``f32[...]``: noised integers in value units, ``R / L`` times them (the release's
        float map: post-processing of the exact noised integers)."""
        return noised.astype(jnp.float32) * (params.radius / self.grid_norm)

    def noise_variance(self, params: GridGaussianParams) -> jax.Array:
        """``f32[]``: ``(R / L)^2 (2^k m + 1/4)``, what a release adds to each coordinate's
        second moment around the clipped vector (value units, the pair the clients draw with)."""
        bits, quotient, _ = self.noise_parameters(params)
        variance = ((jnp.uint32(1) << bits) * quotient).astype(jnp.float32) + ROUNDING_VARIANCE
        return variance * (params.radius / self.grid_norm) ** 2

    def noise_std(self, params: GridGaussianParams) -> float:
        """Host: ``sqrt(2^k m) R / L``, the discrete Gaussian's standard deviation in value
        units (float64, from the pair the device draws with)."""
        variance = host_noise_variance(float(np.float32(params.noise_multiplier)),
                                       self.squared_sensitivity)  # fmt: skip
        return math.sqrt(variance) * float(params.radius) / self.grid_norm

    def event(self, params: GridGaussianParams) -> dp_accounting.DpEvent:
        """``DiscreteGaussianDpEvent(z, 2 sqrt(B), min(4B, 2 sqrt(d B)), d)`` of one release
        (host; bounded adjacency). The radius does not enter: the sensitivity is the grid's."""
        from jfed.privacy.discrete_accounting import DiscreteGaussianDpEvent

        check_positive("radius", params.radius)
        z = check_positive("noise_multiplier", params.noise_multiplier)
        squared = self.squared_sensitivity
        return DiscreteGaussianDpEvent(z, math.sqrt(squared), l1_bound(squared, self.dimension),
                                       self.dimension)  # fmt: skip

    def check(self, params: GridGaussianParams) -> None:
        """Host: ``ValueError`` naming the parameters unless the noise of ``params`` is in the
        sampler's range on this grid and at least :data:`LEAST_NOISE_VARIANCE`."""
        z = check_positive("noise_multiplier", params.noise_multiplier)
        check_variance(z, self.squared_sensitivity, 1, self.grid_norm)
        if z * z * self.squared_sensitivity < LEAST_NOISE_VARIANCE:
            raise ValueError(
                f"noise_multiplier={z:g} on a grid of grid_norm={self.grid_norm} gives a discrete "
                f"Gaussian variance below {LEAST_NOISE_VARIANCE:g} grid units, where its variance "
                "departs from sigma^2: raise grid_norm"
            )


@functools.partial(jax.jit, static_argnums=1)
def _noise_pair(noise_multiplier: jax.Array, squared_sensitivity: int):
    least = discrete.variance_at_least(noise_multiplier, squared_sensitivity)
    return discrete.discrete_gaussian_parameters(least)


def host_noise_variance(noise_multiplier: float, squared_sensitivity: int) -> int:
    """Host: ``2^k m``, the discrete Gaussian variance (grid units) the device draws with for
    the float32 ``noise_multiplier`` and an integer squared sensitivity (one compiled program
    per sensitivity, not an eager operation each)."""
    bits, quotient = _noise_pair(jnp.float32(noise_multiplier), int(squared_sensitivity))
    return 2 ** int(bits) * int(quotient)


def grid_norm_for(noise_multiplier: float, dimension: int, most: int = MOST_GRID_NORM) -> int:
    """Host: the largest power of two ``L <= most`` on which :class:`LocalGridGaussian` runs at
    ``noise_multiplier`` (the largest of a sweep: every smaller one fits too): its noise variance
    ``z^2 4B`` below the sampler's limit (2^31 - 2^16) and at least
    :data:`LEAST_NOISE_VARIANCE`. ``ValueError`` naming the numbers if no grid does."""
    z = check_positive("noise_multiplier", noise_multiplier)
    grid_norm = int(most)
    while grid_norm >= 1:
        randomizer = LocalGridGaussian(dimension, grid_norm)
        try:
            randomizer.check(GridGaussianParams(1.0, z))
        except ValueError:
            grid_norm //= 2
            continue
        return grid_norm
    raise ValueError(
        f"no integer grid holds the discrete Gaussian noise of noise_multiplier={z:g} in "
        f"{dimension} coordinates (its variance exceeds the sampler's 2^31 - 2^16 on every grid)"
    )


class GridSumParams(NamedTuple):
    """Parameters of :class:`LocalGridGaussianSum` (``f32[]`` on the device, floats on the host).

    Attributes:
      clip_norm: C > 0, the L2 bound each client clips its update to (the grid's radius).
      noise_multiplier: z > 0, as :class:`GridGaussianParams`'.
    """

    clip_norm: Any
    noise_multiplier: Any


@dataclass(frozen=True)
class LocalGridGaussianSum:
    """Local DP on the integer grid, an aggregator (:mod:`jfed.privacy.aggregators`): each client
    clips its update (a :class:`~jfed.privacy.client_stream.KeyedUpdate`, whose key the release
    draws from) to C and releases it through :class:`LocalGridGaussian` of radius C; the server
    sums the releases (no central noise). The exact counterpart of
    :class:`~jfed.privacy.client_stream.ClientStreamRandomizerSum` with Gaussian noise: its event
    is one message's ``DiscreteGaussianDpEvent`` (bounded adjacency: any two inputs of a client;
    local: wrapped by no sampling), sensitivity ``2 sqrt(B)`` grid units, about ``2 C``.

    Attributes:
      randomizer: every client's release: its dimension d (the coordinates of an update, all
        its leaves flattened) and grid norm L, C in grid units (:func:`grid_norm_for`).
    """

    randomizer: LocalGridGaussian
    Params: ClassVar[type] = GridSumParams
    local: ClassVar[bool] = True
    adjacency: ClassVar[Adjacency] = Adjacency.BOUNDED

    @staticmethod
    def grid_params(params: GridSumParams) -> GridGaussianParams:
        return GridGaussianParams(params.clip_norm, params.noise_multiplier)

    def init(self, params: GridSumParams, template: Any) -> tuple:
        del params, template
        return ()

    def preprocess(
        self, params: GridSumParams, state: tuple, update: KeyedUpdate, key: jax.Array
    ) -> dict:
        """ONE client's ``{"value": its release, shaped like its update, "clipped": f32[]}``
        (``clipped``: whether the update was longer than C, a diagnostic outside the
        guarantee)."""
        del state, key  # the release draws from the key of the update
        vector = flatten(update.update)
        clipped = (jnp.linalg.norm(vector) > params.clip_norm).astype(jnp.float32)
        released = self.randomizer.release(update.key, vector, self.grid_params(params))
        return {"value": unflatten(released, update.update), "clipped": clipped}

    def release(
        self, params: GridSumParams, state: tuple, summed: dict, key: jax.Array
    ) -> tuple[Any, tuple, dict]:
        """The summed releases as they are (the noise is the clients')."""
        del params, key
        return summed["value"], state, {"clipped_count": summed["clipped"]}

    def sensitivity(self, clip_norm: float) -> float:
        """Host: ``2 sqrt(B) C / L``, the sensitivity in value units."""
        return self.randomizer.value_sensitivity(clip_norm)

    def event(self, params: GridSumParams) -> dp_accounting.DpEvent:
        """``DiscreteGaussianDpEvent(z, 2 sqrt(B), ...)`` of one message (host)."""
        return self.randomizer.event(self.grid_params(params))
