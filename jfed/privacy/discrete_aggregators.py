"""Central aggregators on an integer grid: the guarantee holds for the program as it runs.

Each client's update is clipped, scaled so that the clip norm C becomes ``grid_norm`` L grid
units, and rounded to integers by conditional randomized rounding (redrawn until its norm meets
an integer bound, checked exactly; Kairouz, Liu and Steinke 2021), so one client moves the
integer sum by a vector whose norm is at most that bound, exactly. The server adds exactly
sampled discrete noise (:mod:`jfed.privacy.discrete`) to the integer sum and only then scales
back to floats: everything after the noise is post-processing, so floating point cannot break
the guarantee.

- :class:`DiscreteGaussianSum`: L2 clipping, discrete Gaussian noise (DP-FedAvg, the silo
  methods' sums). Event :class:`~jfed.privacy.discrete_accounting.DiscreteGaussianDpEvent`:
  ``rho = 1 / (2 z^2)``-zCDP, the continuous Gaussian's at the same ``z``.
- :class:`DiscreteQuantileAdaptiveSum`: adaptive clipping's two releases (the update sum at the
  current clip, the count of unclipped clients), each with exact discrete Gaussian noise; event
  the two composed.
- :class:`DiscreteLaplaceSum`: L1 clipping, discrete Laplace noise (pure eps; estimation).
  Event ``dp_accounting``'s ``DiscreteLaplaceDpEvent`` (eps ``1 / z``).

Both follow the aggregator protocol of :mod:`jfed.privacy.aggregators` (``init``,
``preprocess`` for one client, ``release`` from the summed records, ``event`` on the host), with
add-or-remove adjacency of one client's contribution. The noise multiplier keeps its jfed meaning,
``z = noise std / sensitivity``, with the sensitivity measured on the grid: the noise's variance
(grid units) is at least ``z^2`` times the integer bound on a rounded update's squared norm (L2)
or its scale at least ``z`` times the L1 bound. The bound exceeds ``L^2`` by the rounding's
``d / 4 + O(L)`` (:func:`~jfed.privacy.discrete.rounded_squared_norm_bound`), so the noise on the
float sum is ``z C sqrt(B) / L``, slightly above the float Gaussian's ``z C``: the price of
exactness, shown by :meth:`DiscreteGaussianSum.noise_inflation`.

Diagnostics named in :data:`NOT_PRIVATE` are computed from unnoised data (outside the guarantee).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jfed._validation import check_positive
from jfed.privacy import discrete
from jfed.privacy.aggregators import NOT_PRIVATE as NOT_PRIVATE  # the one list, re-exported
from jfed.privacy.aggregators import AdaptiveClipParams, AdaptiveClipState
from jfed.privacy.privatizers import clip_tree_per_layer, tree_norm

if TYPE_CHECKING:
    import dp_accounting

PyTree = Any


DEFAULT_BETA = math.exp(-0.5)
"""Conditional rounding's concentration parameter (Kairouz, Liu and Steinke's recommendation):
one rounding exceeds the bound with probability at most e^-0.5, and is then redrawn."""


# ------------------------------------------------------------------------- shared pieces


def flatten(tree: PyTree) -> jax.Array:
    """``f32[d]``: every leaf of ``tree`` raveled and concatenated in ``tree_leaves`` order."""
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.concatenate([jnp.ravel(leaf).astype(jnp.float32) for leaf in leaves])


def unflatten(vector: jax.Array, like: PyTree) -> PyTree:
    """``vector`` cut into leaves shaped (and typed) like those of ``like``."""
    leaves, treedef = jax.tree_util.tree_flatten(like)
    sizes = [int(np.prod(jnp.shape(leaf))) for leaf in leaves]
    pieces = jnp.split(vector, np.cumsum(sizes)[:-1]) if len(sizes) > 1 else [vector]
    return jax.tree_util.tree_unflatten(
        treedef,
        [piece.reshape(jnp.shape(leaf)).astype(jnp.result_type(leaf))
         for piece, leaf in zip(pieces, leaves, strict=True)],
    )  # fmt: skip


def _check_dimension(name: str, dimension: int, update_size: int) -> None:
    if update_size != dimension:
        raise ValueError(
            f"{name}: expected an update of dimension={dimension} coordinates, got {update_size}"
        )


def clip_l2(vector: jax.Array, clip_norm: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(vector * min(1, C / ||vector||_2), clipped: f32[], norm: f32[])``."""
    norm = jnp.linalg.norm(vector)
    scale = jnp.minimum(1.0, clip_norm / jnp.maximum(norm, jnp.finfo(jnp.float32).tiny))
    return vector * scale, (norm > clip_norm).astype(jnp.float32), norm


