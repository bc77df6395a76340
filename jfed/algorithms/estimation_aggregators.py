"""The releases of the estimation methods as aggregators (:mod:`jfed.privacy.aggregators`): each
states the ``dp_accounting`` event of one release from its own parameters, read from the run's
hyper-parameters as they ran.

- :class:`DiscreteLaplaceNoise`: the exact release (``--noise discrete``, the default with
  ``--mechanism laplace``): every contribution rounded to an integer grid, an integer sum, exact
  discrete Laplace noise (:mod:`jfed.privacy.discrete`, through
  :class:`~jfed.privacy.discrete_aggregators.DiscreteLaplaceSum`'s grid), then scaled back: the
  pure eps-DP holds for the program as it runs.
- :class:`LaplaceNoise`, :class:`AnalyticGaussianNoise`: the float32 noises (``--noise float``,
  ``--mechanism laplace | gaussian``), certified for the ideal real-valued mechanism
  (:data:`NOISES`); floating-point sampling is not modelled (the float32 Laplace release of
  ``--setting federated`` has delta >= 0.89 at its eps, tested).
- :class:`LocalNoise`: a local randomizer. Each client (a site, a user, a server) adds the noise
  to each of its values before they leave it; the server sums what arrives. Used where nobody,
  or only the client itself, is trusted.
- :class:`CentralNoise`: a curator sums the clients' contributions, adds the noise once and
  divides by a denominator; :class:`SiteCurator` is the same release made by each site of its
  own units (the federated setting).
- :class:`RandomizedResponseVotes`: every voter sends one bit through binary randomized response
  (:mod:`jfed.privacy.randomized_response`, exact at every eps).
- :class:`NoisyBatchMeans`: a server's T batch means of disjoint functions, each plus Gaussian
  noise of a per-coordinate standard deviation, averaged by T steps of SGD (the functional mean;
  float32 noise, ``--noise float``); :class:`DiscreteBatchMeans`, the same release on an integer
  grid with exact discrete Gaussian noise (its default, ``--noise discrete``).

Every event is stated under bounded adjacency (``adjacency = BOUNDED``): a release's sensitivity is
the distance between its values on two inputs that differ in one protected unit (one unit's value,
one site's units, one function). A release sums contributions (a unit's value, a site's mean),
each in an interval of width ``spread(params)`` (host and device), and divides the sum by
``count(params)``: its sensitivity is ``spread / count`` (:meth:`Release.sensitivity`). On the
grid, the interval's half-width is ``grid_norm`` grid units around its center, so one
contribution moves the integer sum by at most ``2 grid_norm``, exactly, whatever the rounding
drew. The local aggregators (``local = True``) claim no amplification from who takes part.

Keys: a local randomizer draws from the key the engine gives ``preprocess`` (the client's
privacy stream; on the grid split in two, the rounding's and the noise's); a central release
rounds from the client's key and draws its noise from the server's key the round passes to
``aggregate``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jfed._random import private_normals, threshold_value
from jfed.privacy import discrete
from jfed.privacy.discrete_aggregators import (
    DEFAULT_BETA,
    LAPLACE_SCALE_BITS,
    DiscreteGaussianSum,
    DiscreteGaussianSumParams,
    DiscreteLaplaceSum,
    DiscreteLaplaceSumParams,
    l1_bound,
    largest_grid_norm,
    on_grid,
)
from jfed.privacy.gaussian import analytic_gaussian_noise
from jfed.privacy.guarantee import Adjacency
from jfed.privacy.laplace import laplace_scale
from jfed.privacy.randomized_response import (
    flip_threshold_from_truthful,
    keeps_true_bit_given_truthful,
)

if TYPE_CHECKING:  # dp-accounting takes about a second to load: imported where an event is made
    import dp_accounting


# ------------------------------------------------------------------------------------ noises


@dataclass(frozen=True)
class LaplaceNoise:
    """``Laplace(b)`` float32 noise: pure eps-DP at ``b = sensitivity / eps`` (the sensitivity in
    L1) for the ideal real-valued mechanism; ``jax.random.laplace`` never draws beyond about
    16.6 scales and adds to float32 values, which this guarantee does not model."""

    accountant: ClassVar[str] = "Laplace mechanism (pure eps)"
    guarantee: ClassVar[str] = "eps-DP"
    exact: ClassVar[bool] = False

    def draw(self, key: jax.Array) -> jax.Array:
        """One standard draw ``f32[]`` (scale 1)."""
        return jax.random.laplace(key)

    def calibrate(self, sensitivity: float, epsilon: float, delta: float) -> float:
        """``b`` of one release (host, float64); ``delta`` is not spent."""
        del delta
        return laplace_scale(sensitivity, epsilon)

    def event(self, noise_multiplier: float) -> dp_accounting.DpEvent:
        """``LaplaceDpEvent(b / sensitivity)``."""
        import dp_accounting

        return dp_accounting.LaplaceDpEvent(noise_multiplier)

    def variance(self, scale: float) -> float:
        return 2.0 * scale**2

    def delta(self, delta: float) -> float:
        """The delta a release of this noise states: 0 (pure eps)."""
        del delta
        return 0.0


@dataclass(frozen=True)
class AnalyticGaussianNoise:
    """``N(0, sigma^2)`` float32 noise, sigma the analytic Gaussian's for (eps, delta) (Balle and
    Wang; the sensitivity in L2), certified for the ideal real-valued mechanism."""

    accountant: ClassVar[str] = "analytic Gaussian (Balle and Wang)"
    guarantee: ClassVar[str] = "(eps, delta)-DP"
    exact: ClassVar[bool] = False

    def draw(self, key: jax.Array) -> jax.Array:
        """One standard normal ``f32[]`` whose tails reach far enough for a private release."""
        return private_normals(key, ())

    def calibrate(self, sensitivity: float, epsilon: float, delta: float) -> float:
        """sigma of one release (host, float64)."""
        return float(analytic_gaussian_noise(sensitivity, epsilon, delta))

    def event(self, noise_multiplier: float) -> dp_accounting.DpEvent:
        """``GaussianDpEvent(sigma / sensitivity)``."""
        import dp_accounting

        return dp_accounting.GaussianDpEvent(noise_multiplier)

    def variance(self, scale: float) -> float:
        return scale**2

    def delta(self, delta: float) -> float:
        return delta


DEFAULT_GRID_NORM = 2**9
"""A contribution interval's half-width in grid units where the release's numbers allow it."""

GRID_SCALE_TARGET = 2**10
"""The grid chooser keeps the discrete Laplace's scale ``z L`` at most this many grid units
(where ``L >= 2`` allows): the device's scale ``2^20 / s`` (``s`` an integer) then exceeds ``z L``
by at most ``2^-10 + 2^-15`` of it (the 2^-16 margin included)."""


@dataclass(frozen=True)
class DiscreteLaplaceNoise:
    """Exact discrete Laplace noise on an integer grid: pure eps-DP of the program as it runs.

    A release's contributions (each in an interval of half-width ``C`` around a public center)
    are scaled so that ``C`` becomes ``grid_norm`` ``L`` grid units, cut to ``[-L, L]`` on the
    grid and rounded to integers by randomized rounding (floor or ceiling: still in ``[-L, L]``);
    the integer sum gets ``DLap(t)`` noise with ``t = 2^20 / s >= z L`` (``z = b count / C``, the
    float release's scale ``b`` over the grid's sensitivity), sampled exactly
    (:func:`jfed.privacy.discrete.discrete_laplace`), and only then is ``C / L`` times it scaled
    back and divided by ``count``. In value units the noise's scale is the float release's ``b``
    (within ``2^-10 + 2^-15``: :data:`GRID_SCALE_TARGET`); rounding adds at most ``(C / L)^2 /
    4`` of variance per contribution that is not on the grid (none for ±1 data clipped at ``c <=
    1``).

    Replacing one contribution moves the integer sum by at most ``2 L`` whatever the rounding
    drew (its law does not depend on the other contributions), so the release is pure ``2 /
    z``-DP, which is the float release's ``sensitivity / b``: event
    :meth:`~jfed.privacy.discrete_aggregators.DiscreteLaplaceSum.replace_one_event`
    (``DiscreteLaplaceDpEvent(1 / (z L), 2 L)``). The grid and the noise's parameters are
    :class:`~jfed.privacy.discrete_aggregators.DiscreteLaplaceSum`'s (one coordinate).

    Attributes:
      grid_norm: L, an interval's half-width in grid units (static; chosen per sweep by
        :func:`jfed.methods.estimation.grid_norm_for`: ``z L <= 2^20`` and the int32 sum exact).
    """

    grid_norm: int = DEFAULT_GRID_NORM
    accountant: ClassVar[str] = "discrete Laplace mechanism on an integer grid (pure eps)"
    guarantee: ClassVar[str] = "eps-DP"
    exact: ClassVar[bool] = True

    @property
    def grid(self) -> DiscreteLaplaceSum:
        """The one-coordinate grid sum whose grid, noise parameters and event this noise uses."""
        return DiscreteLaplaceSum(dimension=1, grid_norm=self.grid_norm)

    def calibrate(self, sensitivity: float, epsilon: float, delta: float) -> float:
        """``b`` of one release (host, float64), the Laplace's; ``delta`` is not spent."""
        del delta
        return laplace_scale(sensitivity, epsilon)

    def variance(self, scale: float) -> float:
        """``2 b^2``: the Laplace's, which the discrete noise's exceeds by about ``2^-9``
        of it (its scale rounded up) and falls short of by ``(C / L)^2 / 6``."""
        return 2.0 * scale**2

    def delta(self, delta: float) -> float:
        """0: pure eps (the int32 range conditions a draw on an event of probability at least
        ``1 - 10^-888``: :func:`jfed.privacy.discrete.int32_conditioning_mass`)."""
        del delta
        return 0.0

    def grid_params(self, scale: Any, half_width: Any, count: Any) -> DiscreteLaplaceSumParams:
        """The grid sum's parameters of a release of scale ``b`` (value units, on the mean of
        ``count`` contributions of half-width ``C``): ``(C, z = b count / C)``. Host (floats)
        or device (``f32[]``)."""
        return DiscreteLaplaceSumParams(half_width, scale * count / half_width)

    def release_event(self, scale: float, half_width: float, count: float):
        """Host: ``DiscreteLaplaceDpEvent(1 / (z L), 2 L)`` of one release (replace-one)."""
        return self.grid.replace_one_event(self.grid_params(scale, half_width, count))

    def integers(self, key: jax.Array, values: jax.Array, center: Any, half_width: Any):
        """``i32[...]`` contributions ``values: f32[...]`` on the grid: ``(value - center) L /
        C`` cut to ``[-L, L]``, each rounded by its own ``fold_in(key, i)`` (a program padded
        to more values rounds the first ones alike)."""
        scaled = jnp.clip(on_grid(jnp.asarray(values, jnp.float32) - center, half_width,
                                  self.grid_norm), -self.grid_norm, self.grid_norm)  # fmt: skip
        if scaled.ndim == 0:
            return discrete.randomized_round(key, scaled)
        flat = scaled.ravel()
        rounded = jax.vmap(lambda i, x: discrete.randomized_round(jax.random.fold_in(key, i), x))(
            jnp.arange(flat.shape[0]), flat
        )
        return rounded.reshape(scaled.shape)

    def noised(self, key: jax.Array, integers: jax.Array, params: DiscreteLaplaceSumParams):
        """``f32[...]``: ``C / L`` times (``integers`` plus discrete Laplace noise, element i
        from ``fold_in(key, i)``)."""
        divisor = self.grid.divisor(params)
        flat = jnp.ravel(integers)
        noise = by_element(lambda k: discrete.discrete_laplace(k, (), LAPLACE_SCALE_BITS, divisor),
                           key, flat.shape[0])  # fmt: skip
        return self.scaled_back((flat + noise).reshape(jnp.shape(integers)), params)

    def scaled_back(self, totals: jax.Array, params: DiscreteLaplaceSumParams) -> jax.Array:
        """``f32[...]``: noised integer ``totals`` in value units, ``C / L`` times them (the
        release's float map: post-processing of the exact noised integers)."""
        return totals.astype(jnp.float32) * (params.clip_norm / self.grid_norm)


