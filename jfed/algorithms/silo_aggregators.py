"""The silo algorithms' privacy: how a silo samples its records, and the aggregators whose
releases carry the ISRL-DP and shuffle-DP guarantees (docs/specs/silo_sgd.md).

Record samplers (:data:`SAMPLINGS`, by the name ``--sampling`` gives) draw a silo's minibatch on
the device and state, on the host, the event of a release over that minibatch:

- :class:`WithReplacement`: K uniform draws, weights 1/K; ``SampledWithReplacementDpEvent`` (no
  accountant here composes it);
- :class:`WithoutReplacement`: K distinct records, weights 1/K; ``SampledWithoutReplacement``;
- :class:`PoissonSampling`: every record with probability q = K / n_i, weights 1/K;
  ``PoissonSampled(q, .)``;
- :class:`OnePass`: round r's K records of a permutation fixed for the run (disjoint batches);
  the release itself, once per run (the rounds compose in parallel).

Aggregators (the :mod:`jfed.privacy.aggregators` protocol), one release per round over every
silo. A silo's message is built from its per-example gradients ``f32[b, p]`` and weights
``f32[b]`` (:class:`SiloMessage`); each example's gradient is clipped to L here, so one record
moves a minibatch mean of K gradients by at most ``2 L / K`` (replace-one adjacency):

- :class:`SiloClippedSum`: the weighted sum of clipped gradients, no noise (non-private MB-SGD
  and FedAvg: ``NonPrivateDpEvent``);
- :class:`SiloGaussian`: the same plus ``N(0, sigma_i^2 I)`` drawn by silo i in float32 (ISRL-DP,
  a local randomizer per silo; the ideal real-valued mechanism, floating-point sampling not
  modelled). Its event is the parallel composition over silos
  (:class:`~jfed.privacy.ParallelDpEvent`): silo i's branch is its sampler's event of
  ``Gaussian(sigma_i K / L)`` (z = noise std / L/K, the add-or-remove bound of one record's
  share; dp-accounting's PLD doubles it under replace-one), ``releases`` times a round;
- :class:`SiloDiscreteGaussian`: the same release on an integer grid, exactly: each record's
  clipped gradient rounded to integers under an exact norm bound, the silo's integer sum plus
  exact discrete Gaussian noise, scaled back (its event states ``DiscreteGaussianDpEvent``; the
  continuous Gaussian's accountants certify it through the coupling of
  :func:`jfed.privacy.discrete_accounting.coupled_gaussian`, which adds a total variation of
  about 10^-77 per noise coordinate to delta);
- :class:`ShuffledMessages`: every sampled record's clipped gradient plus ``N(0, sigma0^2 I)``
  is a message (an (eps0, delta0) Gaussian local randomizer); a shuffler permutes the M K
  messages of a round, so a round is central (eps_r, delta_r)-DP by amplification by shuffling
  (:func:`jfed.privacy.shuffle_epsilon`): its event. The bound is for ONE changed message among
  the round's, so each silo samples its K records without replacement (a record sends at most
  one message a round); it is applied given the sampled records, with no subsampling credit.
  The float32 noise is the ideal real-valued mechanism, floating-point sampling not modelled;
- :class:`ShuffledGridMessages`: the same with every message an exact local randomizer on an
  integer grid (one record's :class:`SiloDiscreteGaussian` release, drawn per message), its
  (eps0, delta0) certified through the continuous Gaussian its noise is coupled to, the
  coupling's total variation inside delta0.

Each silo draws its noise from the key the engine hands the aggregator (its privacy stream,
apart from the silo's own draws of records).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from jfed import random as jfed_random
from jfed._random import integers_and_normals, private_normals
from jfed._validation import check_int_range, check_nonnegative, check_positive
from jfed.privacy import canaries as canary_lib
from jfed.privacy.accounting import poisson_sampled, rounds_of, sampled_without_replacement
from jfed.privacy.canary_aggregator import (
    PARTICIPATION_STREAM,
    PREPROCESS_STREAM,
    CanaryState,
    CanaryWrapper,
)
from jfed.privacy.clipping import clip_per_example
from jfed.privacy.discrete_aggregators import (
    DEFAULT_BETA,
    DiscreteGaussianSum,
    DiscreteGaussianSumParams,
    l1_bound,
)
from jfed.privacy.guarantee import Adjacency

if TYPE_CHECKING:
    import dp_accounting

# ------------------------------------------------------------------------------ record samplers


@dataclass(frozen=True)
class _Sampler:
    """What every record sampler states (class attributes) and how its rounds compose.

    ``name``: its ``--sampling`` name; ``exact``: an accountant here composes its event tightly
    (what the exact calibration needs); ``disjoint_rounds``: each record takes part in one
    round at most, so the rounds compose in parallel (a run is one release of each record)."""

    name: ClassVar[str]
    exact: ClassVar[bool] = False
    disjoint_rounds: ClassVar[bool] = False

    def rounds_composed(self, rounds: int) -> int:
        """How many releases of one record R rounds compose."""
        return 1 if self.disjoint_rounds else rounds


@dataclass(frozen=True)
class WithReplacement(_Sampler):
    """K uniform draws from the silo's ``[0, n_i)`` (the seed's sampler), weights 1/K. No
    accountant here composes sampling with replacement."""

    name: ClassVar[str] = "with-replacement"

    def draw(self, key, silo, batch: int, pass_key, round_index) -> tuple[jax.Array, jax.Array]:
        """``(indices: i32[K], weights: f32[K])`` (one counter-mode draw of the K integers)."""
        del pass_key, round_index
        indices, _ = integers_and_normals(key, batch, silo.count, 0)
        return indices, jnp.full(batch, 1.0 / batch)

    def sampled_event(self, release, records: int, batch: int):
        import dp_accounting

        return dp_accounting.SampledWithReplacementDpEvent(records, batch, release)


@dataclass(frozen=True)
class WithoutReplacement(_Sampler):
    """K distinct records of the silo, weights 1/K: each record is in a round's minibatch at
    most once (with probability K / n_i). Needs K <= n_i: a smaller silo's minibatch would take
    padding rows (the silo experiments refuse it on the host)."""

    name: ClassVar[str] = "without-replacement"

    def draw(self, key, silo, batch: int, pass_key, round_index) -> tuple[jax.Array, jax.Array]:
        del pass_key, round_index
        real = jnp.arange(silo.n_max) < silo.count
        scores = jnp.where(real, jax.random.uniform(key, (silo.n_max,)), -1.0)
        return jax.lax.top_k(scores, batch)[1], jnp.full(batch, 1.0 / batch)

    def sampled_event(self, release, records: int, batch: int):
        """``SampledWithoutReplacement(n, K, .)`` (dp-accounting's RDP accountant composes it
        under replace-one: :func:`jfed.privacy.sampled_without_replacement`), of the continuous
        Gaussian a discrete release is coupled to (its analysis is the Gaussian's:
        :func:`~jfed.privacy.discrete_accounting.coupled_gaussian`)."""
        from jfed.privacy.discrete_accounting import coupled_gaussian

        return sampled_without_replacement(coupled_gaussian(release), records, batch)


@dataclass(frozen=True)
class PoissonSampling(_Sampler):
    """Every record independently with probability q = K / n_i, weights 1/K on the chosen ones:
    the sampler dp-accounting's PLD accountant covers exactly. Its minibatch spans the silo's
    ``n_max`` rows, so a round costs O(n_i) gradients instead of O(K)."""

    name: ClassVar[str] = "poisson"
    exact: ClassVar[bool] = True

    def draw(self, key, silo, batch: int, pass_key, round_index) -> tuple[jax.Array, jax.Array]:
        del pass_key, round_index
        chosen = jax.random.uniform(key, (silo.n_max,)) < batch / silo.count
        chosen = chosen & (jnp.arange(silo.n_max) < silo.count)
        return jnp.arange(silo.n_max), chosen.astype(jnp.float32) / batch

    def sampled_event(self, release, records: int, batch: int):
        return poisson_sampled(release, min(1.0, batch / records))


def one_pass_indices(
    pass_key: jax.Array,
    silo_id: jax.Array,
    count: jax.Array,
    n_max: int,
    batch: int,
    round_index: jax.Array,
) -> jax.Array:
    """Round r's batch ``perm[rK : (r+1)K]`` of a per-silo permutation of ``[0, count)`` that is
    fixed for the run, so no record is used twice while ``R K <= count``."""
    scores = jax.random.uniform(jax.random.fold_in(pass_key, silo_id), (n_max,))
    order = jnp.argsort(jnp.where(jnp.arange(n_max) < count, scores, 2.0))
    return jax.lax.dynamic_slice(order, (round_index * batch,), (batch,))


@dataclass(frozen=True)
class OnePass(_Sampler):
    """Disjoint batches: round r takes records ``rK .. (r+1)K - 1`` of a per-silo permutation
    fixed for the run (:func:`one_pass_indices`; needs R K <= n_i). Each record takes part in
    one round at most, so the rounds compose in parallel: a run is one release of each record."""

    name: ClassVar[str] = "one-pass"
    exact: ClassVar[bool] = True
    disjoint_rounds: ClassVar[bool] = True

    def draw(self, key, silo, batch: int, pass_key, round_index) -> tuple[jax.Array, jax.Array]:
        del key
        indices = one_pass_indices(pass_key, silo.silo_id, silo.count, silo.n_max, batch,
                                   round_index)  # fmt: skip
        return indices, jnp.full(batch, 1.0 / batch)

    def sampled_event(self, release, records: int, batch: int):
        """The release itself: the record is in its round's batch."""
        del records, batch
        return release