def clip_l1(vector: jax.Array, clip_norm: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(vector * min(1, C / ||vector||_1), clipped: f32[], norm: f32[])``."""
    norm = jnp.sum(jnp.abs(vector))
    scale = jnp.minimum(1.0, clip_norm / jnp.maximum(norm, jnp.finfo(jnp.float32).tiny))
    return vector * scale, (norm > clip_norm).astype(jnp.float32), norm


def on_grid(vector: jax.Array, clip_norm: jax.Array, grid_norm: int) -> jax.Array:
    """The clipped ``vector`` in grid units: C becomes ``grid_norm``."""
    return vector * (np.float32(grid_norm) / clip_norm)


def grid_check(name: str, grid_norm: int, beta: float, max_tries: int) -> None:
    """Host checks of the static grid parameters (``ValueError`` naming the field)."""
    if int(grid_norm) != grid_norm or not 1 <= grid_norm <= 2**24:
        raise ValueError(f"{name}: expected an integer grid_norm in [1, 2^24], got {grid_norm}")
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"{name}: expected beta in [0, 1), got {beta}")
    if int(max_tries) != max_tries or max_tries < 1:
        raise ValueError(f"{name}: expected max_tries >= 1, got {max_tries}")


class _GridSum:
    """What the central grid sums share: the static fields' checks, the client's rounded record
    and the release's scaling back. Subclasses define ``dimension``, ``grid_norm``, ``beta``,
    ``max_tries``, ``_clip`` (:func:`clip_l2` or :func:`clip_l1`), ``_within`` (the exact integer
    check of that norm) and ``_bound`` (the exact integer bound)."""

    _clip: ClassVar[Callable]
    _within: ClassVar[Callable]
    dimension: int
    grid_norm: int
    beta: float
    max_tries: int

    @property
    def _bound(self) -> int:
        raise NotImplementedError

    def __post_init__(self) -> None:
        grid_check(type(self).__name__, self.grid_norm, self.beta, self.max_tries)
        if int(self.dimension) != self.dimension or self.dimension < 1:
            raise ValueError(f"expected dimension >= 1, got dimension={self.dimension}")

    def init(self, params: Any, template: PyTree) -> tuple:
        del params, template
        return ()

    def _clipped(self, update: PyTree, clip_norm: jax.Array):
        """``(f32[d] the clipped update, clipped: f32[], norm: f32[] before clipping)``."""
        vector = flatten(update)
        _check_dimension(type(self).__name__, self.dimension, vector.shape[0])
        return self._clip(vector, clip_norm)

    def preprocess(self, params: Any, state: tuple, update: PyTree, key: jax.Array) -> dict:
        """ONE client's record: ``{"value": its rounded update (int32 leaves shaped like the
        update), "clipped", "norm" (before clipping, in the clipping's norm),
        "rounding_fallbacks"}``."""
        del state
        clipped, was_clipped, norm = self._clipped(update, params.clip_norm)
        rounded, fell_back = discrete.conditional_round(
            key, on_grid(clipped, params.clip_norm, self.grid_norm), self._bound,
            self.max_tries, within=self._within,
        )  # fmt: skip
        value = unflatten(rounded, jax.tree.map(lambda x: jnp.zeros(jnp.shape(x), jnp.int32),
                                                update))  # fmt: skip
        return {"value": value, "clipped": was_clipped, "norm": norm,
                "rounding_fallbacks": fell_back}  # fmt: skip

    def _released(self, params: Any, summed: dict, noise_of) -> tuple[PyTree, dict]:
        """``C / L`` times (the integer sum plus ``noise_of(shape)``), as float leaves, and the
        diagnostics every grid sum reports."""
        total = jnp.concatenate([jnp.ravel(leaf) for leaf in jax.tree.leaves(summed["value"])])
        noised = (total + noise_of(total.shape)).astype(jnp.float32)
        noised = noised * (params.clip_norm / self.grid_norm)
        like = jax.tree.map(lambda x: jnp.zeros(jnp.shape(x), jnp.float32), summed["value"])
        diagnostics = {
            "clip": jnp.asarray(params.clip_norm, jnp.float32),
            "clipped_count": summed["clipped"],
            "norm_sum": summed["norm"],
            "rounding_fallbacks": summed["rounding_fallbacks"],
        }
        return unflatten(noised, like), diagnostics


# --------------------------------------------------------------------------- discrete Gaussian


class DiscreteGaussianSumParams(NamedTuple):
    """Parameters of :class:`DiscreteGaussianSum` (``f32[]`` on device, floats on the host).

    Attributes:
      clip_norm: C > 0, the L2 bound on one client's update (before rounding).
      noise_multiplier: z > 0; the noise variance on the grid is at least ``z^2 B``.
    """

    clip_norm: Any
    noise_multiplier: Any


@dataclass(frozen=True)
class DiscreteGaussianSum(_GridSum):
    """Clipped sum of client updates on an integer grid plus exact discrete Gaussian noise.

    A client: L2-clip to C, scale to ``L = grid_norm`` grid units, round (conditionally, until
    the squared norm is at most ``B = rounded_squared_norm_bound(L, d, beta)``; after
    ``max_tries`` failures it sends zeros, counted). The server: the integer sum plus
    ``N_Z(0, sigma^2)`` per coordinate with ``sigma^2 >= z^2 B`` (an integer of the form ``2^k
    m``), then ``C / L`` times that as floats.

    The int32 sum must not wrap: ``clients * sqrt(B) + 40 sigma < 2^31`` keeps it exact (with
    the defaults, ``B`` about ``L^2 = 2^24``: about 5 10^5 clients at z = 1;
    :func:`largest_grid_norm` picks a grid for a cohort); a wrapped sum is only a wrong value,
    never a privacy failure (the noise is added modulo 2^32 all the same).

    Attributes:
      dimension: d, the number of coordinates of a client's update (checked at trace time).
      grid_norm: L, the clip norm in grid units (an integer; larger: finer grid, more bits).
      beta: conditional rounding's parameter in [0, 1) (0: the deterministic bound).
      max_tries: roundings drawn before a client falls back to zeros.
      per_layer: clip every leaf (layer) of the update to ``C / sqrt(leaves)`` before rounding
        (instead of the whole update to C): either way the update's L2 norm is at most C, and the
        rounded record's squared norm at most B.
    """

    dimension: int
    grid_norm: int = 2**12
    beta: float = DEFAULT_BETA
    max_tries: int = 32
    per_layer: bool = False
    Params: ClassVar[type] = DiscreteGaussianSumParams
    couples: ClassVar[bool] = True
    """Its exact noise is coupled to a continuous Gaussian (one share of ``N_Z``): under a
    continuous accountant a run is certified through that Gaussian, and the coupling's total
    variation is a delta term of its own
    (:func:`~jfed.privacy.discrete_accounting.coupled_gaussian`)."""
    _clip: ClassVar[Callable] = staticmethod(clip_l2)
    _within: ClassVar[Callable] = staticmethod(discrete.squared_norm_at_most)

    def _clipped(self, update: PyTree, clip_norm: jax.Array):
        if not self.per_layer:
            return super()._clipped(update, clip_norm)
        layers, any_clipped = clip_tree_per_layer(update, clip_norm)
        # the flat clip after the layers' is a no-op up to float rounding: C holds as one norm
        vector, _, _ = super()._clipped(layers, clip_norm)
        return vector, any_clipped, tree_norm(update)

    @property
    def squared_bound(self) -> int:
        """B: the exact integer bound on a rounded update's squared L2 norm (grid units)."""
        return discrete.rounded_squared_norm_bound(self.grid_norm, self.dimension, self.beta)

    @property
    def _bound(self) -> int:
        return self.squared_bound

    def noise_inflation(self) -> float:
        """``sqrt(B) / L``: the noise std on the float sum over the float Gaussian's ``z C``."""
        return math.sqrt(self.squared_bound) / self.grid_norm

    def noise_parameters(self, params: DiscreteGaussianSumParams):
        """``(k, m, in_range)``: the noise ``N_Z(0, 2^k m)`` with ``2^k m >= z^2 B``
        (:func:`~jfed.privacy.discrete.variance_at_least`, then
        :func:`~jfed.privacy.discrete.discrete_gaussian_parameters`), and whether it is in the
        sampler's range."""
        least = discrete.variance_at_least(params.noise_multiplier, self.squared_bound)
        bits, quotient = discrete.discrete_gaussian_parameters(least)
        return bits, quotient, discrete.variance_in_range(least)

    def release(
        self, params: DiscreteGaussianSumParams, state: tuple, summed: dict, key: jax.Array
    ) -> tuple[PyTree, tuple, dict]:
        """The integer sum plus discrete Gaussian noise (from ``key``), as floats: ``C / L`` times
        it. NaN everywhere if the variance left its range (the host's :meth:`event` refuses such
        parameters first)."""
        bits, quotient, in_range = self.noise_parameters(params)
        value, diagnostics = self._released(
            params, summed, lambda shape: discrete.discrete_gaussian(key, shape, bits, quotient)
        )
        value = jax.tree.map(lambda leaf: jnp.where(in_range, leaf, jnp.nan), value)
        variance = ((jnp.uint32(1) << bits) * quotient).astype(jnp.float32)
        diagnostics["noise_std"] = jnp.sqrt(variance) * params.clip_norm / self.grid_norm
        return value, state, diagnostics

    def event(self, params: DiscreteGaussianSumParams) -> dp_accounting.DpEvent:
        """``DiscreteGaussianDpEvent(z, sqrt(B), min(B, sqrt(d B)), d)`` of one release (host).

        The event of any ``z``, so that a calibration may search through it; :meth:`check`
        refuses a ``z`` whose variance leaves the sampler's range on this grid (the device then
        releases NaN, never less noise)."""
        from jfed.privacy.discrete_accounting import DiscreteGaussianDpEvent

        check_positive("clip_norm", params.clip_norm)
        z = check_positive("noise_multiplier", params.noise_multiplier)
        bound = self.squared_bound
        return DiscreteGaussianDpEvent(
            z, math.sqrt(bound), l1_bound(bound, self.dimension), self.dimension
        )

    def check(self, params: DiscreteGaussianSumParams) -> None:
        """Host: ``ValueError`` naming the parameters unless the noise of ``params`` is in the
        sampler's range on this grid (:func:`check_variance`)."""
        z = check_positive("noise_multiplier", params.noise_multiplier)
        check_variance(z, self.squared_bound, 1, self.grid_norm)