@dataclass(frozen=True)
class DiscreteGaussianNoise(DiscreteLaplaceNoise):
    """Exact discrete Gaussian noise on :class:`DiscreteLaplaceNoise`'s integer grid: (eps,
    delta)-DP of the program as it runs, eps exact for the noise the device draws.

    The same grid (an interval's half-width ``C`` is ``L`` grid units, randomized rounding, cut
    to ``[-L, L]``, an integer sum, scaled back by ``C / L`` and divided by ``count``); the
    integer sum gets ``N_Z(0, v)`` noise, ``v = 2^k m >= (z L)^2`` with ``z = sigma count / C``
    (the float release's sigma in grid units; computed on the device in float32 with a 2^-16
    margin, :func:`jfed.privacy.discrete.variance_at_least`), sampled exactly
    (:func:`jfed.privacy.discrete.discrete_gaussian`). Replacing one contribution moves the
    integer sum by an integer of at most ``2 L`` whatever the rounding drew, so one release's
    exact (eps, delta) is Canonne, Kamath and Steinke's over every shift ``1 <= s <= 2 L``
    (:func:`~jfed.privacy.discrete_accounting.discrete_gaussian_worst_epsilon`); its event,
    ``DiscreteGaussianDpEvent(sqrt(v) / (2 L), 2 L, 2 L, 1)``, states ``v``, and basic
    composition certifies it at its share of delta.

    :meth:`calibrate` finds sigma by bisection on that exact delta, so the calibrated release
    meets the target (eps, delta) on the grid (the device's ``v`` only rounds up).

    Attributes:
      grid_norm: L, as :class:`DiscreteLaplaceNoise`'s.
    """

    accountant: ClassVar[str] = (
        "discrete Gaussian mechanism on an integer grid (exact (eps, delta), Canonne, Kamath "
        "and Steinke)"
    )
    guarantee: ClassVar[str] = "(eps, delta)-DP"

    @property
    def sensitivity(self) -> int:
        """``2 L``: the integer sum's largest move when one contribution is replaced."""
        return 2 * self.grid_norm

    def calibrate(self, sensitivity: float, epsilon: float, delta: float) -> float:
        """sigma of one release in value units (host, float64): ``sqrt(v) sensitivity / (2 L)``
        for the least grid variance ``v`` (bisection to a relative 1e-9) whose exact delta at
        ``epsilon`` is at most ``delta``."""
        from jfed.privacy.discrete_accounting import discrete_gaussian_worst_delta

        def meets(variance: float) -> bool:
            return discrete_gaussian_worst_delta(epsilon, variance, self.sensitivity) <= delta

        start = float(analytic_gaussian_noise(float(self.sensitivity), epsilon, delta)) ** 2
        low, high = 0.5 * start, 2.0 * start
        while not meets(high):
            low, high = high, 2.0 * high
        while meets(low) and low > 1e-12:
            low, high = 0.5 * low, low
        while high - low > 1e-9 * high:
            middle = 0.5 * (low + high)
            low, high = (low, middle) if meets(middle) else (middle, high)
        return math.sqrt(high) * sensitivity / self.sensitivity

    def variance(self, scale: float) -> float:
        """``sigma^2``: the discrete Gaussian's variance is below ``v``'s continuous one by at
        most 10^-9 of it at the grid's sigma (and ``v`` rounds ``(z L)^2`` up by at most ``2^-16
        + 2 / (z L)`` of it); rounding adds at most ``(C / L)^2 / 4`` per contribution off the
        grid."""
        return scale**2

    def delta(self, delta: float) -> float:
        """The delta a release states: the target's (its eps is certified at it)."""
        return delta

    def grid_variance(self, params: DiscreteLaplaceSumParams):
        """``(k, m, in_range)``: the noise ``N_Z(0, 2^k m)``, ``2^k m >= (z L)^2``, of the grid
        parameters ``(C, z)`` (host and device, the same integers)."""
        least = discrete.variance_at_least(params.noise_multiplier, self.grid_norm**2)
        bits, quotient = discrete.discrete_gaussian_parameters(least)
        return bits, quotient, discrete.variance_in_range(least)

    def release_event(self, scale: float, half_width: float, count: float):
        """Host: ``DiscreteGaussianDpEvent(sqrt(v) / (2 L), 2 L, 2 L, 1)`` of one release, ``v``
        the variance the device computes from the float32 parameters; ``ValueError`` if ``v``
        leaves the sampler's range (the device would release NaN)."""
        from jfed.privacy.discrete_accounting import DiscreteGaussianDpEvent

        params = self.grid_params(*(np.float32(x) for x in (scale, half_width, count)))
        bits, quotient, in_range = jax.jit(self.grid_variance)(
            DiscreteLaplaceSumParams(*(jnp.float32(x) for x in params))
        )
        if not bool(in_range):
            raise ValueError(
                f"a discrete Gaussian release of sigma {scale:g} on a grid of grid_norm="
                f"{self.grid_norm} leaves the sampler's variance range: lower grid_norm"
            )
        variance = float(2 ** int(bits) * int(quotient))
        sensitivity = float(self.sensitivity)
        return DiscreteGaussianDpEvent(math.sqrt(variance) / sensitivity, sensitivity,
                                       sensitivity, 1)  # fmt: skip

    def noised(self, key: jax.Array, integers: jax.Array, params: DiscreteLaplaceSumParams):
        """``f32[...]``: ``C / L`` times (``integers`` plus discrete Gaussian noise, element i
        from ``fold_in(key, i)``); NaN if the variance left the sampler's range."""
        bits, quotient, in_range = self.grid_variance(params)
        flat = jnp.ravel(integers)
        noise = by_element(lambda k: discrete.discrete_gaussian(k, (), bits, quotient), key,
                           flat.shape[0])  # fmt: skip
        released = self.scaled_back((flat + noise).reshape(jnp.shape(integers)), params)
        return jnp.where(in_range, released, jnp.nan)