Sampling = WithReplacement | WithoutReplacement | PoissonSampling | OnePass
WITH_REPLACEMENT, WITHOUT_REPLACEMENT = WithReplacement(), WithoutReplacement()
POISSON, ONE_PASS = PoissonSampling(), OnePass()
SAMPLINGS: dict[str, Sampling] = {
    s.name: s for s in (WITH_REPLACEMENT, WITHOUT_REPLACEMENT, POISSON, ONE_PASS)
}
"""Every record sampler by its name (``--sampling``)."""


def named(table: dict[str, Any], value: Any, what: str) -> Any:
    """``value`` as the object of ``table`` it names (an object as it is); ``ValueError`` naming
    ``what`` and the choices for an unknown name."""
    if not isinstance(value, str):
        return value
    if value not in table:
        raise ValueError(f"unknown {what} {value!r}; expected one of {tuple(table)}")
    return table[value]


def sampling_named(sampling: Sampling | str) -> Sampling:
    """``sampling`` as a sampler (a name is looked up in :data:`SAMPLINGS`)."""
    return named(SAMPLINGS, sampling, "sampling")


# ------------------------------------------------------------------------------ aggregators


class SiloMessage(NamedTuple):
    """What ONE silo hands its aggregator (the engine vmaps it over silos).

    Attributes:
      gradients: ``f32[b, p]``, per-example gradients at the silo's sampled records.
      weights: ``f32[b]``, their weights in the minibatch (1/K each, 0 for records not drawn).
      available: ``f32[]``, 1 if the silo talks to the server this round (else its message is 0).
      silo_id: ``i32[]``, the silo.
    """

    gradients: jax.Array
    weights: jax.Array
    available: jax.Array
    silo_id: jax.Array


class ClipParams(NamedTuple):
    """``clip_norm``: L > 0, the bound on every per-example gradient (``f32[]``)."""

    clip_norm: Any


class ClippedParams(Protocol):
    """What the parameters of every :class:`SiloClippedSum` carry (:class:`ClipParams`,
    :class:`SiloNoiseParams`, :class:`ShuffleParams`): the clip norm L."""

    @property
    def clip_norm(self) -> Any: ...


class SiloNoiseParams(NamedTuple):
    """Parameters of :class:`SiloGaussian`.

    Attributes:
      clip_norm: L > 0 (``f32[]``).
      noise_std: sigma_i >= 0 of every silo (``f32[N]``): the std of each coordinate of the noise
        on the silo's minibatch mean.
    """

    clip_norm: Any
    noise_std: Any


def _weighted_clipped_sum(gradients, weights, clip_norm) -> tuple[jax.Array, jax.Array]:
    """``sum_j weights_j clip(gradients_j)`` and the fraction of the used examples clipped."""
    clipped_gradients, clipped = clip_per_example(gradients, clip_norm)
    used = weights > 0
    clipped_fraction = jnp.sum(clipped * used) / jnp.maximum(jnp.sum(used), 1)
    # float32 on every backend: the noise is calibrated to the clipped gradients' norms, which a
    # GPU's default product (tf32 operands) could raise by up to 2^-11
    weighted = jnp.matmul(weights, clipped_gradients, precision=jax.lax.Precision.HIGHEST)
    return weighted, clipped_fraction


