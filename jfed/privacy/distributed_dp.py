"""Distributed DP with secure aggregation: no trusted server.

Every client adds its own share of the noise before its message leaves, and the server sees only
the sum of the messages modulo ``2^bits`` (what secure aggregation reveals). The pipeline of
Kairouz, Liu and Steinke (2021, the distributed discrete Gaussian, "DDGauss") and Agarwal,
Kairouz and Liu (2021, the Skellam mechanism), as TFF's ``DistributedDpSumFactory`` runs it:

1. clip the update to L2 norm C (floats), pad it to a power of two and rotate it with a
   randomized Hadamard transform (public randomness, the same for every client of a release:
   it spreads a vector's mass over the coordinates so that few wrap around);
2. scale C to ``grid_norm`` L grid units and round by conditional randomized rounding until the
   squared norm is at most the integer bound B (checked exactly);
3. add the client's noise share: ``N_Z(0, s^2)`` (exact, :func:`jfed.privacy.discrete.
   discrete_gaussian`) or Skellam ``Poisson(s^2 / 2) - Poisson(s^2 / 2)``, with ``s^2 >= z^2 B /
   min_clients``;
4. reduce modulo ``2^bits`` (unsigned 32-bit words; the engine's uint32 sum wraps modulo 2^32, a
   multiple of 2^bits, so the server's sum is the secure aggregation's);
5. the server centres the sum into ``[-2^(bits-1), 2^(bits-1))``, scales back, unrotates.

Dropouts: a client drops out with probability ``dropout_rate`` (its own key) and sends nothing:
neither its update nor its noise share. The guarantee counts ``min_clients`` shares; a release
with fewer survivors is withheld (the value is zeros and ``withheld`` is 1), so no release ever
has less noise than accounted. More survivors only add independent noise (post-processing).

The guarantee (``event``) is stated for zero-out adjacency of one participating client: its
update replaced by zeros while its noise share is still sent (the distributed mechanisms'
analysis: the number of shares does not depend on the protected data), with at least
``min_clients`` shares summed. Events: :class:`~jfed.privacy.discrete_accounting.
DiscreteGaussianDpEvent` with ``shares = min_clients`` (KLS's bound, with its ``tau`` term) and
:class:`~jfed.privacy.discrete_accounting.SkellamDpEvent`.

Wraparound: a coordinate of the true sum outside ``[-2^(bits-1), 2^(bits-1))`` comes back
wrapped (a wrong value, not a privacy failure). With ``count_wraps`` every record also carries its
unreduced int32 message so the release can count the wrapped coordinates, a diagnostic from
unnoised data (``wrapped_coordinates``, listed in :data:`~jfed.privacy.discrete_aggregators.
NOT_PRIVATE`, as are ``survivors``, ``withheld``, the clip counts and norms).
:func:`grid_norm_for_bits` picks the largest grid that keeps the sum inside the field with
``stddevs`` standard deviations to spare (TFF's heuristic).

Exactness: the discrete Gaussian shares are exact (integer arithmetic). The Skellam shares come
from ``jax.random.poisson``, a floating-point sampler: their law is the ideal Skellam's only up
to its floating-point error, which is not modelled (the record must say so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jfed._validation import check_positive
from jfed.privacy import discrete
from jfed.privacy.discrete_aggregators import (
    DEFAULT_BETA,
    check_variance,
    clip_l2,
    flatten,
    grid_check,
    l1_bound,
    on_grid,
    unflatten,
)
from jfed.privacy.guarantee import Adjacency

if TYPE_CHECKING:
    import dp_accounting

PyTree = Any


def hadamard(vector: jax.Array) -> jax.Array:
    """``H x / sqrt(n)`` for ``vector: f32[n]``, n a power of two: the fast Walsh-Hadamard
    transform (``log2 n`` butterflies), orthonormal and its own inverse."""
    size = vector.shape[-1]
    width = 1
    while width < size:
        pairs = vector.reshape(-1, 2, width)
        vector = jnp.stack([pairs[:, 0] + pairs[:, 1], pairs[:, 0] - pairs[:, 1]], axis=1)
        width *= 2
    return vector.reshape(size) / np.float32(math.sqrt(size))


def _signs(rotation: jax.Array, size: int) -> jax.Array:
    key = jax.random.wrap_key_data(rotation, impl="threefry2x32")
    return 1.0 - 2.0 * (jax.random.bits(key, (size,), jnp.uint32) & 1).astype(jnp.float32)


def rotate(vector: jax.Array, rotation: jax.Array) -> jax.Array:
    """The randomized Hadamard rotation ``H D x / sqrt(n)``, ``D`` the random signs of the key
    data ``rotation: u32[2]`` (threefry)."""
    return hadamard(_signs(rotation, vector.shape[-1]) * vector)


def unrotate(vector: jax.Array, rotation: jax.Array) -> jax.Array:
    """The inverse of :func:`rotate`: ``D H y / sqrt(n)``."""
    return _signs(rotation, vector.shape[-1]) * hadamard(vector)


def padded_dimension(dimension: int, rotation: bool) -> int:
    """The dimension of a message: the next power of two when rotating."""
    return 2 ** math.ceil(math.log2(dimension)) if rotation else dimension


def grid_norm_for_bits(
    bits: int, clients: int, noise_multiplier: float, dimension: int, stddevs: float = 4.0,
    beta: float = DEFAULT_BETA,
) -> int:  # fmt: skip
    """Host: the largest grid norm L whose sum of ``clients`` messages stays within the field
    ``[-2^(bits-1), 2^(bits-1))`` at ``stddevs`` standard deviations, taking a rotated
    coordinate of the sum as sub-Gaussian of variance ``(clients L)^2 / d + clients / 4 + z^2
    B(L)`` (the updates aligned, the rounding, the noise; Kairouz, Liu and Steinke Sec. 4.4)."""
    half = 2.0 ** (bits - 1)

    def fits(grid_norm: int) -> bool:
        bound = discrete.rounded_squared_norm_bound(grid_norm, dimension, beta)
        variance = ((clients * grid_norm) ** 2 / dimension + clients / 4.0
                    + noise_multiplier**2 * bound)  # fmt: skip
        return stddevs * math.sqrt(variance) < half

    low, high = 0, 2**24
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    if low < 1:
        raise ValueError(f"bits={bits} cannot hold the sum of {clients} clients at "
                         f"noise_multiplier={noise_multiplier:g}: raise bits")  # fmt: skip
    return low


def drawable_grid_norm(
    grid_norm: int, noise_multiplier: float, dimension: int, shares: int,
    beta: float = DEFAULT_BETA,
) -> int:  # fmt: skip
    """Host: the largest grid norm ``L <= grid_norm`` on which one of ``shares`` noise shares
    stays in the sampler's range (:func:`check_variance`: ``z^2 B(L) / shares``): the field's
    grid (:func:`grid_norm_for_bits`) bounds the sum, not a share, and a share of few clients
    (``min_clients`` 1 at a high dropout rate) carries the whole noise. ``ValueError`` if no
    grid does."""

    def fits(norm: int) -> bool:
        bound = discrete.rounded_squared_norm_bound(norm, dimension, beta)
        try:
            check_variance(noise_multiplier, bound, shares, norm)
        except ValueError:
            return False
        return True

    if fits(grid_norm):
        return grid_norm
    low, high = 0, grid_norm  # fits(low), not fits(high); B(L) grows with L
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    if low < 1:
        raise ValueError(
            f"no grid holds a share of the noise of {shares} clients at "
            f"noise_multiplier={noise_multiplier:g} in the sampler's range"
        )
    return low


class DistributedSumParams(NamedTuple):
    """Parameters of the distributed sums (``f32[]`` on device, floats on the host).

    Attributes:
      clip_norm: C > 0, the L2 bound on one client's update.
      noise_multiplier: z > 0: the shares of ``min_clients`` clients sum to a noise of variance
        at least ``z^2 B`` on the grid.
      dropout_rate: probability in [0, 1) that a client drops out after being chosen.
    """

    clip_norm: Any
    noise_multiplier: Any
    dropout_rate: Any = 0.0


class DistributedState(NamedTuple):
    """``rotation: u32[2]``, the public key data of the next release's rotation, and
    ``template``, zeros shaped like one client's update (for the release's output)."""

    rotation: jax.Array
    template: PyTree


@dataclass(frozen=True)
class _SecureSum:
    """The pipeline of the module docstring; the subclasses choose the noise shares."""

    dimension: int
    min_clients: int
    bits: int = 20
    grid_norm: int = 2**8
    beta: float = DEFAULT_BETA
    max_tries: int = 32
    rotation: bool = True
    count_wraps: bool = True
    Params: ClassVar[type] = DistributedSumParams
    adjacency: ClassVar[Adjacency] = Adjacency.ZERO_OUT

    def __post_init__(self) -> None:
        name = type(self).__name__
        grid_check(name, self.grid_norm, self.beta, self.max_tries)
        if int(self.dimension) != self.dimension or self.dimension < 1:
            raise ValueError(f"{name}: expected dimension >= 1, got {self.dimension}")
        if int(self.min_clients) != self.min_clients or self.min_clients < 1:
            raise ValueError(f"{name}: expected min_clients >= 1, got {self.min_clients}")
        if int(self.bits) != self.bits or not 2 <= self.bits <= 32:
            raise ValueError(f"{name}: expected bits in [2, 32], got {self.bits}")

    @property
    def message_dimension(self) -> int:
        """The padded dimension of a message (a power of two when rotating)."""
        return padded_dimension(self.dimension, self.rotation)

    @property
    def squared_bound(self) -> int:
        """B: the exact integer bound on a rounded message's squared norm (grid units)."""
        return discrete.rounded_squared_norm_bound(self.grid_norm, self.message_dimension,
                                                   self.beta)  # fmt: skip

    def _mask(self) -> np.uint32:
        return np.uint32(2**self.bits - 1)

    def share_variance(self, params: DistributedSumParams) -> jax.Array:
        """``u32[]``: a share's least variance, an integer ``>= z^2 B / min_clients``, so
        ``min_clients`` shares carry at least ``z^2 B``; 1 where :meth:`in_range` is False (the
        release is then withheld)."""
        share = self._share_variance(params)
        return jnp.where(discrete.variance_in_range(share), share, np.uint32(1))

    def _share_variance(self, params: DistributedSumParams) -> jax.Array:
        return discrete.variance_at_least(params.noise_multiplier, self.squared_bound,
                                          self.min_clients)  # fmt: skip

    def in_range(self, params: DistributedSumParams) -> jax.Array:
        """``bool[]``: whether a share's variance is in the sampler's range (else the noise
        would not be what the event states, and the release is withheld)."""
        return discrete.variance_in_range(self._share_variance(params))

    def _share(self, key: jax.Array, params: DistributedSumParams, size: int) -> jax.Array:
        raise NotImplementedError

    def init(self, params: DistributedSumParams, template: PyTree) -> DistributedState:
        del params
        zeros = jax.tree.map(lambda x: jnp.zeros(jnp.shape(x), jnp.result_type(x)), template)
        return DistributedState(jax.random.key_data(jax.random.key(0)), zeros)

    def preprocess(
        self, params: DistributedSumParams, state: DistributedState, update: PyTree,
        key: jax.Array,
    ) -> dict:  # fmt: skip
        """ONE client's message: rotated, rounded, noised, modulo 2^bits (``u32[n]``); its
        survival (``count``), and diagnostics (zero if it dropped out)."""
        rounding_key, noise_key, dropout_key = jax.random.split(key, 3)
        vector = flatten(update)
        if vector.shape[0] != self.dimension:
            raise ValueError(f"{type(self).__name__}: expected an update of dimension="
                             f"{self.dimension} coordinates, got {vector.shape[0]}")  # fmt: skip
        clipped, was_clipped, norm = clip_l2(vector, params.clip_norm)
        padded = jnp.pad(clipped, (0, self.message_dimension - self.dimension))
        if self.rotation:
            padded = rotate(padded, state.rotation)
        rounded, fell_back = discrete.conditional_round(
            rounding_key, on_grid(padded, params.clip_norm, self.grid_norm), self.squared_bound,
            self.max_tries,
        )  # fmt: skip
        survived = jax.random.uniform(dropout_key) >= params.dropout_rate
        message = jnp.where(survived, rounded + self._share(noise_key, params, padded.shape[0]), 0)
        alive = survived.astype(jnp.float32)
        record = {
            "value": lax.bitcast_convert_type(message, jnp.uint32) & self._mask(),
            "count": alive,
            "clipped": was_clipped * alive,
            "norm": norm * alive,
            "rounding_fallbacks": fell_back * alive,
        }
        if self.count_wraps:
            record["shadow"] = message
        return record

    def release(
        self, params: DistributedSumParams, state: DistributedState, summed: dict, key: jax.Array
    ) -> tuple[PyTree, DistributedState, dict]:
        """The centred modular sum, scaled back and unrotated; zeros (``withheld``) when fewer
        than ``min_clients`` survived. ``key`` draws the next release's rotation."""
        total = summed["value"] & self._mask()
        if self.bits == 32:
            centred = lax.bitcast_convert_type(total, jnp.int32)
        else:
            half = np.uint32(2 ** (self.bits - 1))
            centred = ((total + half) & self._mask()).astype(jnp.int32) - np.int32(half)
        value = centred.astype(jnp.float32) * (params.clip_norm / self.grid_norm)
        if self.rotation:
            value = unrotate(value, state.rotation)
        # fewer shares than accounted, or a noise the event does not state: nothing released
        withheld = (summed["count"] < self.min_clients) | ~self.in_range(params)
        value = jnp.where(withheld, 0.0, value[: self.dimension])
        share = self.share_variance(params).astype(jnp.float32)
        diagnostics = {
            "clip": jnp.asarray(params.clip_norm, jnp.float32),
            "noise_std_at_least": jnp.sqrt(share * self.min_clients)
            * params.clip_norm
            / self.grid_norm,
            "survivors": summed["count"],
            "withheld": withheld.astype(jnp.float32),
            "clipped_count": summed["clipped"],
            "norm_sum": summed["norm"],
            "rounding_fallbacks": summed["rounding_fallbacks"],
        }
        if self.count_wraps:
            half = 2 ** (self.bits - 1)
            shadow = summed["shadow"]  # the int32 sum (itself exact below 2^31)
            outside = (shadow < -half) | (shadow >= half) if self.bits < 32 else shadow != shadow
            diagnostics["wrapped_coordinates"] = jnp.sum(outside).astype(jnp.float32)
        next_state = DistributedState(jax.random.bits(key, (2,), jnp.uint32), state.template)
        return unflatten(value, state.template), next_state, diagnostics

    def _check(self, params: DistributedSumParams) -> float:
        check_positive("clip_norm", params.clip_norm)
        z = check_positive("noise_multiplier", params.noise_multiplier)
        rate = float(params.dropout_rate)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"expected dropout_rate in [0, 1), got dropout_rate={rate}")
        return z

    def check(self, params: DistributedSumParams) -> None:
        """Host: ``ValueError`` naming the parameters unless a share's noise is in the sampler's
        range on this grid (the event is stated for any ``z``, so that a calibration may search
        through it; out of range, every release is withheld)."""
        check_variance(self._check(params), self.squared_bound, self.min_clients, self.grid_norm)