@dataclass(frozen=True)
class DiscreteQuantileAdaptiveSum(DiscreteGaussianSum):
    """Quantile-based adaptive clipping (Andrew, Thakkar, McMahan, Ramaswamy 2021) on the integer
    grid: :class:`~jfed.privacy.aggregators.QuantileAdaptiveGaussianSum`'s two releases, each an
    exact discrete Gaussian on an integer query.

    A client clips its update to the current C_t, which the grid maps to ``L = grid_norm`` units
    (so the rounded record's squared norm is at most B whatever C_t is), and reports ``2 b_k -
    1`` with ``b_k = 1[||delta_k|| <= C_t]`` (an integer of sensitivity 1: twice Andrew et al.'s
    ``b_k - 1/2``). The server adds ``N_Z(0, sigma^2)``, ``sigma^2 >= z_delta^2 B``, to the
    integer sum of records and ``N_Z(0, v)``, ``v >= (2 sigma_b)^2``, to the integer count, then
    scales: the sum by ``C_t / L``, the count by 1/2 (so its noise std is at least sigma_b, as in
    the float version), and moves the clip exactly as the float version does (a post-processing
    of the noised count). Everything after the two noises reads only their noised integers.

    Event: the two releases composed, ``ComposedDpEvent([DiscreteGaussianDpEvent(z_delta,
    sqrt(B), ...), DiscreteGaussianDpEvent(2 sigma_b, 1, 1, 1)])``: ``rho = 1 / (2 z_delta^2) +
    1 / (8 sigma_b^2) = 1 / (2 z^2)``-zCDP with the combined ``z`` of
    :func:`~jfed.privacy.aggregators.combined_noise_multiplier`, as the float pair's; the discrete
    RDP accountant composes it, Poisson-sampled too. Parameters:
    :class:`~jfed.privacy.aggregators.AdaptiveClipParams` (``noise_multiplier`` is z_delta, the
    update sum's).

    Attributes:
      dimension, grid_norm, beta, max_tries, per_layer: as :class:`DiscreteGaussianSum`.
      expected_count: the count's fixed denominator (the expected cohort size).
    """

    expected_count: float = 1.0
    Params: ClassVar[type] = AdaptiveClipParams

    def init(self, params: AdaptiveClipParams, template: PyTree) -> AdaptiveClipState:
        del template
        return AdaptiveClipState(jnp.asarray(params.initial_clip, jnp.float32))

    def preprocess(  # type: ignore[override]
        self, params: AdaptiveClipParams, state: AdaptiveClipState, update: PyTree,
        key: jax.Array,
    ) -> dict:  # fmt: skip
        """ONE client's record at the current clip C_t: the rounded update (as
        :meth:`DiscreteGaussianSum.preprocess`) and ``"below": 2 b_k - 1`` (int32)."""
        record = super().preprocess(
            DiscreteGaussianSumParams(state.clip, params.noise_multiplier), (), update, key
        )
        record["below"] = jnp.where(record["norm"] <= state.clip, 1, -1).astype(jnp.int32)
        return record

    def release(  # type: ignore[override]
        self, params: AdaptiveClipParams, state: AdaptiveClipState, summed: dict, key: jax.Array
    ) -> tuple[PyTree, AdaptiveClipState, dict]:
        """The noised sum at C_t (first of ``split(key)``), the noised count (second) and the
        next clip norm; NaN everywhere if a variance left the sampler's range."""
        value_key, count_key = jax.random.split(key)
        clip = state.clip
        value, _, diagnostics = super().release(
            DiscreteGaussianSumParams(clip, params.noise_multiplier), (), summed, value_key
        )
        count_variance = discrete.variance_at_least(2.0 * params.count_noise, 1)
        bits, quotient = discrete.discrete_gaussian_parameters(count_variance)
        noised = summed["below"] + discrete.discrete_gaussian(count_key, (), bits, quotient)
        count = noised.astype(jnp.float32) / 2.0  # sum_k (b_k - 1/2) plus noise of std >= sigma_b
        in_range = discrete.variance_in_range(count_variance)
        unclipped = count / self.expected_count + 0.5
        next_clip = clip * jnp.exp(-params.learning_rate * (unclipped - params.target_quantile))
        value = jax.tree.map(lambda leaf: jnp.where(in_range, leaf, jnp.nan), value)
        return value, AdaptiveClipState(jnp.where(in_range, next_clip, jnp.nan)), diagnostics

    def event(self, params: AdaptiveClipParams) -> dp_accounting.DpEvent:  # type: ignore[override]
        """Both releases of one round (host): the update sum's discrete Gaussian at ``z_delta``
        and the count's at ``2 sigma_b`` (sensitivity 1), composed."""
        import dp_accounting

        from jfed.privacy.discrete_accounting import DiscreteGaussianDpEvent

        check_positive("initial_clip", params.initial_clip)
        z_delta = check_positive("noise_multiplier", params.noise_multiplier)
        sigma_b = check_positive("count_noise", params.count_noise)
        bound = self.squared_bound
        update = DiscreteGaussianDpEvent(
            z_delta, math.sqrt(bound), l1_bound(bound, self.dimension), self.dimension
        )
        count = DiscreteGaussianDpEvent(2.0 * sigma_b, 1.0, 1.0, 1)
        return dp_accounting.ComposedDpEvent([update, count])

    def check(self, params: AdaptiveClipParams) -> None:  # type: ignore[override]
        """Host: ``ValueError`` unless both noises of ``params`` are in the sampler's range."""
        z_delta = check_positive("noise_multiplier", params.noise_multiplier)
        check_variance(z_delta, self.squared_bound, 1, self.grid_norm)
        check_variance(2.0 * check_positive("count_noise", params.count_noise), 1, 1,
                       self.grid_norm)  # fmt: skip