@dataclass(frozen=True)
class SiloClippedSum:
    """Each silo's weighted sum of per-example gradients clipped to L, summed over the available
    silos; no noise (non-private: :meth:`event` is ``NonPrivateDpEvent``)."""

    Params: ClassVar[type] = ClipParams

    def read(self, hyper) -> ClippedParams:
        """Its parameters, read from the silo hyper-parameters unchanged (:class:`ClipParams`;
        a subclass's own, each with the clip norm)."""
        return ClipParams(hyper.clip_norm)

    def init(self, params, template) -> tuple:
        del params, template
        return ()

    def privatize(self, params, message: SiloMessage, key: jax.Array) -> tuple[jax.Array, dict]:
        """ONE silo's minibatch gradient as it leaves the silo (``f32[p]``) and its counts:
        ``{"clipped": the fraction of its used examples that were clipped}`` (and, on the
        integer grid, ``"rounding_fallbacks"``: records sent as zeros)."""
        del key
        value, clipped_fraction = _weighted_clipped_sum(message.gradients, message.weights,
                                                        params.clip_norm)  # fmt: skip
        return value, {"clipped": clipped_fraction}

    def rows_sum(self, params, gradients: jax.Array, weights: jax.Array, key: jax.Array):
        """``f32[p]``: rows ``gradients: f32[b, p]`` of weights ``f32[b]`` as they enter a silo's
        message before its noise (here the weighted sum of the clipped rows): what a canary
        record adds to its silo's release."""
        del key
        return _weighted_clipped_sum(gradients, weights, params.clip_norm)[0]

    def preprocess(self, params, state, update: SiloMessage, key: jax.Array) -> dict:
        """``{"value": the silo's message (0 when unavailable), "available", and its counts
        (:meth:`privatize`)}``."""
        del state
        value, counts = self.privatize(params, update, key)
        available = update.available
        return {"value": available * value, "available": available,
                **{name: available * count for name, count in counts.items()}}  # fmt: skip

    def release(self, params, state, summed: dict, key: jax.Array):
        """The sum of the available silos' messages, with their number and counts
        (``clipped_count``: the clipped fractions summed; ``rounding_fallbacks`` on the grid)."""
        del params, key
        counts = dict(summed)
        value, clipped = counts.pop("value"), counts.pop("clipped")
        return value, state, {**counts, "clipped_count": clipped}

    def coupling_total_variation(self, rounds: int) -> float:
        """The total variation between the run's noise and the continuous Gaussian it is
        accounted as (0: none; :meth:`SiloDiscreteGaussian.coupling_total_variation`)."""
        del rounds
        return 0.0

    def event(self, params) -> dp_accounting.DpEvent:
        import dp_accounting

        del params
        return dp_accounting.NonPrivateDpEvent()


@dataclass(frozen=True)
class SiloGaussian(SiloClippedSum):
    """ISRL-DP: silo i adds ``N(0, sigma_i^2 I)`` to its minibatch mean of clipped gradients
    before it leaves the silo; each silo's transcript is private in its own records, whoever
    reads it (a local randomizer per silo, replace-one adjacency of one record).

    Attributes:
      sampling: how each silo samples its records (its event wraps a release).
      batch: K, the minibatch mean's denominator (one record moves it by at most L / K under
        add-or-remove, 2 L / K under replace-one).
      records: n_i of every silo (host only, for the events; ``None`` where unknown).
      releases: noisy gradients each silo releases per round (Local SGD: its K local steps).
    """

    sampling: Sampling = PoissonSampling()
    batch: int = 1
    records: tuple[int, ...] | None = None
    releases: int = 1
    Params: ClassVar[type] = SiloNoiseParams
    local: ClassVar[bool] = True
    adjacency: ClassVar[Adjacency] = Adjacency.REPLACE_ONE

    def __post_init__(self) -> None:
        check_int_range("batch", self.batch, 1, 10**12)
        check_int_range("releases", self.releases, 1, 10**12)

    def read(self, hyper) -> SiloNoiseParams:
        return SiloNoiseParams(hyper.clip_norm, hyper.noise_std)

    def privatize(self, params, message: SiloMessage, key: jax.Array) -> tuple[jax.Array, dict]:
        weighted, counts = super().privatize(params, message, key)
        noise = params.noise_std[message.silo_id] * private_normals(key, weighted.shape)
        return weighted + noise, counts

    def release_event(self, clip_norm: float, noise_std: float) -> dp_accounting.DpEvent:
        """The event of one silo's release, unsampled: ``Gaussian(sigma K / L)``."""
        import dp_accounting

        multiplier = check_nonnegative("noise_std", noise_std) * self.batch / clip_norm
        return dp_accounting.GaussianDpEvent(multiplier)

    def silo_event(self, clip_norm: float, noise_std: float, records: int):
        """The event of one silo of ``records`` records over one round: its sampler's event of
        its release (:meth:`release_event`), :attr:`releases` times."""
        release = self.release_event(clip_norm, noise_std)
        return rounds_of(self.sampling.sampled_event(release, records, self.batch), self.releases)

    def event(self, params) -> dp_accounting.DpEvent:
        """``ParallelDpEvent`` of every silo's :meth:`silo_event` (host side; ``noise_std`` one
        value per silo or one for all)."""
        from jfed.privacy.accountants import ParallelDpEvent

        if self.records is None:
            raise ValueError("SiloGaussian states its event from the silos' record counts: "
                             "give records=(n_1, ..., n_N)")  # fmt: skip
        clip = check_positive("clip_norm", params.clip_norm)
        noise = np.broadcast_to(np.asarray(params.noise_std, np.float64), (len(self.records),))
        return ParallelDpEvent(tuple(
            self.silo_event(clip, float(s), n) for s, n in zip(noise, self.records, strict=True)
        ))  # fmt: skip


GRID_NORM = 2**12
"""The silo grid's clip norm in grid units where the silos' sums and the noise allow it
(:func:`~jfed.privacy.discrete_aggregators.largest_grid_norm`)."""