NOISES: dict[str, LaplaceNoise | AnalyticGaussianNoise] = {
    "laplace": LaplaceNoise(),
    "gaussian": AnalyticGaussianNoise(),
}
"""The float noise each ``--mechanism`` names (``--noise float``)."""

EXACT_NOISES: dict[str, type[DiscreteLaplaceNoise]] = {
    "laplace": DiscreteLaplaceNoise,
    "gaussian": DiscreteGaussianNoise,
}
"""The exact noise each ``--mechanism`` has on the grid (``--noise discrete``), made with the
run's ``grid_norm``."""


def noise_draws(noise: Any, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Standard draws of ``noise`` of ``shape`` ``()`` or ``(m,)``: element i from
    ``fold_in(key, i)``, so the first elements do not depend on m (a program padded to a larger
    m draws the same numbers)."""
    if shape == ():
        return noise.draw(key)
    return by_element(noise.draw, key, shape[0])


def by_element(draw: Callable[[jax.Array], jax.Array], key: jax.Array, count: int) -> jax.Array:
    """``[count]`` draws, element i ``draw(fold_in(key, i))``: the first elements do not depend
    on ``count`` (a program padded to a larger count draws the same numbers)."""
    return jax.vmap(lambda i: draw(jax.random.fold_in(key, i)))(jnp.arange(count))


# ------------------------------------------------------------------ the mean's noisy releases


class ReleaseParams(NamedTuple):
    """The parameters of a mean-estimation release, each read unchanged from the run's
    hyper-parameters (``f32[]`` / ``i32[]`` on the device, floats on the host).

    Attributes:
      scale: the noise scale (Laplace ``b`` or Gaussian sigma) on the released value.
      clip: c, the clipping bound of a unit's value or a site's mean.
      width: w, the half-width of the second stage's interval (or a site mean's spread).
      sites: S.
      units: n.
      stages: B, the binary search's stages.
    """

    scale: Any
    clip: Any
    width: Any
    sites: Any
    units: Any
    stages: Any


Spread = Callable[[ReleaseParams], Any]
"""The width of the interval one contribution lies in, from a release's parameters: floats on
the host (float64), ``f32[]`` on the device (the same formula)."""


def one(params: ReleaseParams) -> float:
    """The count of a release of one contribution."""
    del params
    return 1.0


@dataclass(frozen=True)
class Release:
    """What the aggregators share: the noise, the contributions' interval width ``spread`` and
    the ``count`` the sum is divided by (both from the parameters, on the host and on the
    device), the event, and the grid's arithmetic.

    A client's message: ``{"value": f32[] | f32[k] its contributions, "weight": like value (how
    many contributions each value stands for: 0 none, 1 one unit or site mean, or a count of
    equal units), "center": f32[] the contributions' public interval center (0 where none),
    "clipped": f32[]}``.
    """

    noise: Any
    spread: Spread
    count: Callable[[ReleaseParams], Any] = one
    adjacency: ClassVar[Adjacency] = Adjacency.BOUNDED
    Params: ClassVar[type] = ReleaseParams

    def sensitivity(self, params: ReleaseParams) -> float:
        """Host: ``spread / count``, the released value's distance between neighbours."""
        return float(self.spread(params)) / float(self.count(params))

    def event(self, params: ReleaseParams) -> dp_accounting.DpEvent:
        """The noise's event at ``scale / sensitivity`` (float noise), or the discrete
        Laplace's on the grid (:meth:`DiscreteLaplaceNoise.release_event`), which states the
        same eps."""
        if self.noise.exact:
            return self.noise.release_event(params.scale, 0.5 * float(self.spread(params)),
                                            float(self.count(params)))  # fmt: skip
        return self.noise.event(params.scale / self.sensitivity(params))

    def grid_params(self, params: ReleaseParams) -> DiscreteLaplaceSumParams:
        """Device: the grid sum's parameters (``f32[]``) of this release."""
        half_width = 0.5 * jnp.asarray(self.spread(params), jnp.float32)
        count = jnp.asarray(self.count(params), jnp.float32)
        return self.noise.grid_params(params.scale, half_width, count)

    def contributions(self, params: ReleaseParams, update: dict, key: jax.Array) -> dict:
        """ONE client's summed contributions: the float sum ``sum(weight * value)``, or on the
        grid the integer sum ``sum(weight * rounded)`` and ``sum(weight) * center`` (added back
        after the noise)."""
        value, weight = update["value"], update["weight"]
        if not self.noise.exact:
            return {"value": jnp.sum(weight * value), "clipped": update["clipped"]}
        center = update.get("center", jnp.float32(0.0))
        grid = self.grid_params(params)
        rounded = self.noise.integers(key, value, center, grid.clip_norm)
        return {"value": jnp.sum(weight.astype(jnp.int32) * rounded),
                "offset": jnp.sum(weight) * center, "clipped": update["clipped"]}  # fmt: skip

    def released(self, params: ReleaseParams, summed: dict, key: jax.Array) -> jax.Array:
        """``f32[]``: the summed contributions plus one draw of the noise (from ``key``),
        divided by ``count``."""
        if not self.noise.exact:
            count = jnp.asarray(self.count(params), jnp.float32)
            return summed["value"] / count + params.scale * self.noise.draw(key)
        noised = self.noise.noised(key, summed["value"], self.grid_params(params))
        return self.finish(params, noised, summed["offset"])

    def finish(self, params: ReleaseParams, noised: jax.Array, offset: jax.Array) -> jax.Array:
        """On the grid: the noised sum in value units plus the centers' ``offset``, divided by
        ``count`` (post-processing)."""
        return (noised + offset) / jnp.asarray(self.count(params), jnp.float32)