@dataclass(frozen=True)
class DistributedDiscreteGaussianSum(_SecureSum):
    """DDGauss (Kairouz, Liu and Steinke 2021): each client adds an exact ``N_Z(0, s^2)`` share.

    Attributes:
      dimension: d, the coordinates of a client's update.
      min_clients: n, the least number of shares a release sums (fewer: withheld).
      bits: the secure aggregation field 2^bits (2 to 32).
      grid_norm: L, the clip norm in grid units (:func:`grid_norm_for_bits`).
      beta, max_tries: conditional rounding's parameter and tries.
      rotation: rotate by a randomized Hadamard transform (pads d to a power of two).
      count_wraps: carry each unreduced message to count wrapped coordinates (a diagnostic).
    """

    def _share(self, key: jax.Array, params: DistributedSumParams, size: int) -> jax.Array:
        bits, quotient = discrete.discrete_gaussian_parameters(self.share_variance(params))
        return discrete.discrete_gaussian(key, (size,), bits, quotient)

    def event(self, params: DistributedSumParams) -> dp_accounting.DpEvent:
        """``DiscreteGaussianDpEvent(z, sqrt(B), min(B, sqrt(n B)), n, shares=min_clients)`` on
        the message's n coordinates (host; zero-out adjacency, see the module docstring)."""
        from jfed.privacy.discrete_accounting import DiscreteGaussianDpEvent

        z = self._check(params)
        bound, size = self.squared_bound, self.message_dimension
        return DiscreteGaussianDpEvent(z, math.sqrt(bound), l1_bound(bound, size), size,
                                       shares=self.min_clients)  # fmt: skip