@dataclass(frozen=True)
class SiloDiscreteGaussian(SiloGaussian):
    """ISRL-DP on an integer grid: the release of :class:`SiloGaussian` (silo i's minibatch mean
    plus noise), made exactly, with the guarantee the float release of noise std sigma_i states,
    so that it holds for the program as it runs.

    Silo i: every record of its minibatch (every row of weight ``1 / K``; rows of weight 0 are
    records not drawn, and every sampler weights its rows 0 or ``1 / K``) has its gradient
    clipped to L, scaled so that L is ``grid_norm`` = G grid units and rounded to integers by
    conditional randomized rounding, redrawn until its squared norm is at most ``B =``
    :attr:`squared_bound` (checked in exact integer arithmetic; after ``max_tries`` failures the
    record is sent as zeros and counted in ``rounding_fallbacks``): one client's record of
    :class:`~jfed.privacy.discrete_aggregators.DiscreteGaussianSum`, one record a client. The
    silo sums its records' integers (int32, exact), adds ``N_Z(0, s^2)`` per coordinate, sampled
    exactly in integer arithmetic, with ``s^2 >= (sigma_i K / L)^2 B + 9`` grid units, and only
    then scales back: its message is ``(sum + noise) L / (G K)`` in float32, the minibatch mean
    plus noise of std about ``sigma_i`` :meth:`noise_inflation` (post-processing of the
    integers).

    Sensitivity. Whatever a record's gradient and its rounding's draws, its integer contribution
    ``r`` has ``||r||^2 <= B`` exactly. Replacing one record of the silo by another changes the
    integer sum by ``r - r'`` when the record is in the minibatch (nothing otherwise), and
    ``||r - r'|| <= 2 sqrt(B)``; the mean's ``1 / K`` is applied after the noise, so the
    integer sum's sensitivity does not depend on K (K enters the noise). In the mean's units that
    is ``2 sqrt(B) L / (G K)``: the float release's ``2 L / K`` times :meth:`noise_inflation`
    (``sqrt(B) / G``, 1.0001 at G = 4096 and p = 50 coordinates), and the noise is inflated by the
    same factor.

    Event. Silo i's release is ``DiscreteGaussianDpEvent(z_i, sqrt(B), min(B, sqrt(p B)), p)``,
    ``z_i = sqrt((sigma_i K / L)^2 + 9 / B)`` (noise std over ``sqrt(B)``, the distance a record's
    contribution moves the sum under add-or-remove: the float event's convention, which an
    accountant under replace-one doubles), wrapped by the silo's sampler, :attr:`releases` times
    a round; the run's event is their parallel composition over silos (:meth:`event`). It is
    certified by the continuous Gaussian's accountants (PLD under Poisson sampling, the analytic
    Gaussian for one pass, as the float release) through
    :func:`~jfed.privacy.discrete_accounting.coupled_gaussian`: the discrete noise is, to within
    :meth:`coupling_total_variation`, a post-processing of the continuous Gaussian of variance
    ``s^2 - 9``, whose multiplier is the float release's ``sigma_i K / L``. So the exact release
    is certified exactly as the float release of ``sigma_i`` is, its delta less ``(1 + e^eps)``
    times that total variation (10^-77 a coordinate), whatever the grid.

    Attributes (beyond :class:`SiloGaussian`'s):
      dimension: p, the coordinates of a gradient (static).
      grid_norm: G, the clip norm in grid units (an integer; ``largest_grid_norm`` picks the
        finest one whose int32 sums and noise fit).
      beta: conditional rounding's parameter.
      max_tries: roundings drawn before a record is sent as zeros.
    """

    dimension: int = 1
    grid_norm: int = GRID_NORM
    beta: float = DEFAULT_BETA
    max_tries: int = 32

    def __post_init__(self) -> None:
        super().__post_init__()
        self.grid  # noqa: B018 (its checks of the grid's fields)

    @property
    def grid(self) -> DiscreteGaussianSum:
        """The grid every record is rounded to and the silo's noise drawn on: one client of
        :class:`~jfed.privacy.discrete_aggregators.DiscreteGaussianSum` is one record."""
        return DiscreteGaussianSum(self.dimension, self.grid_norm, self.beta, self.max_tries)

    @property
    def squared_bound(self) -> int:
        """B: the exact integer bound on a rounded record's squared norm (grid units)."""
        return self.grid.squared_bound

    def noise_inflation(self) -> float:
        """``sqrt(B) / G``: one record's sensitivity over the float release's, and about the
        noise std on the mean over ``sigma_i``."""
        return self.grid.noise_inflation()

    def _coupling_share(self) -> float:
        """``9 / B``: the coupling's variance in units of the squared sensitivity."""
        from jfed.privacy.discrete_accounting import COUPLING_VARIANCE

        return COUPLING_VARIANCE / self.squared_bound

    def grid_params(self, params: SiloNoiseParams, silo_id: jax.Array) -> DiscreteGaussianSumParams:
        """Device: the grid's parameters of silo ``silo_id``: L and ``z_i = sqrt((sigma_i K /
        L)^2 + 9 / B)`` in float32 (a few roundings of 2^-24 each, which the integer variance's
        relative margin of 2^-16 covers: the noise is never below what the event states)."""
        multiplier = params.noise_std[silo_id] * np.float32(self.batch) / params.clip_norm
        return DiscreteGaussianSumParams(
            params.clip_norm, jnp.sqrt(multiplier * multiplier + np.float32(self._coupling_share()))
        )

    def rounded_rows(self, params, gradients: jax.Array, used: jax.Array, key: jax.Array):
        """``(i32[b, p]: every row's rounded record, zeros where not used, counts)``:
        ``gradients: f32[b, p]`` clipped, scaled and rounded one row at a time, each row from
        its own key (``fold_in(key, row)``); ``used: bool[b]``, the rows that are records."""
        grid = self.grid
        clip_only = DiscreteGaussianSumParams(params.clip_norm, np.float32(1.0))
        rows = jnp.arange(gradients.shape[0], dtype=jnp.int32)
        # rows not drawn are rounded as zeros (accepted at once): the rounding's loop runs as
        # long as the drawn rows need, whatever the silo's other records
        drawn = jnp.where(used[:, None], gradients, 0.0)
        records = jax.vmap(lambda row, gradient: grid.preprocess(
            clip_only, (), gradient, jax.random.fold_in(key, row)))(rows, drawn)  # fmt: skip
        counted = jnp.maximum(jnp.sum(used), 1)
        counts = {"clipped": jnp.sum(records["clipped"] * used) / counted,
                  "rounding_fallbacks": jnp.sum(records["rounding_fallbacks"] * used)}  # fmt: skip
        return jnp.where(used[:, None], records["value"], 0), counts

    def integer_rows(self, params, gradients: jax.Array, weights: jax.Array, key: jax.Array):
        """``(i32[p]: the sum of the rounded records of the rows of weight > 0, counts)``
        (:meth:`rounded_rows`)."""
        records, counts = self.rounded_rows(params, gradients, weights > 0, key)
        return jnp.sum(records, axis=0), counts

    def privatize(self, params, message: SiloMessage, key: jax.Array) -> tuple[jax.Array, dict]:
        """ONE silo's message ``(sum + noise) L / (G K)`` (``f32[p]``; NaN if the noise left the
        sampler's range, which :meth:`check` refuses on the host first) and its counts."""
        rounding_key, noise_key = jax.random.split(key)
        total, counts = self.integer_rows(params, message.gradients, message.weights,
                                          rounding_key)  # fmt: skip
        summed = {"value": total, "clipped": 0.0, "norm": 0.0, "rounding_fallbacks": 0.0}
        grid_params = self.grid_params(params, message.silo_id)
        value, _, _ = self.grid.release(grid_params, (), summed, noise_key)
        return value / np.float32(self.batch), counts

    def rows_sum(self, params, gradients: jax.Array, weights: jax.Array, key: jax.Array):
        """``f32[p]``: the rows' rounded records scaled to the mean's units, ``L / (G K)`` times
        their integer sum (what a canary record adds to its silo's message)."""
        total, _ = self.integer_rows(params, gradients, weights, key)
        scale = params.clip_norm / np.float32(self.grid_norm * self.batch)
        return total.astype(jnp.float32) * scale

    def release_event(self, clip_norm: float, noise_std: float) -> dp_accounting.DpEvent:
        """``DiscreteGaussianDpEvent(z, sqrt(B), min(B, sqrt(p B)), p)`` of one silo's release,
        unsampled, ``z = sqrt((sigma K / L)^2 + 9 / B)`` (host, float64 of the float32 values
        that ran): its continuous coupling is ``Gaussian(sigma K / L)``, the float release's."""
        from jfed.privacy.discrete_accounting import DiscreteGaussianDpEvent

        multiplier = check_positive("noise_std", noise_std) * self.batch / clip_norm
        bound = self.squared_bound
        return DiscreteGaussianDpEvent(math.sqrt(multiplier**2 + self._coupling_share()),
                                       math.sqrt(bound), l1_bound(bound, self.dimension),
                                       self.dimension)  # fmt: skip

    def check(self, params) -> None:
        """Host: ``ValueError`` naming the numbers unless every silo's noise is in the sampler's
        range on this grid (and coupled to a continuous Gaussian: any positive noise is)."""
        from jfed.privacy.discrete_accounting import coupled_gaussian

        clip = check_positive("clip_norm", params.clip_norm)
        for noise_std in np.atleast_1d(np.asarray(params.noise_std, np.float64)):
            release = self.release_event(clip, float(noise_std))
            self.grid.check(DiscreteGaussianSumParams(clip, release.noise_multiplier))
            coupled_gaussian(release)

    def coupling_total_variation(self, rounds: int) -> float:
        """The total variation between one silo's noise over ``rounds`` rounds (``rounds x
        releases x p`` discrete Gaussian coordinates) and the continuous Gaussian it is
        accounted as (:func:`~jfed.privacy.discrete_accounting.coupling_total_variation`)."""
        from jfed.privacy.discrete_accounting import coupling_total_variation

        return coupling_total_variation(int(rounds) * self.releases * self.dimension)