class _Stateless:
    """An aggregator without state whose release is the clients' sum itself (a local
    randomizer's: the noise was added before the sum)."""

    def init(self, params: Any, template: Any) -> tuple:
        del params, template
        return ()

    def release(self, params: Any, state: tuple, summed: Any, key: jax.Array) -> tuple:
        del params, key
        return summed, state, {}


@dataclass(frozen=True)
class LocalNoise(Release, _Stateless):
    """A local randomizer: each client releases each of its values plus its own noise (one
    contribution each, ``count`` 1), and sends ``sum(weight * released)`` (a weight 0 sends
    nothing: a client outside the release, a padded unit); the server sums what arrives.

    Message of one client: :class:`Release`'s (``weight`` 0 or 1). Release: ``{"value": the
    sum, "weight": the sum of the weights, "clipped": their sum}`` (``clipped``: how many values
    were clipped, a diagnostic outside the guarantee).

    Attributes:
      noise: :class:`DiscreteLaplaceNoise`, :class:`LaplaceNoise` or
        :class:`AnalyticGaussianNoise`.
      spread: the width of a value's interval (host and device), e.g. ``2c`` for ``[-c, c]``.
    """

    local: ClassVar[bool] = True

    def preprocess(self, params: ReleaseParams, state: tuple, update: dict, key: jax.Array) -> dict:
        del state
        value, weight = update["value"], update["weight"]
        if self.noise.exact:
            rounding_key, noise_key = jax.random.split(key)
            center = update.get("center", jnp.float32(0.0))
            grid = self.grid_params(params)
            rounded = self.noise.integers(rounding_key, value, center, grid.clip_norm)
            noised = self.noise.noised(noise_key, rounded, grid) + center
        else:
            noised = value + params.scale * noise_draws(self.noise, key, jnp.shape(value))
        return {"value": jnp.sum(weight * noised), "weight": jnp.sum(weight),
                "clipped": update["clipped"]}  # fmt: skip