def l1_bound(squared_bound: int, dimension: int) -> float:
    """The L1 bound an integer vector of squared norm at most B meets: ``min(B, sqrt(d B))``
    (``|x| <= x^2`` for integers; Cauchy-Schwarz)."""
    return float(min(squared_bound, math.sqrt(dimension * squared_bound)))


def check_variance(noise_multiplier: float, squared_bound: int, shares: int, grid_norm: int):
    """Host: ``ValueError`` naming the parameters unless the variance the device computes for
    one of ``shares`` shares (at most ``z^2 B (1 + 2^-16) / shares + 1``) stays in the sampler's
    range."""
    most = noise_multiplier**2 * squared_bound * (1 + 2.0**-15) / shares + 1
    if most >= discrete.SIGMA_SQUARED_LIMIT - 2**16:
        raise ValueError(
            f"noise_multiplier={noise_multiplier:g} on a grid of grid_norm={grid_norm} needs a "
            f"discrete Gaussian variance of {most:.4g} grid units, above the sampler's 2^31 - "
            "2^16: lower grid_norm"
        )


def largest_grid_norm(
    dimension: int, clients: int, noise_multiplier: float, beta: float = DEFAULT_BETA,
    most: int = 2**12,
) -> int:  # fmt: skip
    """Host: the largest power of two ``L <= most`` on which a :class:`DiscreteGaussianSum` of
    ``clients`` records of ``dimension`` coordinates runs at ``noise_multiplier`` exactly: the
    noise's variance in the sampler's range (:func:`check_variance`) and the int32 sum exact,
    ``clients sqrt(B) + 40 sigma < 2^31`` (a record's coordinate is at most ``sqrt(B)``; noise
    beyond 40 sigma has probability below 10^-340). ``ValueError`` naming the numbers if no
    grid does (the finer the grid, the smaller the rounding's share of the noise:
    :meth:`DiscreteGaussianSum.noise_inflation`)."""
    grid_norm = int(most)
    while grid_norm >= 1:
        bound = discrete.rounded_squared_norm_bound(grid_norm, dimension, beta)
        variance = noise_multiplier**2 * bound * (1 + 2.0**-15) + 1
        sigma = math.sqrt(variance + math.sqrt(2.0 * variance) + 1)  # 2^k m < v + t
        try:
            check_variance(noise_multiplier, bound, 1, grid_norm)
        except ValueError:
            grid_norm //= 2
            continue
        if clients * math.sqrt(bound) + 40.0 * sigma < 2.0**31:
            return grid_norm
        grid_norm //= 2
    raise ValueError(
        f"no integer grid holds the exact int32 sum of {clients} clients' updates of "
        f"{dimension} coordinates at noise_multiplier={noise_multiplier:g}"
    )