class ShuffleParams(NamedTuple):
    """Parameters of :class:`ShuffledMessages` (``f32[]`` / ``f32[N]`` on device).

    Attributes:
      clip_norm: L > 0.
      noise_std: sigma0 of every silo's per-record messages (``f32[N]``, one value).
      message_delta: delta0 of one message as a local randomizer.
      shuffle_delta: the delta the amplification by shuffling spends per round.
    """

    clip_norm: Any
    noise_std: Any
    message_delta: Any
    shuffle_delta: Any


@dataclass(frozen=True)
class ShuffledMessages(SiloClippedSum):
    """Shuffle DP: every sampled record's clipped gradient plus its own ``N(0, sigma0^2 I)`` is
    a message; a trusted shuffler permutes the round's M K messages, which leaves their sum
    unchanged, so the simulation sums them (a silo's K noises are drawn at once as one
    ``N(0, K sigma0^2 I)``, equal in distribution).

    A message is an (eps0, delta0) local randomizer for any two records (sensitivity 2 L; eps0
    by the analytic Gaussian); :meth:`event` is the round's central (eps_r, delta_r) from
    shuffling ``messages`` of them (:func:`jfed.privacy.shuffle_epsilon`), a bound for ONE
    message changed among them. So the per-record certificate needs each record to send at most
    one message a round, which the silos' sampling without replacement gives by construction
    (:class:`WithoutReplacement`, as in the seed's proof, after Girgis et al.: the randomizer
    applied to every record, then the reports chosen); replacing a record changes its one
    message if it is sampled, nothing otherwise. No subsampling credit is taken: the bound holds
    given the sampled records.

    Attributes:
      batch: K, the messages of one silo per round.
      messages: the messages shuffled per round, M K (host only, for the event).
    """

    batch: int = 1
    messages: int | None = None
    Params: ClassVar[type] = ShuffleParams
    local: ClassVar[bool] = True
    adjacency: ClassVar[Adjacency] = Adjacency.REPLACE_ONE

    def read(self, hyper) -> ShuffleParams:
        return ShuffleParams(hyper.clip_norm, hyper.noise_std, hyper.message_delta,
                             hyper.shuffle_delta)  # fmt: skip

    def privatize(self, params, message: SiloMessage, key: jax.Array):
        # each drawn record is a message of its own: the silo's part of the round is their sum
        each_once = message._replace(weights=jnp.ones_like(message.weights))
        total, counts = super().privatize(params, each_once, key)
        noise = params.noise_std[message.silo_id] * private_normals(key, total.shape)
        return total + math.sqrt(self.batch) * noise, counts

    def repeated_messages(self, params, gradients: jax.Array, included: jax.Array,
                          counts: jax.Array, silo: int, key: jax.Array) -> jax.Array:  # fmt: skip
        """``f32[p]``: the sum of ``counts_i`` messages of each row ``i`` of ``gradients:
        f32[M, p]``, its value the clipped row where ``included_i`` (``bool[M]``), else 0, each
        message with its own noise of silo ``silo``'s sigma0 (an audit's canary records;
        ``counts: f32[M]``). The ``sum counts`` noises are drawn at once from ``key`` as one
        ``N(0, sum counts sigma0^2 I)`` (equal in distribution, as a silo's are)."""
        signal = _weighted_clipped_sum(gradients, counts * included, params.clip_norm)[0]
        noise = private_normals(key, gradients.shape[1:])
        sigma0 = params.noise_std[silo]
        return signal + jnp.sqrt(jnp.sum(counts)) * sigma0 * noise

    def message_noise(self, clip_norm: float, epsilon0: float, delta0: float) -> float:
        """Host: the least sigma0 making one message (eps0, delta0)-DP for any two records:
        the analytic Gaussian's at sensitivity 2 L."""
        from jfed.privacy.gaussian import analytic_gaussian_noise

        return float(analytic_gaussian_noise(2.0 * clip_norm, epsilon0, delta0))

    def message_guarantee(self, params) -> tuple[float, float]:
        """Host: ``(eps0, the share of delta0 outside the accountant)``: (:meth:`message_epsilon`,
        0) for the ideal float message."""
        return self.message_epsilon(params), 0.0

    def message_epsilon(self, params) -> float:
        """eps0 of one message (host): the analytic Gaussian's at sensitivity 2 L, the least
        sigma0 and delta0."""
        from jfed.privacy.gaussian import analytic_gaussian_epsilon

        sigma0 = float(np.min(np.asarray(params.noise_std, np.float64)))
        return float(analytic_gaussian_epsilon(2.0 * check_positive("clip_norm", params.clip_norm),
                                               sigma0, float(params.message_delta)))  # fmt: skip

    def event(self, params) -> dp_accounting.DpEvent:
        """``ApproximateDpEvent(eps_r, delta_r)`` of one round's shuffled messages."""
        from jfed.privacy.accountants import ApproximateDpEvent
        from jfed.privacy.shuffle import shuffle_epsilon

        if self.messages is None:
            raise ValueError("ShuffledMessages states its event from the messages shuffled per "
                             "round: give messages=M K")  # fmt: skip
        epsilon, delta = shuffle_epsilon(self.message_epsilon(params), self.messages,
                                         float(params.shuffle_delta),
                                         float(params.message_delta))  # fmt: skip
        return ApproximateDpEvent(epsilon, delta)