@dataclass(frozen=True)
class SiteCurator(Release, _Stateless):
    """Each site the curator of its own units: it releases the mean of its contributions plus
    one draw of the noise (:meth:`Release.released` inside the site, from its own key) and
    sends it times ``present``; the server sums what arrives.

    Message of one site: :class:`Release`'s and ``"present": f32[]`` (1 for a site of the
    release, 0 for padding). Release: ``{"value": the sum of the sites' releases, "weight": the
    sites, "clipped": their clipped counts}``."""

    local: ClassVar[bool] = True

    def preprocess(self, params: ReleaseParams, state: tuple, update: dict, key: jax.Array) -> dict:
        del state
        rounding_key, noise_key = jax.random.split(key) if self.noise.exact else (key, key)
        summed = self.contributions(params, update, rounding_key)
        present = update["present"]
        return {"value": present * self.released(params, summed, noise_key), "weight": present,
                "clipped": summed["clipped"]}  # fmt: skip


@dataclass(frozen=True)
class CentralNoise(Release, _Stateless):
    """A curator's release: the clients' contributions summed (on the grid: each rounded with
    the client's key), plus one draw of the noise (from the round's server key), divided by
    ``count(params)``.

    Message of one client: :class:`Release`'s (a weight 0 for a client outside the release).
    Release: ``(value, {"clipped_count": the summed clipped counts})``.

    Attributes:
      noise: as :class:`LocalNoise`'s.
      spread: the width of one contribution's interval (host and device).
      count: what the sum is divided by (host and device).
    """

    def preprocess(self, params: ReleaseParams, state: tuple, update: dict, key: jax.Array) -> dict:
        del state
        return self.contributions(params, update, key)

    def release(
        self, params: ReleaseParams, state: tuple, summed: dict, key: jax.Array
    ) -> tuple[jax.Array, tuple, dict]:
        return self.released(params, summed, key), state, {"clipped_count": summed["clipped"]}


class VoteParams(NamedTuple):
    """``truthful``: ``f32[]``, the probability ``e^eps / (e^eps + 1)`` (rounded to f32) that a
    report keeps the true bit."""

    truthful: Any


def flip_probability(truthful: float) -> Fraction:
    """Host: the exact probability that :func:`~jfed.privacy.randomized_response.
    keeps_true_bit_given_truthful` flips a bit, from the f32 ``truthful`` it runs with (its own
    64-bit threshold, read back): at least ``1 / (e^eps + 1)``, and ``2^-24`` where ``truthful``
    rounds to 1."""
    threshold = flip_threshold_from_truthful(jnp.asarray(np.float32(truthful)))
    return Fraction(int(threshold_value(threshold)), 2**64)


@dataclass(frozen=True)
class RandomizedResponseVotes(_Stateless):
    """Binary randomized response: each voter sends its bit, kept with probability ``truthful``
    and flipped otherwise (its own key); the server counts.

    Message of one client: ``{"bit": bool[], "weight": f32[]}`` (weight 1 for a voter, 0 for a
    client that does not vote). Release: ``{"above": reports of 1, "voters": voters}``."""

    Params: ClassVar[type] = VoteParams
    local: ClassVar[bool] = True
    adjacency: ClassVar[Adjacency] = Adjacency.BOUNDED

    def preprocess(self, params: VoteParams, state: tuple, update: dict, key: jax.Array) -> dict:
        del state
        honest = keeps_true_bit_given_truthful(key, params.truthful)
        report = jnp.where(honest, update["bit"], ~update["bit"]).astype(jnp.float32)
        return {"above": update["weight"] * report, "voters": update["weight"]}

    def event(self, params: VoteParams) -> dp_accounting.DpEvent:
        """``RandomizedResponseDpEvent(2 f, 2)``, f the flip probability as it runs
        (:func:`flip_probability`): a bit reported uniformly with probability 2f. Its pure eps,
        ``ln((1 - f) / f)``, is at most the eps ``truthful`` was computed from, and stays finite
        at any eps (``ln(2^24 - 1)``, 16.6, where ``truthful`` is 1)."""
        import dp_accounting

        return dp_accounting.RandomizedResponseDpEvent(float(2 * flip_probability(params.truthful)),
                                                       2)  # fmt: skip


# ------------------------------------------------------------------ the functional mean's release