@dataclass(frozen=True)
class SkellamSum(_SecureSum):
    """The distributed Skellam mechanism (Agarwal, Kairouz and Liu 2021): each client adds
    ``Poisson(s^2 / 2) - Poisson(s^2 / 2)`` (variance ``s^2``); Skellam shares sum to Skellam.
    Its Poisson draws are ``jax.random.poisson``'s (floating point, not modelled). Same fields
    as :class:`DistributedDiscreteGaussianSum`."""

    def _share(self, key: jax.Array, params: DistributedSumParams, size: int) -> jax.Array:
        rate = self.share_variance(params).astype(jnp.float32) / 2.0
        # jax.random.poisson draws from threefry keys only: one is made from the key's own bits
        # (whatever implementation the engine's client keys use)
        threefry = jax.random.wrap_key_data(jax.random.bits(key, (2,), jnp.uint32),
                                            impl="threefry2x32")  # fmt: skip
        positive, negative = jax.random.split(threefry)
        draw = jax.random.poisson
        return draw(positive, rate, (size,), jnp.int32) - draw(negative, rate, (size,), jnp.int32)

    def event(self, params: DistributedSumParams) -> dp_accounting.DpEvent:
        """``SkellamDpEvent(z, sqrt(B), min(B, sqrt(n B)), n)`` on the message's n coordinates
        (host; zero-out adjacency)."""
        from jfed.privacy.discrete_accounting import SkellamDpEvent

        z = self._check(params)
        bound, size = self.squared_bound, self.message_dimension
        return SkellamDpEvent(z, math.sqrt(bound), l1_bound(bound, size), size)