@dataclass(frozen=True)
class ShuffledGridMessages(ShuffledMessages):
    """Shuffle DP with every message an exact local randomizer on an integer grid: the record's
    clipped gradient rounded to integers under an exact norm bound, plus its own exact discrete
    Gaussian noise, scaled back (``--noise discrete`` of shuffle-mbsgd). The grid, the rounding
    and the noise are those of :class:`SiloDiscreteGaussian` for ONE record (:attr:`record`:
    its release with K = 1), drawn once per message: a message is ``(r + eta) L / G`` with
    ``||r||^2 <= B`` checked in exact integers and ``eta ~ N_Z(0, s^2)`` per coordinate,
    ``s^2 >= (sigma0 / L)^2 B + 9`` grid units. The shuffler's sum of a round's messages is
    summed from the scaled-back messages (post-processing of each).

    Local guarantee. Any two records' rounded vectors are at most ``2 sqrt(B)`` apart, so a
    message is the discrete Gaussian mechanism of that sensitivity. Up to a total variation
    ``T`` (:func:`~jfed.privacy.discrete_accounting.coupling_total_variation` of its p
    coordinates, about 10^-77 each) its noise is the continuous ``N(0, s^2 - 9)`` followed by
    a data-independent randomization (:func:`~jfed.privacy.discrete_accounting.coupled_gaussian`),
    whose multiplier is the float message's ``sigma0 / (2 L)`` at the sensitivity ``2 sqrt(B)``.
    So a message is (eps0, delta0)-DP with eps0 the analytic Gaussian's at that multiplier and
    delta0 less ``(1 + e^eps0) T`` (:meth:`message_guarantee`): the local randomizer's own
    guarantee, on which the shuffling bound and the composition over the rounds stand as for
    :class:`ShuffledMessages`. The grid's inflation of the sensitivity is paid by the noise
    (about ``sigma0`` :meth:`noise_inflation` on a message).

    Attributes (beyond :class:`ShuffledMessages`'):
      dimension: p, the coordinates of a gradient (static).
      grid_norm: G, the clip norm in grid units (noise and grid must fit the sampler's range).
      max_tries: roundings drawn before a record is sent as zeros (counted).
    """

    dimension: int = 1
    grid_norm: int = GRID_NORM
    max_tries: int = 32

    def __post_init__(self) -> None:
        self.record  # noqa: B018 (its checks of the grid's fields)

    @property
    def record(self) -> SiloDiscreteGaussian:
        """ONE record's exact release (K = 1, unsampled: the shuffle is the amplification):
        its grid, rounding, noise parameters and event are a message's."""
        return SiloDiscreteGaussian(POISSON, 1, None, 1, self.dimension, self.grid_norm,
                                    max_tries=self.max_tries)  # fmt: skip

    def noise_inflation(self) -> float:
        """``sqrt(B) / G``: a message's sensitivity on the grid over the float message's."""
        return self.record.noise_inflation()

    def sent(self, params, gradients: jax.Array, used: jax.Array, silo_id: jax.Array,
             key: jax.Array) -> tuple[jax.Array, dict]:  # fmt: skip
        """``(f32[p]: the sum of the messages of the rows of gradients: f32[b, p] that are used
        (bool[b]), each rounded and noised on its own, counts)``, at silo ``silo_id``'s
        sigma0. NaN if the noise left the sampler's range (:meth:`check` refuses it first)."""
        rounding_key, noise_key = jax.random.split(key)
        record = self.record
        rows, counts = record.rounded_rows(params, gradients, used, rounding_key)
        rounded = {"value": rows, "clipped": 0.0, "norm": 0.0, "rounding_fallbacks": 0.0}
        # every coordinate of every row draws its own noise: b messages, b p draws at once
        noised, _, _ = record.grid.release(record.grid_params(params, silo_id), (), rounded,
                                           noise_key)  # fmt: skip
        return jnp.sum(jnp.where(used[:, None], noised, 0.0), axis=0), counts

    def privatize(self, params, message: SiloMessage, key: jax.Array):
        """ONE silo's part of the round: the sum of its K messages (every drawn record's)."""
        return self.sent(params, message.gradients, jnp.ones(message.weights.shape, bool),
                         message.silo_id, key)  # fmt: skip

    def repeated_messages(self, params, gradients: jax.Array, included: jax.Array,
                          counts: jax.Array, silo: int, key: jax.Array) -> jax.Array:  # fmt: skip
        """As :meth:`ShuffledMessages.repeated_messages`, each of the ``sum counts`` messages
        rounded and noised on its own: the messages are laid out one after another (row i's
        ``counts_i`` of them, then row i + 1's) and sent K at a time, as many times as they
        need (a loop of ``ceil(sum counts / K)`` steps, each from its own key), so a round
        costs the messages sent, not ``M K``."""
        values = jnp.where(included[:, None], gradients, 0.0)
        ends = jnp.cumsum(counts.astype(jnp.int32))
        total, chunk = ends[-1], self.batch

        def send_chunk(carry):
            step, summed = carry
            slots = step * chunk + jnp.arange(chunk, dtype=jnp.int32)
            owners = jnp.minimum(jnp.searchsorted(ends, slots, side="right"), len(counts) - 1)
            part, _ = self.sent(params, values[owners], slots < total, jnp.int32(silo),
                                jax.random.fold_in(key, step))  # fmt: skip
            return step + 1, summed + part

        start = (jnp.int32(0), jnp.zeros(gradients.shape[1:], jnp.float32))
        return jax.lax.while_loop(lambda carry: carry[0] * chunk < total, send_chunk, start)[1]

    def message_variation(self) -> float:
        """``T``: the total variation between a message's p noise coordinates and their
        continuous coupling."""
        return self.record.coupling_total_variation(1)

    def message_noise(self, clip_norm: float, epsilon0: float, delta0: float) -> float:
        """Host: the least sigma0 whose coupled continuous Gaussian is (eps0, delta0 - (1 +
        e^eps0) T)-DP, so that the discrete message is (eps0, delta0)-DP."""
        reserved = delta0 - (1.0 + math.exp(epsilon0)) * self.message_variation()
        return super().message_noise(clip_norm, epsilon0, check_positive("delta0", reserved))

    def message_guarantee(self, params) -> tuple[float, float]:
        """Host: ``(eps0, (1 + e^E) T)``: one message's eps0 at delta0 (the least sigma0),
        the analytic Gaussian's for the continuous Gaussian its noise is coupled to at ``delta0
        - (1 + e^E) T``, ``E`` its eps at ``delta0 / 2`` (at least eps0 as long as that share
        is at most ``delta0 / 2``, checked), and that share of delta0."""
        from jfed.privacy.discrete_accounting import coupled_gaussian, coupling_delta
        from jfed.privacy.gaussian import analytic_gaussian_epsilon

        clip = check_positive("clip_norm", params.clip_norm)
        sigma0 = float(np.min(np.asarray(params.noise_std, np.float64)))
        delta0 = float(params.message_delta)
        multiplier = coupled_gaussian(self.record.release_event(clip, sigma0)).noise_multiplier
        highest = float(analytic_gaussian_epsilon(2.0, multiplier, delta0 / 2.0))
        share = coupling_delta(highest, self.message_variation())
        if share > delta0 / 2.0:
            raise ValueError(f"the coupling of a message's discrete noise takes {share:.3g} of "
                             f"delta0={delta0:.3g}: use a finer grid")  # fmt: skip
        return float(analytic_gaussian_epsilon(2.0, multiplier, delta0 - share)), share

    def message_epsilon(self, params) -> float:
        """eps0 of one exact message (host; :meth:`message_guarantee`)."""
        return self.message_guarantee(params)[0]

    def check(self, params) -> None:
        """Host: ``ValueError`` naming the numbers unless every silo's message noise is in the
        sampler's range on this grid."""
        self.record.check(params)


# ------------------------------------------------------------------------------ audit