class BatchMeansParams(NamedTuple):
    """The parameters of :class:`NoisyBatchMeans`, read unchanged from the functional mean's
    hyper-parameters.

    Attributes:
      noise_std: ``f32[K]``, sigma_l of each batch mean's coordinate l (0 past the terms used).
      clip: ``f32[K]``, kappa_l, the bound each function's coordinate l is clipped to.
      functions: ``i32[]``, n, the functions of a server.
      iterations: ``i32[]``, T, the disjoint batches (SGD steps).
      terms: ``i32[]``, r, the coordinates used.
    """

    noise_std: Any
    clip: Any
    functions: Any
    iterations: Any
    terms: Any


def sgd_average(batches: jax.Array) -> jax.Array:
    """T steps of ``a <- a - (a - b_t) / (t + 1)`` from 0 over ``batches: f32[T, K]``: the SGD
    iterate of the least-squares loss, which is the average of the T batch means."""
    iterate = jnp.zeros(batches.shape[1:], batches.dtype)
    for t in range(batches.shape[0]):
        iterate = iterate - (iterate - batches[t]) / (t + 1.0)
    return iterate


@dataclass(frozen=True)
class NoisyBatchMeans(_Stateless):
    """A server's T batch means of its clipped functions, each plus ``N(0, diag(sigma^2))``
    (batch t from ``fold_in(key, t)``), then :func:`sgd_average`: a local randomizer (each server
    is the curator of its own functions only).

    Message of one server: ``{"batches": f32[T, K], "weight": f32[], "diagnostics": {...}}``:
    the weight (1 for a server of the run, 0 for padding) multiplies its iterate and its
    diagnostics (computed from unnoised data, outside the guarantee). Release: the sums over the
    servers: ``{"value": the noisy iterates, "weight": the servers, "diagnostics": ...}``.

    Privacy: the batches are disjoint, so a function is in one batch mean; replacing it moves
    coordinate l of that mean by at most ``Delta_l = 2 kappa_l / (n // T)`` (a batch holds at
    least ``n // T`` functions). Whitened, the release is an isotropic Gaussian of noise
    multiplier ``1 / ||Delta / sigma||_2`` over the r coordinates used: :meth:`event`.
    """

    Params: ClassVar[type] = BatchMeansParams
    local: ClassVar[bool] = True
    adjacency: ClassVar[Adjacency] = Adjacency.BOUNDED

    def preprocess(
        self, params: BatchMeansParams, state: tuple, update: dict, key: jax.Array
    ) -> dict:
        del state
        batches, weight = update["batches"], update["weight"]
        noise = jnp.stack([private_normals(jax.random.fold_in(key, t), batches.shape[1:])
                           for t in range(batches.shape[0])])  # fmt: skip
        iterate = sgd_average(batches + params.noise_std * noise)
        diagnostics = jax.tree.map(lambda value: weight * value, update["diagnostics"])
        return {"value": weight * iterate, "weight": weight, "diagnostics": diagnostics}

    def event(self, params: BatchMeansParams) -> dp_accounting.DpEvent:
        """``GaussianDpEvent(1 / ||Delta / sigma||_2)`` over the r coordinates used
        (``NonPrivateDpEvent`` where a coordinate has no noise)."""
        import dp_accounting

        terms = int(params.terms)
        batch = int(params.functions) // int(params.iterations)
        sensitivities = 2.0 * np.asarray(params.clip, np.float64)[:terms] / batch
        noise_std = np.asarray(params.noise_std, np.float64)[:terms]
        if np.any(noise_std <= 0.0):
            return dp_accounting.NonPrivateDpEvent()  # a coordinate released as it is
        return dp_accounting.GaussianDpEvent(float(1.0 / np.linalg.norm(sensitivities / noise_std)))