# ---------------------------------------------------------------------------- discrete Laplace


class DiscreteLaplaceSumParams(NamedTuple):
    """Parameters of :class:`DiscreteLaplaceSum` (``f32[]`` on device, floats on the host).

    Attributes:
      clip_norm: C > 0, the L1 bound on one client's contribution (a scalar: ``|x| <= C``).
      noise_multiplier: z > 0, the noise scale over the L1 sensitivity: pure eps ``1 / z``
        (add-or-remove; ``2 / z`` replace-one).
    """

    clip_norm: Any
    noise_multiplier: Any


LAPLACE_SCALE_BITS = 20
"""The discrete Laplace's proposal scale ``2^20`` (int32 conditioning below ``2 e^-2046``)."""


@dataclass(frozen=True)
class DiscreteLaplaceSum(_GridSum):
    """Clipped sum on an integer grid plus exact discrete Laplace noise: pure eps-DP.

    A client: L1-clip to C, scale to ``L = grid_norm``, round conditionally until the L1 norm is
    at most ``B_1 = rounded_absolute_sum_bound(L, d, beta)`` (``L`` for one coordinate). The
    server: the integer sum plus ``DLap(b)`` per coordinate, ``P(x) ∝ exp(-|x| / b)``, with ``b =
    2^20 / s >= z B_1`` (``s`` an integer computed on device, rounded so the scale only grows),
    then ``C / L`` times that as floats.

    Attributes:
      dimension: d (1 for a scalar release).
      grid_norm: L (an integer); ``z B_1 <= 2^20`` is required.
      beta: conditional rounding's parameter (for d > 1).
      max_tries: roundings drawn before falling back to zeros.
    """

    dimension: int = 1
    grid_norm: int = 2**10
    beta: float = DEFAULT_BETA
    max_tries: int = 32
    Params: ClassVar[type] = DiscreteLaplaceSumParams
    _clip: ClassVar[Callable] = staticmethod(clip_l1)
    _within: ClassVar[Callable] = staticmethod(discrete.absolute_sum_at_most)

    @property
    def absolute_bound(self) -> int:
        """B_1: the exact integer bound on a rounded contribution's L1 norm (grid units)."""
        return discrete.rounded_absolute_sum_bound(self.grid_norm, self.dimension, self.beta)

    @property
    def _bound(self) -> int:
        return self.absolute_bound

    def divisor(self, params: DiscreteLaplaceSumParams) -> jax.Array:
        """``u32[]``: s with ``2^20 / s >= z B_1`` (float32 with a 2^-16 margin, then floor)."""
        scale = (jnp.asarray(params.noise_multiplier, jnp.float32)
                 * np.float32(self.absolute_bound) * np.float32(1 + 2.0**-16))  # fmt: skip
        return jnp.maximum(jnp.floor(np.float32(2.0**LAPLACE_SCALE_BITS) / scale), 1.0).astype(
            jnp.uint32
        )

    def release(
        self, params: DiscreteLaplaceSumParams, state: tuple, summed: dict, key: jax.Array
    ) -> tuple[PyTree, tuple, dict]:
        """The integer sum plus discrete Laplace noise (from ``key``), as floats."""
        divisor = self.divisor(params)
        value, diagnostics = self._released(
            params, summed,
            lambda shape: discrete.discrete_laplace(key, shape, LAPLACE_SCALE_BITS, divisor),
        )  # fmt: skip
        scale = np.float32(2.0**LAPLACE_SCALE_BITS) / divisor.astype(jnp.float32)
        diagnostics["noise_scale"] = scale * params.clip_norm / self.grid_norm
        return value, state, diagnostics

    def event(self, params: DiscreteLaplaceSumParams) -> dp_accounting.DpEvent:
        """``DiscreteLaplaceDpEvent(1 / (z B_1), B_1)``: pure eps ``1 / z`` of one release under
        add-or-remove (host)."""
        return self._event(params, self.absolute_bound)

    def replace_one_event(self, params: DiscreteLaplaceSumParams) -> dp_accounting.DpEvent:
        """The same release under replace-one (a contribution changes, the sum moves by up to
        ``2 B_1``): ``DiscreteLaplaceDpEvent(1 / (z B_1), 2 B_1)``, pure eps ``2 / z``."""
        return self._event(params, 2 * self.absolute_bound)

    def _event(self, params: DiscreteLaplaceSumParams, sensitivity: int):
        from dp_accounting.dp_event import DiscreteLaplaceDpEvent

        check_positive("clip_norm", params.clip_norm)
        z = check_positive("noise_multiplier", params.noise_multiplier)
        if z * self.absolute_bound * (1 + 2.0**-16) > 2.0**LAPLACE_SCALE_BITS:
            raise ValueError(
                f"noise_multiplier={z:g} on a grid of grid_norm={self.grid_norm} needs a "
                f"discrete Laplace scale above 2^{LAPLACE_SCALE_BITS} grid units: lower grid_norm"
            )
        return DiscreteLaplaceDpEvent(1.0 / (z * self.absolute_bound), int(sensitivity))