def _canaries_sampled(key: jax.Array, canaries: int, rate: float) -> jax.Array:
    """``bool[M]``: which of ``canaries`` canary records are sampled this round, each with
    probability ``rate`` on a coin of its own (canary i's from ``fold_in`` of ``key``'s
    participation stream, which no aggregator of the real records reads)."""
    stream = jfed_random.named(key, PARTICIPATION_STREAM)
    ids = jnp.arange(canaries, dtype=jnp.int32)
    coins = jax.vmap(lambda i: jfed_random.uniform(jax.random.fold_in(stream, i)))(ids)
    return coins < rate


@dataclass(frozen=True)
class CanaryRecords(CanaryWrapper):
    """:class:`SiloGaussian` with M canary RECORDS in one silo, for an empirical audit of the
    run (Steinke, Nasr and Jagielski's one-run lower bound: :mod:`jfed.privacy.canaries`).

    The silo methods protect one record of one silo (ISRL-DP, replace-one adjacency), so their
    canaries are records, not silos: canary i is a record of silo :attr:`silo` whose gradient,
    whatever the model, is its fixed direction ``u_i`` sent at :attr:`canary_scale` (far above
    any clip norm), so that the silo's clipping brings it to ``L u_i``. In every round:

    - canary i is in the silo's data with probability 1/2 (its coin, drawn once per run from the
      audit key, :func:`~jfed.privacy.canaries.canary_included`), and an included canary is in
      the silo's minibatch with probability ``K / n_s`` (:attr:`sampling_rate`), as each of the
      silo's n_s records is under Poisson sampling (drawn per round and canary from a named
      stream of the silo's privacy key, which the inner aggregator does not read);
    - a canary in the minibatch is one more row of the silo's message, weight ``1 / K``, clipped
      to L as the real rows are and summed with them under the silo's one noise draw (the same
      draw as without canaries; the rows are added at the server, once: :meth:`preprocess`);
    - the silo's released noisy gradient (what leaves the silo; 0 when it is unavailable) is
      the observation: each canary's score is updated with its cosine with it
      (:func:`~jfed.privacy.canaries.update_scores`).

    Nothing of the real records changes: the inner aggregator's parameters, event and keys are
    its own, the silos' record draws and noise draws are those of the run without canaries, and
    the clipped fraction counts the real rows alone. Under Poisson sampling with the fixed
    denominator K, adding records to a silo leaves every record's guarantee as it was.

    What the audit tests: one canary record of one silo present or absent. That is the
    replace-one pair (the canary, a record whose clipped gradient is 0 and which therefore moves
    nothing), so the certified replace-one eps covers it and the one-run bound is a lower bound
    on it (a weaker test than the certificate's worst pair, two records ``2 L / K`` apart).

    Attributes:
      inner: the silos' :class:`SiloGaussian`, Poisson-sampled, knowing every silo's records.
      canaries: M >= 2.
      silo: the silo holding the canary records.
      seed: the audit key's seed (``jax.random.key(seed)``): the canaries' directions and coins.
      canary_scale: the norm a canary's gradient is sent with, far above the clip norm.
    """

    inner: SiloGaussian
    canaries: int
    silo: int = 0
    seed: int = 0
    canary_scale: float = 1e6

    def __post_init__(self) -> None:
        check_int_range("canaries", self.canaries, 2, 2**31 - 1)
        poisson = isinstance(getattr(self.inner, "sampling", None), PoissonSampling)
        if not isinstance(self.inner, SiloGaussian) or not poisson:
            raise ValueError("canary records are sampled as a Poisson-sampled silo samples its "
                             f"records: expected a SiloGaussian with PoissonSampling, got "
                             f"{self.inner!r}")  # fmt: skip
        if self.inner.records is None:
            raise ValueError("canary records are sampled at the silo's rate K / n_s: give the "
                             "inner SiloGaussian records=(n_1, ..., n_N)")  # fmt: skip
        check_int_range("silo", self.silo, 0, len(self.inner.records) - 1)

    @property
    def sampling_rate(self) -> float:
        """``K / n_s``: the probability that a record of the canaries' silo is in a minibatch."""
        assert self.inner.records is not None  # __post_init__ refuses a SiloGaussian without
        return min(1.0, self.inner.batch / self.inner.records[self.silo])

    def read(self, hyper) -> SiloNoiseParams:
        return self.inner.read(hyper)

    def canary_weights(self, included: jax.Array, silo_id: jax.Array, available: jax.Array,
                       key: jax.Array) -> jax.Array:  # fmt: skip
        """``f32[M]``: each canary's weight in silo ``silo_id``'s minibatch drawn from ``key``
        (``1 / K`` if it is in it, else 0; 0 in every silo but the canaries' and where the silo
        is unavailable). ``included: bool[M]``: the canaries' coins."""
        in_batch = included & _canaries_sampled(key, self.canaries, self.sampling_rate)
        in_batch = in_batch & (silo_id == self.silo) & (available > 0)
        return in_batch.astype(jnp.float32) / self.inner.batch

    def canary_gradients(self, template: jax.Array) -> jax.Array:
        """``f32[M, p]``: the canaries' gradients, ``canary_scale u_i`` (as ``template``)."""
        shape = jax.ShapeDtypeStruct(template.shape, template.dtype)
        ids = jnp.arange(self.canaries, dtype=jnp.int32)
        return jax.vmap(lambda i: canary_lib.canary_update(
            self.audit_key(), i, shape, self.canary_scale))(ids)  # fmt: skip

    def canary_rows(self, params, weights: jax.Array, gradients: jax.Array,
                    key: jax.Array) -> jax.Array:  # fmt: skip
        """``f32[p]``: the canaries' rows (``gradients``: :meth:`canary_gradients`) as their
        silo's aggregator puts rows in its message (clipped and weighted; on the grid, rounded
        from ``key`` too), summed (``weights: f32[M]``)."""
        return self.inner.rows_sum(params, gradients, weights, key).astype(gradients.dtype)

    def preprocess(self, params, state, update: SiloMessage, key: jax.Array) -> dict:
        """ONE silo's record (the inner aggregator's, of its real records), plus
        ``canary_release``: its released value where it is the canaries' silo (else 0), and
        ``canary_weights``: the canaries' weights in its minibatch.

        The canaries' rows are added to their silo's message at the server (:meth:`release`),
        once, rather than in every silo of the vmapped round (all but one of which would hold
        them with weight 0): a row's clipped value does not depend on the others, and the
        silo's message is the sum of its rows plus its noise, so the release is the one the
        silo would have sent with the canaries in its minibatch."""
        weights = self.canary_weights(state.included, update.silo_id, update.available, key)
        record = self.inner.preprocess(params, state.inner, update, key)
        holds = (update.silo_id == self.silo).astype(record["value"].dtype)
        return dict(record, canary_release=holds * record["value"], canary_weights=weights)

    def release(self, params, state, summed: dict, key: jax.Array):
        """The inner release of the silos' messages, the canaries' rows added to their silo's;
        the canaries scored against their silo's released value."""
        summed = dict(summed)
        weights = summed.pop("canary_weights")
        gradients = self.canary_gradients(summed["value"])
        canaries = self.canary_rows(
            params, weights, gradients, jfed_random.named(key, PREPROCESS_STREAM)
        )
        audited = summed.pop("canary_release") + canaries
        summed["value"] = summed["value"] + canaries
        value, inner_state, diagnostics = self.inner.release(params, state.inner, summed, key)
        ids = jnp.arange(self.canaries, dtype=jnp.int32)
        scores = canary_lib.update_scores(state.scores, self.audit_key(), ids, audited)
        taking_part = jnp.sum(weights > 0, dtype=jnp.int32)
        diagnostics = dict(diagnostics, canaries_taking_part=taking_part)
        return value, CanaryState(inner_state, state.included, scores), diagnostics

    def event(self, params) -> dp_accounting.DpEvent:
        """The inner aggregator's event: a canary is one record, protected as any other."""
        return self.inner.event(params)