@dataclass(frozen=True)
class DiscreteBatchMeans(NoisyBatchMeans):
    """:class:`NoisyBatchMeans`'s release on an integer grid: the same batch means, noised
    exactly, certified as the float release of the same sigma (so the guarantee holds for the
    program as it runs).

    Whitening. Coordinate l of every function's clipped projection is divided by its noise std
    sigma_l: the anisotropic Gaussian becomes an isotropic one (every coordinate's noise std 1 on
    a batch mean), and a function's whitened vector lies in the box ``|w_l| <= kappa_l /
    sigma_l``, inside the ball of radius ``R = ||kappa / sigma||_2`` (the r coordinates used).
    One isotropic noise is what the discrete Gaussian's L2 guarantee and its coupling need.
    The grid's pieces are :attr:`grid`'s (``grid.squared_bound`` is B, ``grid.noise_inflation()``
    is ``sqrt(B) / L``, a function's sensitivity on the grid over the float release's and about
    the noise std on a batch mean over sigma_l).

    Grid. Each function's whitened vector is one record of
    :class:`~jfed.privacy.discrete_aggregators.DiscreteGaussianSum` (clip norm R, so R becomes
    ``L = grid_norm`` grid units): rounded by conditional randomized rounding until its squared
    norm is at most ``B`` (``grid.squared_bound``, checked in exact integer arithmetic; after
    ``max_tries`` failures it is sent as zeros and counted). Batch t's integer sum (int32,
    exact) gets ``N_Z(0, s_t^2)`` per coordinate, ``s_t^2 >= (n_t / R)^2 B + 9`` grid units
    (``n_t`` the batch's functions), sampled exactly in integer arithmetic; only then is it
    scaled back, ``R / L``, divided by ``n_t`` and multiplied by sigma_l (post-processing): the
    batch mean plus noise of std about ``sigma_l sqrt(B) / L`` per coordinate (the
    float release's sigma_l; rounding adds at most ``(R / L)^2 / (4 n_t)`` of sigma_l^2 more).

    Sensitivity. Whatever a function's projection and its rounding's draws, its integer record
    ``v`` has ``||v||^2 <= B`` exactly; replacing one function of the server changes one batch's
    integer sum by ``v - v'``, ``||v - v'|| <= 2 sqrt(B)``, and nothing else (the batches are
    disjoint; the division by ``n_t`` comes after the noise).

    Event. ``DiscreteGaussianDpEvent(z, 2 sqrt(B), min(4B, 2 sqrt(r B)), r)`` (bounded
    adjacency, as the float release's), ``z = sqrt((n_b / R)^2 + 9 / B) / 2`` with ``n_b = n //
    T`` the smallest batch (a larger batch's noise is larger still), ``r`` = :attr:`dimension`.
    Its continuous coupling (:func:`~jfed.privacy.discrete_accounting.coupled_gaussian`: the
    variance less 9 grid units) is ``GaussianDpEvent(n_b / (2 R))``, which is the float
    release's ``1 / ||Delta / sigma||_2`` (``Delta_l = 2 kappa_l / n_b``): the exact release is
    certified as the float one of the same sigma, its delta plus ``(1 + e^eps)`` times
    :meth:`coupling_total_variation`.

    Attributes:
      dimension: the coordinates of a function's projection (static; the program's
        ``MAX_TERMS``: the coordinates past r are zeros, which round to zeros).
      grid_norm: L, the whitened radius R in grid units (static; :func:`batch_means_grid_norm`
        picks one for a sweep).
      beta: conditional rounding's parameter.
      max_tries: roundings drawn before a function is sent as zeros.
    """

    dimension: int = 1
    grid_norm: int = 2**12
    beta: float = DEFAULT_BETA
    max_tries: int = 32

    def __post_init__(self) -> None:
        self.grid  # noqa: B018 (its checks of the static fields)

    @property
    def grid(self) -> DiscreteGaussianSum:
        """The grid a function is rounded to and a batch's noise drawn on: one record of
        :class:`~jfed.privacy.discrete_aggregators.DiscreteGaussianSum` is one function."""
        return DiscreteGaussianSum(self.dimension, self.grid_norm, self.beta, self.max_tries)

    def _sum_multiplier(self, functions: Any, radius: Any, xp: Any = jnp) -> Any:
        """``sqrt((n / R)^2 + 9 / B)``: a batch sum's noise std over ``sqrt(B)`` for ``n``
        functions (the coupling's 9 grid units included); ``xp``: ``jnp`` on the device,
        ``np`` on the host."""
        from jfed.privacy.discrete_accounting import COUPLING_VARIANCE

        ratio = functions / radius
        return xp.sqrt(ratio * ratio + COUPLING_VARIANCE / self.grid.squared_bound)

    def preprocess(
        self, params: BatchMeansParams, state: tuple, update: dict, key: jax.Array
    ) -> dict:
        """ONE server's noisy iterate from its functions' projections (``update["projections"]:
        f32[N, K]``, ``update["batch"]: i32[N]``, each function's batch, T for none); where a
        used coordinate has no noise (a non-private configuration of the program) the batch
        means as they are."""
        del state
        batch_of, weight = update["batch"], update["weight"]
        iterations = update["batches"].shape[0]
        _, _, private = self.whitening(params)
        rounding_key, noise_key = jax.random.split(key)
        records = self.integers(params, update["projections"], rounding_key)
        # exact int32 sums per batch (a function outside every batch, id T, is dropped)
        totals = jax.ops.segment_sum(records["value"], batch_of, num_segments=iterations)
        counts = jax.ops.segment_sum(jnp.ones_like(batch_of, jnp.float32), batch_of,
                                     num_segments=iterations)  # fmt: skip

        def noised(total: jax.Array, count: jax.Array, t: jax.Array) -> tuple:
            bits, quotient, in_range = self.grid.noise_parameters(self.batch_grid(params, count))
            noise = discrete.discrete_gaussian(jax.random.fold_in(noise_key, t), total.shape,
                                               bits, quotient)  # fmt: skip
            return total + noise, in_range

        noised_totals, in_range = jax.vmap(noised)(totals, counts, jnp.arange(iterations))
        # NaN if a noise left the sampler's range (the host's check refuses such parameters)
        iterate = jnp.where(jnp.all(in_range), self.scaled_back(params, noised_totals, counts),
                            jnp.nan)  # fmt: skip
        iterate = jnp.where(private, iterate, sgd_average(update["batches"]))
        fallbacks = jnp.sum(jnp.where(batch_of < iterations, records["rounding_fallbacks"], 0.0))
        diagnostics = {**update["diagnostics"], "rounding_fallbacks": fallbacks}
        diagnostics = jax.tree.map(lambda value: weight * value, diagnostics)
        return {"value": weight * iterate, "weight": weight, "diagnostics": diagnostics}

    def integers(self, params: BatchMeansParams, projections: jax.Array, key: jax.Array) -> dict:
        """``{"value": i32[N, K], "rounding_fallbacks": f32[N], ...}``: each function's
        projection (``projections: f32[N, K]``) whitened and rounded on the grid as one record
        of :attr:`grid` (clip norm R), function i from ``fold_in(key, i)``."""
        whitening, radius, _ = self.whitening(params)
        clip_only = DiscreteGaussianSumParams(radius, np.float32(1.0))
        return jax.vmap(lambda i, projection: self.grid.preprocess(
            clip_only, (), projection * whitening, jax.random.fold_in(key, i)
        ))(jnp.arange(projections.shape[0]), projections)  # fmt: skip

    def scaled_back(
        self, params: BatchMeansParams, noised: jax.Array, counts: jax.Array
    ) -> jax.Array:
        """``f32[K]``: the iterate of the noised integer batch sums ``noised: i32[T, K]`` of
        ``counts: f32[T]`` functions each: ``R / L`` times them, over ``n_t``, times sigma_l
        (the whitening undone), then :func:`sgd_average` (the release's float map:
        post-processing of the exact noised integers)."""
        _, radius, _ = self.whitening(params)
        means = noised.astype(jnp.float32) * (radius / self.grid_norm)
        means = means / jnp.maximum(counts, 1.0)[:, None]
        return sgd_average(means * params.noise_std)

    def whitening(self, params: BatchMeansParams) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Device: ``(1 / sigma: f32[K]`` (0 past r), ``R: f32[]``, ``private: bool[]``): the
        whitening, the whitened radius ``||kappa / sigma||_2`` and whether every used
        coordinate has noise. Without noise (a non-private configuration of the program, whose
        values are not used) R is 1: no division by zero, no noise beyond the sampler's range."""
        used = jnp.arange(jnp.shape(params.noise_std)[0]) < params.terms
        noisy = params.noise_std > 0
        private = jnp.all(noisy | ~used)
        whitening = jnp.where(used & noisy, 1.0 / jnp.where(noisy, params.noise_std, 1.0), 0.0)
        radius = jnp.sqrt(jnp.sum(jnp.square(params.clip * whitening)))
        return whitening, jnp.where(private & (radius > 0), radius, 1.0), private

    def batch_grid(self, params: BatchMeansParams, count: jax.Array) -> DiscreteGaussianSumParams:
        """Device: the grid's parameters of a batch of ``count`` functions, ``(R, sqrt((n_t /
        R)^2 + 9 / B))`` in float32 (a few roundings of 2^-24, which the integer variance's
        relative margin of 2^-16 covers: the noise is never below what :meth:`event` states);
        a multiplier of 1 without noise."""
        _, radius, private = self.whitening(params)
        multiplier = jnp.where(private, self._sum_multiplier(count, radius), 1.0)
        return DiscreteGaussianSumParams(radius, multiplier)

    def whitened_radius(self, params: BatchMeansParams) -> float:
        """Host: ``R = ||kappa / sigma||_2`` over the r coordinates used (float64 of the float32
        numbers that ran)."""
        terms = int(params.terms)
        clip = np.asarray(params.clip, np.float64)[:terms]
        return float(np.linalg.norm(clip / np.asarray(params.noise_std, np.float64)[:terms]))

    def event(self, params: BatchMeansParams) -> dp_accounting.DpEvent:
        """``DiscreteGaussianDpEvent(sqrt((n_b / R)^2 + 9 / B) / 2, 2 sqrt(B), min(4B, 2
        sqrt(r B)), r)`` of one server's release (host; ``NonPrivateDpEvent`` where a used
        coordinate has no noise)."""
        import dp_accounting

        from jfed.privacy.discrete_accounting import DiscreteGaussianDpEvent

        if np.any(np.asarray(params.noise_std, np.float64)[: int(params.terms)] <= 0.0):
            return dp_accounting.NonPrivateDpEvent()
        smallest = int(params.functions) // int(params.iterations)
        multiplier = self._sum_multiplier(smallest, self.whitened_radius(params), np)
        squared = 4 * self.grid.squared_bound
        return DiscreteGaussianDpEvent(float(multiplier) / 2.0, math.sqrt(squared),
                                       l1_bound(squared, self.dimension),
                                       self.dimension)  # fmt: skip

    def check(self, params: BatchMeansParams) -> None:
        """Host: ``ValueError`` naming the numbers unless the largest batch's noise is in the
        sampler's range on this grid."""
        functions, iterations = int(params.functions), int(params.iterations)
        largest = -(-functions // iterations)
        multiplier = self._sum_multiplier(largest, self.whitened_radius(params), np)
        self.grid.check(DiscreteGaussianSumParams(1.0, float(multiplier)))

    def noise_variance_factor(self, params: BatchMeansParams) -> float:
        """Host: the discrete noise's variance on coordinate l of the smallest batch's mean
        over sigma_l^2, ``2^k m (R / (L n_b))^2``, ``2^k m`` the integer variance the device
        draws for that batch (:meth:`batch_noise`): about ``(sqrt(B) / L)^2``."""
        smallest = int(params.functions) // int(params.iterations)
        bits, quotient, _ = self.batch_noise(params, smallest)
        variance = float(2 ** int(bits) * int(quotient))
        return variance * (self.whitened_radius(params) / (self.grid_norm * smallest)) ** 2

    def batch_noise(self, params: BatchMeansParams, count: int):
        """Host: ``(k, m, in_range)`` of the noise ``N_Z(0, 2^k m)`` the device draws for a
        batch of ``count`` functions, computed by the device's own code from the float32
        parameters."""
        device = BatchMeansParams(*(jnp.asarray(np.asarray(value, np.float32))
                                    for value in params[:2]),
                                  *(jnp.int32(int(value)) for value in params[2:]))  # fmt: skip
        noise = jax.jit(lambda p, n: self.grid.noise_parameters(self.batch_grid(p, n)))
        return noise(device, jnp.float32(count))

    def coupling_total_variation(self, iterations: int) -> float:
        """The total variation between one server's noise (``iterations`` batches of
        :attr:`dimension` discrete Gaussian coordinates) and the continuous Gaussian it is
        accounted as (:func:`~jfed.privacy.discrete_accounting.coupling_total_variation`)."""
        from jfed.privacy.discrete_accounting import coupling_total_variation

        return coupling_total_variation(int(iterations) * self.dimension)


def batch_means_grid_norm(
    dimension: int, largest_batch: int, multiplier: float, most: int = 2**12
) -> int:
    """Host: the finest power-of-two grid (at most ``most``) on which a
    :class:`DiscreteBatchMeans` runs exactly: a batch sum's noise at ``multiplier`` (its std
    over ``sqrt(B)``, at most this for every batch), the coupling's 9 grid units added, in the
    sampler's range, and the int32 sum of ``largest_batch`` functions exact
    (:func:`~jfed.privacy.discrete_aggregators.largest_grid_norm`). ``ValueError`` if no grid
    does."""
    from jfed.privacy.discrete_accounting import COUPLING_VARIANCE

    grid_norm = most
    while True:
        bound = discrete.rounded_squared_norm_bound(grid_norm, dimension, DEFAULT_BETA)
        coupled = math.sqrt(multiplier**2 + COUPLING_VARIANCE / bound)
        fitted = largest_grid_norm(dimension, largest_batch, coupled, DEFAULT_BETA, grid_norm)
        if fitted == grid_norm:
            return grid_norm
        grid_norm = fitted
