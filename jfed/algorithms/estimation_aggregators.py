"""The releases of the estimation methods as aggregators (:mod:`jfed.privacy.aggregators`): each
states the ``dp_accounting`` event of one release from its own parameters, read from the run's
hyper-parameters as they ran.

- :class:`LaplaceNoise`, :class:`AnalyticGaussianNoise`: the two noises of a release (``--mechanism
  laplace | gaussian``), each with its draw, its calibration and its event (:data:`NOISES`).
- :class:`LocalNoise`: a local randomizer. Each client (a site, a user, a server) adds the noise
  to its own values before they leave it; the server sums what arrives. Used where nobody, or
  only the client itself, is trusted.
- :class:`CentralNoise`: a curator sums the clients' values, divides by a denominator and adds
  the noise once.
- :class:`RandomizedResponseVotes`: every voter sends one bit through binary randomized response
  (:mod:`jfed.privacy.randomized_response`, exact at every eps).
- :class:`NoisyBatchMeans`: a server's T batch means of disjoint functions, each plus Gaussian
  noise of a per-coordinate standard deviation, averaged by T steps of SGD (the functional mean).

Every event is stated under bounded adjacency (``adjacency = BOUNDED``): a release's sensitivity is
the distance between its values on two inputs that differ in one protected unit (one unit's value,
one site's units, one function), which the ``sensitivity`` function of :class:`LocalNoise` and
:class:`CentralNoise` computes from the release's parameters. The local aggregators
(``local = True``) claim no amplification from who takes part.

Keys: a local randomizer draws from the key the engine gives ``preprocess`` (the client's
privacy stream); a central release draws from the server's key the round passes to ``aggregate``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jfed._random import private_normals, threshold_value
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
    """``Laplace(b)`` noise: pure eps-DP at ``b = sensitivity / eps`` (the sensitivity in L1)."""

    accountant: ClassVar[str] = "Laplace mechanism (pure eps)"
    guarantee: ClassVar[str] = "eps-DP"

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
    """``N(0, sigma^2)`` noise, sigma the analytic Gaussian's for (eps, delta) (Balle and Wang;
    the sensitivity in L2)."""

    accountant: ClassVar[str] = "analytic Gaussian (Balle and Wang)"
    guarantee: ClassVar[str] = "(eps, delta)-DP"

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


NOISES: dict[str, LaplaceNoise | AnalyticGaussianNoise] = {
    "laplace": LaplaceNoise(),
    "gaussian": AnalyticGaussianNoise(),
}
"""The noise each ``--mechanism`` names."""


def noise_draws(noise: Any, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Standard draws of ``noise`` of ``shape`` ``()`` or ``(m,)``: element i from
    ``fold_in(key, i)``, so the first elements do not depend on m (a program padded to a larger
    m draws the same numbers)."""
    if shape == ():
        return noise.draw(key)
    return jax.vmap(lambda i: noise.draw(jax.random.fold_in(key, i)))(jnp.arange(shape[0]))


# ------------------------------------------------------------------ the mean's noisy releases


class ReleaseParams(NamedTuple):
    """The parameters of a mean-estimation release, each read unchanged from the run's
    hyper-parameters (``f32[]`` / ``i32[]`` on the device, floats on the host).

    Attributes:
      scale: the noise scale (Laplace ``b`` or Gaussian sigma).
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


Sensitivity = Callable[[ReleaseParams], float]
"""Host: a release's sensitivity from its parameters (floats)."""


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
class LocalNoise(_Stateless):
    """A local randomizer: each client adds ``scale`` times standard noise to each of its values
    and sends ``sum(weight * (value + noise))`` (a weight 0 sends nothing: a client outside the
    release, a padded unit); the server sums what arrives.

    Message of one client: ``{"value": f32[] | f32[m], "weight": like value, "clipped": f32[]}``
    (``clipped``: how many of its values were clipped, a diagnostic outside the guarantee).
    Release: ``{"value": the sum, "weight": the sum of the weights, "clipped": their sum}``.

    Attributes:
      noise: :class:`LaplaceNoise` or :class:`AnalyticGaussianNoise`.
      sensitivity: the sensitivity of one value (host), e.g. ``2c`` for a value in ``[-c, c]``.
    """

    noise: Any
    sensitivity: Sensitivity
    Params: ClassVar[type] = ReleaseParams
    local: ClassVar[bool] = True
    adjacency: ClassVar[Adjacency] = Adjacency.BOUNDED

    def preprocess(self, params: ReleaseParams, state: tuple, update: dict, key: jax.Array) -> dict:
        del state
        value, weight = update["value"], update["weight"]
        noised = value + params.scale * noise_draws(self.noise, key, jnp.shape(value))
        return {"value": jnp.sum(weight * noised), "weight": jnp.sum(weight),
                "clipped": update["clipped"]}  # fmt: skip

    def event(self, params: ReleaseParams) -> dp_accounting.DpEvent:
        """The noise's event at ``scale / sensitivity`` (one value of one client)."""
        return self.noise.event(params.scale / self.sensitivity(params))


@dataclass(frozen=True)
class CentralNoise(_Stateless):
    """A curator's release: the clients' values summed, divided by ``denominator(params)``, plus
    ``scale`` times one standard draw of the noise (from the round's server key).

    Message of one client: ``{"value": f32[], "weight": f32[], "clipped": f32[]}`` (it adds
    ``weight * value``: 0 for a client outside the release). Release: ``(value,
    {"clipped_count": the summed clipped counts})``.

    Attributes:
      noise: :class:`LaplaceNoise` or :class:`AnalyticGaussianNoise`.
      sensitivity: the sensitivity of the released mean (host).
      denominator: what the sum is divided by, from the parameters (on the device).
    """

    noise: Any
    sensitivity: Sensitivity
    denominator: Callable[[ReleaseParams], jax.Array]
    Params: ClassVar[type] = ReleaseParams
    adjacency: ClassVar[Adjacency] = Adjacency.BOUNDED

    def preprocess(self, params: ReleaseParams, state: tuple, update: dict, key: jax.Array) -> dict:
        del params, state, key
        return {"value": update["weight"] * update["value"], "clipped": update["clipped"]}

    def release(
        self, params: ReleaseParams, state: tuple, summed: dict, key: jax.Array
    ) -> tuple[jax.Array, tuple, dict]:
        value = summed["value"] / self.denominator(params) + params.scale * self.noise.draw(key)
        return value, state, {"clipped_count": summed["clipped"]}

    def event(self, params: ReleaseParams) -> dp_accounting.DpEvent:
        """The noise's event at ``scale / sensitivity``."""
        return self.noise.event(params.scale / self.sensitivity(params))


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