@dataclass(frozen=True)
class ShuffleCanaries(CanaryWrapper):
    """:class:`ShuffledMessages` with M canary RECORDS in one silo, for an empirical audit of
    shuffle-DP Noisy MB-SGD (Steinke, Nasr and Jagielski's one-run lower bound).

    A silo of shuffle-mbsgd draws its K records without replacement, so a canary record in its
    pool would take real records' places in the minibatch. Instead each canary is a record slot
    of its own beside the pool. In every round canary i sends ``c_i`` messages, one with
    probability ``K / n_s`` and none otherwise (the law of a record's messages under K draws
    without replacement from n_s records; a coin per round and canary from a named stream of
    the release key, which the inner aggregator does not read), its message its value through
    the same local randomizer as a record's (its own ``N(0, sigma0^2 I)``; on the grid, rounded
    and noised exactly: :meth:`ShuffledMessages.repeated_messages`), shuffled (summed) with the
    round's M K messages. Canary i's value is ``L u_i`` if its coin (probability 1/2, drawn once
    per run from the audit key) includes it, else 0: an excluded canary still sends its
    message, of a record whose clipped gradient is 0. Every canary's score is its cosine with
    the round's sum of ALL messages (the shuffler's output, not a silo's part of it, which the
    shuffle model never releases).

    Why the one-run bound is a lower bound on the certified eps. Steinke et al. need the coins
    independent (they are: one key per canary) and the mechanism (eps, delta)-DP for each
    canary's pair (included, excluded) whatever the other canaries are. That pair is the
    replace-one pair (canary, zero record) with the same ``c_i``: whether the slot is sampled
    does not depend on its value, as a record's sampling does not depend on its value. The
    certificate (per-round amplification by shuffling of ONE changed (eps0, delta0) message,
    composed over the rounds) protects a record that sends at most one message of that local
    randomizer a round, shuffled among at least the others' messages; the canary sends at most
    one, at its record's rate, and the other messages around it are the M K real ones plus the
    other canaries' (no fewer than a real record has: amplification by shuffling only grows
    with the messages shuffled). What this does not reproduce is the joint law of the K draws
    (a canary's draw does not take a real record's place), which the certificate does not use:
    it holds for each record alone, given the sampled records. The real records' draws, their
    noise keys and the certificate are those of the run without canaries.

    Attributes:
      inner: the silos' :class:`ShuffledMessages`.
      canaries: M >= 2.
      records: n_s, the records of the canaries' silo (a canary is sampled at K / n_s).
      silo: the silo holding the canary records (its availability is theirs).
      seed: the audit key's seed (``jax.random.key(seed)``): the canaries' directions and coins.
      canary_scale: the norm a canary's gradient is sent with, far above the clip norm.
    """

    inner: ShuffledMessages
    canaries: int
    records: int
    silo: int = 0
    seed: int = 0
    canary_scale: float = 1e6

    def __post_init__(self) -> None:
        check_int_range("canaries", self.canaries, 2, 2**31 - 1)
        check_int_range("records", self.records, 1, 2**31 - 1)
        check_int_range("silo", self.silo, 0, 2**31 - 1)
        if not isinstance(self.inner, ShuffledMessages):
            raise ValueError(f"expected a ShuffledMessages to audit, got {self.inner!r}")

    def read(self, hyper) -> ShuffleParams:
        return self.inner.read(hyper)

    @property
    def sampling_rate(self) -> float:
        """``K / n_s``: the probability that a record of the canaries' silo sends a message in a
        round (it is one of the K drawn without replacement from n_s)."""
        return min(1.0, self.inner.batch / self.records)

    def message_counts(self, key: jax.Array) -> jax.Array:
        """``f32[M]``: each canary's messages this round, 1 with probability ``K / n_s``
        (:attr:`sampling_rate`), else 0, from ``key`` (one coin per canary)."""
        return _canaries_sampled(key, self.canaries, self.sampling_rate).astype(jnp.float32)

    def canary_messages(self, params, state, template: jax.Array, available: jax.Array,
                        key: jax.Array) -> tuple[jax.Array, jax.Array]:  # fmt: skip
        """``(f32[p] the sum of the canaries' messages this round, f32[M] their counts, 0 or 1)``:
        ``sum_i c_i`` messages of values ``b_i L u_i``, each through the records' local
        randomizer (:meth:`ShuffledMessages.repeated_messages`: float noise drawn at once as
        one ``N(0, sum c_i sigma0^2 I)``; on the grid each message rounded and noised on its
        own)."""
        counts = available * self.message_counts(key)
        gradients = CanaryRecords.canary_gradients(self, template)  # type: ignore[arg-type]
        noise_key = jfed_random.named(key, PREPROCESS_STREAM)
        messages = self.inner.repeated_messages(params, gradients, state.included, counts,
                                                self.silo, noise_key)  # fmt: skip
        return messages, counts

    def preprocess(self, params, state, update: SiloMessage, key: jax.Array) -> dict:
        """ONE silo's record (the inner aggregator's), plus ``canary_available``: 1 where it is
        the canaries' silo and it takes part this round."""
        record = self.inner.preprocess(params, state.inner, update, key)
        holds = (update.silo_id == self.silo).astype(jnp.float32)
        return dict(record, canary_available=holds * update.available.astype(jnp.float32))

    def release(self, params, state, summed: dict, key: jax.Array):
        """The round's shuffled messages with the canaries' among them, summed; every canary
        scored against that sum."""
        summed = dict(summed)
        available = summed.pop("canary_available")
        messages, counts = self.canary_messages(params, state, summed["value"], available, key)
        summed["value"] = summed["value"] + messages.astype(summed["value"].dtype)
        value, inner_state, diagnostics = self.inner.release(params, state.inner, summed, key)
        ids = jnp.arange(self.canaries, dtype=jnp.int32)
        scores = canary_lib.update_scores(state.scores, self.audit_key(), ids, value)
        taking_part = jnp.sum((counts * state.included) > 0, dtype=jnp.int32)
        diagnostics = dict(diagnostics, canaries_taking_part=taking_part)
        return value, CanaryState(inner_state, state.included, scores), diagnostics

    def event(self, params) -> dp_accounting.DpEvent:
        """The inner aggregator's event: a canary is one record, protected as any other."""
        return self.inner.event(params)
