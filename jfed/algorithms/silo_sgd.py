"""ISRL-DP federated SGD across data silos (docs/specs/silo_sgd.md; seed 004).

The silo axis is the engine's client axis: each client function below is written for ONE silo
(its padded records, its count n_i and its id) and the engine vmaps it over silos. Every round
makes its one release through ``clients.aggregate`` with the algorithm's aggregator
(:mod:`jfed.algorithms.silo_aggregators`): it clips every per-example gradient to ``clip_norm``
(L), so one record changes a silo's minibatch-mean gradient by at most ``2 L / K`` (replace-one
adjacency), adds each silo's noise (float32 Gaussian, or exact discrete Gaussian on an integer
grid), and states the event of the release. Private and non-private runs, and the two noises,
differ only in the aggregator (:func:`minibatch_aggregator`).

Algorithms (all ``init`` + ``round``):

- :class:`NoisyMBSGD` (seed Algorithm 2): available silos send ``g_i + u_i``, the server averages
  and takes a projected step. Non-private MB-SGD is the same with :class:`SiloClippedSum`.
- :class:`AcceleratedMBSGD`: AC-SA updates (Ghadimi and Lan), one-pass (disjoint batches without
  replacement, parallel composition) or ERM (with replacement, optional ridge), multi-stage
  restarts for strongly convex losses.
- :class:`ShuffleMBSGD` (seed section 5): every sampled record's noisy gradient is a separate
  message (K records a silo, drawn without replacement: one message per record a round at
  most); a shuffler permutes them, which leaves their sum unchanged, so the simulation sums them.
- :class:`LocalSGD`: ISRL-DP Local SGD (K noisy one-sample steps per silo, iterates averaged),
  its K steps one release of the aggregator :class:`LocalSteps`; with
  :class:`SiloClippedSum` steps it is FedAvg.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jfed import random as jfed_random
from jfed._validation import check_int_range, check_nonnegative, check_positive
from jfed.algorithms.linear import project_to_ball
from jfed.algorithms.losses import _Loss
from jfed.algorithms.silo_aggregators import (
    ONE_PASS,
    POISSON,
    WITH_REPLACEMENT,
    WITHOUT_REPLACEMENT,
    CanaryRecords,
    Sampling,
    ShuffledMessages,
    SiloClippedSum,
    SiloDiscreteGaussian,
    SiloGaussian,
    SiloMessage,
    named,
    sampling_named,
)
from jfed.privacy import canaries as canary_lib
from jfed.privacy.canary_aggregator import PREPROCESS_STREAM, CanaryState, CanaryWrapper
from jfed.privacy.guarantee import Adjacency

RELEASE_STREAM = 1
"""Folded into the round's key for the key a release receives (the round's key draws the
available silos)."""


class Hyperparams(NamedTuple):
    """Traced parameters of a silo run.

    Attributes:
      step_size: ``f32[]``, eta (MB-SGD, Local SGD) or the AC-SA base step gamma.
      clip_norm: ``f32[]``, per-example gradient clip L.
      radius: ``f32[]``, projection radius B of the parameter ball.
      noise_std: ``f32[N]``, per-silo noise std (of the minibatch-mean gradient; per record for
        :class:`ShuffleMBSGD`; per local step for :class:`LocalSGD`).
      ridge: ``f32[]``, lambda of the ERM regulariser ``(lambda / 2) ||w||^2`` (accelerated ERM).
      message_delta: ``f32[]``, delta0 of one shuffled message (:class:`ShuffleMBSGD` only).
      shuffle_delta: ``f32[]``, the delta a round's shuffling spends (:class:`ShuffleMBSGD`).
    """

    step_size: jax.Array
    clip_norm: jax.Array
    radius: jax.Array
    noise_std: jax.Array
    ridge: jax.Array
    message_delta: jax.Array | None = None
    shuffle_delta: jax.Array | None = None


def hyperparams(
    n_silos: int,
    *,
    step_size: float,
    clip_norm: float = 1.0,
    radius: float = 10.0,
    noise_std: float | np.ndarray = 0.0,
    ridge: float = 0.0,
    message_delta: float | None = None,
    shuffle_delta: float | None = None,
) -> Hyperparams:
    """Validated :class:`Hyperparams`; ``noise_std`` is a scalar or one value per silo (rounded
    up to float32, so a run never adds less noise than it was calibrated for); the two deltas
    only for :class:`ShuffleMBSGD`."""
    noise = np.broadcast_to(np.asarray(noise_std, np.float64), (n_silos,))
    for value in noise:
        check_nonnegative("noise_std", value)
    noise32 = noise.astype(np.float32)
    noise32 = np.where(noise32 < noise, np.nextafter(noise32, np.float32(np.inf)), noise32)
    deltas = [None if d is None else jnp.float32(check_positive(name, d))
              for name, d in (("message_delta", message_delta),
                              ("shuffle_delta", shuffle_delta))]  # fmt: skip
    return Hyperparams(
        jnp.float32(check_positive("step_size", step_size)),
        jnp.float32(check_positive("clip_norm", clip_norm)),
        jnp.float32(check_positive("radius", radius)),
        jnp.asarray(noise32),
        jnp.float32(check_nonnegative("ridge", ridge)),
        *deltas,
    )


# ------------------------------------------------------------------------------ availability


@dataclass(frozen=True)
class EverySilo:
    """Every silo takes part in every round."""

    name: ClassVar[str] = "all"
    counted: ClassVar[bool] = False  # takes no --available

    def mask(self, key: jax.Array, n_silos: int, available: int) -> jax.Array:
        del key, available
        return jnp.ones(n_silos, jnp.float32)

    def expected(self, n_silos: int, available: int) -> int:
        """Silos taking part in a round (in expectation)."""
        del available
        return n_silos


@dataclass(frozen=True)
class _CountedSilos:
    """M silos take part in a round (``--available``), exactly or in expectation."""

    counted: ClassVar[bool] = True

    def expected(self, n_silos: int, available: int) -> int:
        del n_silos
        return available


@dataclass(frozen=True)
class FixedSilos(_CountedSilos):
    """A uniformly random subset of exactly M silos each round."""

    name: ClassVar[str] = "fixed"

    def mask(self, key: jax.Array, n_silos: int, available: int) -> jax.Array:
        ranks = jnp.argsort(jax.random.uniform(key, (n_silos,)))
        return (ranks < available).astype(jnp.float32)


@dataclass(frozen=True)
class BernoulliSilos(_CountedSilos):
    """Each silo independently with probability M / N (M_r random with mean M)."""

    name: ClassVar[str] = "bernoulli"

    def mask(self, key: jax.Array, n_silos: int, available: int) -> jax.Array:
        return jax.random.bernoulli(key, available / n_silos, (n_silos,)).astype(jnp.float32)


Availability = EverySilo | FixedSilos | BernoulliSilos
AVAILABILITIES: dict[str, Availability] = {
    a.name: a for a in (EverySilo(), FixedSilos(), BernoulliSilos())
}
"""Which silos can talk to the server in a round, by the name ``--availability`` gives."""


def availability_named(availability: Availability | str) -> Availability:
    """``availability`` as an object (a name is looked up in :data:`AVAILABILITIES`)."""
    return named(AVAILABILITIES, availability, "availability")


def availability_mask(
    key: jax.Array, n_silos: int, availability: Availability | str, available: int
) -> jax.Array:
    """``f32[N]``: 1 for the silos that can talk to the server this round (``available`` = M
    for :class:`FixedSilos` and :class:`BernoulliSilos`)."""
    return availability_named(availability).mask(key, n_silos, available)


# ------------------------------------------------------------------------------ shared pieces


@dataclass(frozen=True)
class Grid:
    """The integer grid of an exact silo release (:class:`SiloDiscreteGaussian`).

    Attributes:
      dimension: p, the coordinates of a gradient.
      grid_norm: the clip norm in grid units.
    """

    dimension: int
    grid_norm: int


def minibatch_aggregator(
    private: bool,
    sampling: Sampling,
    batch: int,
    records: tuple[int, ...] | None = None,
    releases: int = 1,
    grid: Grid | None = None,
) -> SiloClippedSum | SiloGaussian:
    """A silo minibatch's aggregator: ISRL-DP noise per silo (``private``; on ``grid``, exact
    discrete Gaussian noise, else float32 Gaussian noise) or none."""
    if not private:
        return SiloClippedSum()
    if grid is not None:
        return SiloDiscreteGaussian(sampling, batch, records, releases, grid.dimension,
                                    grid.grid_norm)  # fmt: skip
    return SiloGaussian(sampling, batch, records, releases)


def _minibatch_client(loss, batch, sampling, broadcast, silo, key) -> SiloMessage:
    """ONE silo's per-example gradients at its minibatch (the aggregator clips and noises)."""
    w, mask, pass_key, round_index = broadcast
    indices, weights = sampling.draw(key, silo, batch, pass_key, round_index)
    X, y = silo.rows(indices)
    gradients = loss.per_example_gradients(w, X, y)
    return SiloMessage(gradients, weights, mask[silo.silo_id], silo.silo_id)


def _server_step(w, gradient_sum, available, step_size, radius):
    """Projected step with the average over available silos (no step when none is available)."""
    step = project_to_ball(w - step_size * gradient_sum / jnp.maximum(available, 1.0), radius)
    return jnp.where(available > 0, step, w)


class State(NamedTuple):
    """Server state shared by the silo algorithms.

    Attributes:
      w: ``f32[p]``, the current iterate (for AC-SA: the prox-center sequence w_t).
      w_ag: ``f32[p]``, the aggregated sequence (AC-SA output; equals w for the others).
      w_sum: ``f32[p]``, sum of the iterates being averaged.
      averaged: ``f32[]``, how many iterates are in ``w_sum``.
      round: ``i32[]``, rounds done.
      batch_key: key of the one-pass batch permutations (fixed for the run).
      aggregator: the round's aggregator's state (``()`` for the silo aggregators; an audit's
        canaries and their scores with :class:`~jfed.algorithms.silo_aggregators.CanaryRecords`).
    """

    w: jax.Array
    w_ag: jax.Array
    w_sum: jax.Array
    averaged: jax.Array
    round: jax.Array
    batch_key: jax.Array
    aggregator: Any = ()

    @property
    def w_average(self) -> jax.Array:
        return self.w_sum / jnp.maximum(self.averaged, 1.0)


class Released(NamedTuple):
    """What a round's release returns beside its value: the available silos, their clipped
    fractions summed, the aggregator's next state and the records its rounding sent as zeros
    (on the integer grid; 0 otherwise)."""

    available: jax.Array
    clipped: jax.Array
    aggregator: Any
    rounding_fallbacks: jax.Array


class RoundInfo(NamedTuple):
    """Per round: the iterate reported, the number of available silos, the clipped fraction and
    the records the grid's rounding sent as zeros (0 for the float releases)."""

    w: jax.Array
    available: jax.Array
    clipped_fraction: jax.Array
    rounding_fallbacks: jax.Array


@dataclass(frozen=True)
class _SiloConfig:
    """Static configuration common to the silo algorithms.

    Attributes:
      loss: the per-example loss (:mod:`jfed.algorithms.losses`).
      dim: feature dimension d (the parameter has ``loss.param_dim(d)`` entries).
      n_silos: N.
      batch: K, records per silo per round (local steps for Local SGD).
      rounds: R (sets the averaging window).
      availability: :data:`AVAILABILITIES` (or its name): which silos take part in a round.
      available: M for ``fixed`` / ``bernoulli``.
      average_last: the output average covers the last this-many iterates (0: ``ceil(R / 2)``).
    """

    loss: _Loss
    dim: int
    n_silos: int
    batch: int
    rounds: int
    availability: Availability = EverySilo()
    available: int = 0
    average_last: int = 0

    if TYPE_CHECKING:  # every subclass declares both (a field, or a class constant)

        @property
        def sampling(self) -> Sampling:
            """How a silo draws its records each round."""

        @property
        def aggregator(self) -> Any:
            """The round's release."""

    def __post_init__(self) -> None:
        check_int_range("silos", self.n_silos, 1, 10**7)
        check_int_range("batch", self.batch, 1, 10**7)
        check_int_range("rounds", self.rounds, 1, 10**7)
        object.__setattr__(self, "availability", availability_named(self.availability))
        if self.availability.counted:
            check_int_range("available", self.available, 1, self.n_silos)
        if "sampling" in self.__dataclass_fields__:
            object.__setattr__(self, "sampling", sampling_named(self.sampling))
        if getattr(self, "aggregator", None) is None:
            object.__setattr__(self, "aggregator", self.default_aggregator())
        held = getattr(self.aggregator, "sampling", None)
        if held is not None and held != self.sampling:
            raise ValueError(f"the aggregator accounts {held.name} sampling, but the algorithm "
                             f"samples {self.sampling.name}")  # fmt: skip

    def default_aggregator(self) -> Any:
        """The aggregator when none is given: the private one (its event needs ``records``)."""
        raise NotImplementedError

    @property
    def param_dim(self) -> int:
        return self.loss.param_dim(self.dim)

    @property
    def window(self) -> int:
        return self.average_last or math.ceil(self.rounds / 2)

    def init(self, hp: Hyperparams, key: jax.Array) -> State:
        zeros = jnp.zeros(self.param_dim, jnp.float32)
        aggregator = self.aggregator.init(self.aggregator.read(hp), zeros)
        return State(zeros, zeros, zeros, jnp.float32(0), jnp.int32(0), key, aggregator)

    def _mask(self, key: jax.Array) -> jax.Array:
        return self.availability.mask(key, self.n_silos, self.available)

    def _release(self, clients, hp: Hyperparams, client, broadcast, key: jax.Array, state: State):
        """The round's one release through the aggregator: ``(sum of the available silos'
        messages, Released)``."""
        total, aggregator, diagnostics = clients.aggregate(
            self.aggregator, self.aggregator.read(hp), state.aggregator, client, broadcast,
            jax.random.fold_in(key, RELEASE_STREAM),
        )  # fmt: skip
        fallbacks = diagnostics.get("rounding_fallbacks", jnp.float32(0.0))
        return total, Released(diagnostics["available"], diagnostics["clipped_count"], aggregator,
                               fallbacks)  # fmt: skip

    def _advance(self, state: State, w: jax.Array, w_ag: jax.Array, released: Released):
        """Next state (averaging the reported iterate over the last ``window`` rounds) and info."""
        available, clipped = released.available, released.clipped
        in_window = (state.round >= self.rounds - self.window).astype(jnp.float32)
        new_state = State(
            w,
            w_ag,
            state.w_sum + in_window * w_ag,
            state.averaged + in_window,
            state.round + 1,
            state.batch_key,
            released.aggregator,
        )
        clipped_fraction = clipped / jnp.maximum(available, 1.0)
        return new_state, RoundInfo(w_ag, available, clipped_fraction,
                                    released.rounding_fallbacks)  # fmt: skip


@dataclass(frozen=True)
class NoisyMBSGD(_SiloConfig):
    """ISRL-DP Noisy MB-SGD (seed Algorithm 2); :class:`SiloClippedSum` gives non-private
    MB-SGD.

    Attributes (beyond :class:`_SiloConfig`):
      sampling: a record sampler of :data:`jfed.algorithms.silo_aggregators.SAMPLINGS` (or its
        name): ``with-replacement`` (the seed's), ``without-replacement``, ``poisson`` (what the
        exact PLD calibration covers) or ``one-pass``.
      aggregator: the round's release (:func:`minibatch_aggregator`; default: ISRL-DP noise).
    """

    sampling: Sampling = WITH_REPLACEMENT
    aggregator: Any = None

    def default_aggregator(self) -> SiloGaussian:
        return SiloGaussian(self.sampling, self.batch)

    def round(
        self, state: State, hp: Hyperparams, key: jax.Array, clients
    ) -> tuple[State, RoundInfo]:
        client = partial(_minibatch_client, self.loss, self.batch, self.sampling)
        broadcast = (state.w, self._mask(key), state.batch_key, state.round)
        gradient_sum, released = self._release(clients, hp, client, broadcast, key, state)
        w = _server_step(state.w, gradient_sum, released.available, hp.step_size, hp.radius)
        return self._advance(state, w, w, released)


def multistage_schedule(rounds: int, first: int = 2) -> tuple[int, ...]:
    """Stage lengths ``first, 2 first, 4 first, ...`` (the last takes what remains), summing to
    ``rounds``: the geometric restart schedule of multi-stage AC-SA (Ghadimi and Lan 2013)."""
    check_int_range("rounds", rounds, 1, 10**7)
    lengths: list[int] = []
    length = check_int_range("first", first, 1, rounds)
    while sum(lengths) + length < rounds:
        lengths.append(length)
        length *= 2
    lengths.append(rounds - sum(lengths))
    return tuple(lengths)


@dataclass(frozen=True)
class AcceleratedMBSGD(_SiloConfig):
    """Accelerated Noisy MB-SGD with AC-SA updates.

    With ``t`` the round index within the current stage (from 1), ``beta_t = (t + 1) / 2`` and
    ``gamma_t = (t + 1) gamma / 2``::

        w_md = w / beta_t + (1 - 1 / beta_t) w_ag
        g    = noisy minibatch gradient at w_md  (+ lambda w_md for the ERM regulariser)
        w    = Proj(w - gamma_t g);    w_ag = w / beta_t + (1 - 1 / beta_t) w_ag

    The output is ``w_ag``. With ``momentum=False`` (beta_t = 1, gamma_t = gamma) it is plain
    projected SGD. ``stages`` (lengths summing to ``rounds``, e.g. :func:`multistage_schedule`)
    restarts AC-SA from the previous stage's output.

    Attributes (beyond :class:`_SiloConfig`):
      sampling: ``one-pass`` (disjoint batches without replacement; needs R K <= n_i) or
        a sampler that draws a fresh minibatch each round (the ERM variant).
      momentum: AC-SA (True) or plain projected SGD (False).
      stages: stage lengths, or ``None`` for a single stage.
      aggregator: as :class:`NoisyMBSGD`'s.
    """

    sampling: Sampling = ONE_PASS
    momentum: bool = True
    stages: tuple[int, ...] | None = None
    aggregator: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.stages is not None and sum(self.stages) != self.rounds:
            raise ValueError(f"expected stages summing to rounds={self.rounds}, got {self.stages}")

    def default_aggregator(self) -> SiloGaussian:
        return SiloGaussian(self.sampling, self.batch)

    def _stage_round(self, round_index: jax.Array) -> jax.Array:
        """Round index within the current stage (0 at a stage's first round)."""
        if self.stages is None:
            return round_index
        starts = jnp.asarray(np.cumsum((0, *self.stages[:-1])), jnp.int32)
        stage = jnp.sum(round_index >= starts) - 1
        return round_index - starts[stage]

    def round(
        self, state: State, hp: Hyperparams, key: jax.Array, clients
    ) -> tuple[State, RoundInfo]:
        t_local = self._stage_round(state.round)
        restart = (t_local == 0) & (state.round > 0)
        w = jnp.where(restart, state.w_ag, state.w)
        w_ag = state.w_ag
        t = (t_local + 1).astype(jnp.float32)
        beta = (t + 1.0) / 2.0 if self.momentum else jnp.float32(1.0)
        gamma = (t + 1.0) * hp.step_size / 2.0 if self.momentum else hp.step_size
        w_md = w / beta + (1.0 - 1.0 / beta) * w_ag
        client = partial(_minibatch_client, self.loss, self.batch, self.sampling)
        broadcast = (w_md, self._mask(key), state.batch_key, state.round)
        gradient_sum, released = self._release(clients, hp, client, broadcast, key, state)
        gradient_sum = gradient_sum + hp.ridge * w_md * released.available
        w_new = _server_step(w, gradient_sum, released.available, gamma, hp.radius)
        w_ag_new = w_new / beta + (1.0 - 1.0 / beta) * w_ag
        return self._advance(state, w_new, w_ag_new, released)


@dataclass(frozen=True)
class ShuffleMBSGD(_SiloConfig):
    """Shuffle-DP Noisy MB-SGD: M K per-record noisy gradients (K distinct records drawn without
    replacement per silo, so a record sends at most one message a round: the one message among
    the round's that the shuffling bound protects), shuffled, averaged by the server
    (:class:`ShuffledMessages`). ``noise_std`` is per record (sigma0). A silo needs at least K
    records (the experiment refuses smaller ones: :class:`WithoutReplacement` would fill the
    batch with padding rows).

    Attributes (beyond :class:`_SiloConfig`):
      aggregator: :class:`ShuffledMessages` (default: K messages per silo, their count per round
        unknown to the event).
    """

    aggregator: Any = None
    sampling: ClassVar[Sampling] = WITHOUT_REPLACEMENT

    def default_aggregator(self) -> ShuffledMessages:
        return ShuffledMessages(self.batch)

    def round(
        self, state: State, hp: Hyperparams, key: jax.Array, clients
    ) -> tuple[State, RoundInfo]:
        client = partial(_minibatch_client, self.loss, self.batch, self.sampling)
        broadcast = (state.w, self._mask(key), state.batch_key, state.round)
        message_sum, released = self._release(clients, hp, client, broadcast, key, state)
        w = _server_step(state.w, message_sum / self.batch, released.available, hp.step_size,
                         hp.radius)  # fmt: skip
        return self._advance(state, w, w, released)


class LocalStart(NamedTuple):
    """What ONE silo hands :class:`LocalSteps`: where its local steps start and its records.

    Attributes:
      w: ``f32[p]``, the global model.
      step_size: ``f32[]``, eta of a local step.
      available: ``f32[]``, 1 if the silo takes part this round.
      silo: the silo's view (:class:`~jfed.data.silos.SiloView`).
      key: the silo's own key (its draws of records, one per step).
    """

    w: jax.Array
    step_size: jax.Array
    available: jax.Array
    silo: Any
    key: jax.Array


@dataclass(frozen=True)
class LocalSteps:
    """Local SGD's release: each silo takes ``steps`` = K local steps ``w <- w - eta g`` from the
    global model, g its ``inner`` aggregator's privatized one-sample gradient (each record of the
    step's sample clipped to L, plus the silo's noise for :class:`SiloGaussian`), and sends its
    K-th iterate; the release is the sum over available silos.

    The K-th iterate is a post-processing of the K noisy gradients, so the event is the inner
    aggregator's with K releases per round (``inner.releases = steps``). The noise of step k is
    drawn from the engine's privacy stream of the silo, the records from the silo's own key. On
    the integer grid (:class:`SiloDiscreteGaussian`) each step's gradient is the exact release.

    Attributes:
      loss: the per-example loss.
      sampling: a record sampler drawing one record per step in expectation (``batch`` 1):
        ``with-replacement`` or ``poisson`` (rate 1 / n_i).
      steps: K local steps per round.
      inner: :class:`SiloGaussian` or :class:`SiloDiscreteGaussian` (batch 1, ``releases =
        steps``), or :class:`SiloClippedSum`.
    """

    loss: _Loss
    sampling: Sampling
    steps: int
    inner: SiloClippedSum | SiloGaussian
    adjacency: ClassVar[Adjacency] = Adjacency.REPLACE_ONE
    local: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_int_range("steps", self.steps, 1, 10**7)
        releases = getattr(self.inner, "releases", self.steps)  # SiloClippedSum has none
        if releases != self.steps:
            raise ValueError(f"the inner aggregator releases {releases} gradients a "
                             f"round, the silo takes {self.steps} local steps")  # fmt: skip

    @property
    def Params(self) -> type:  # noqa: N802 (the protocol's name)
        return self.inner.Params

    def read(self, hyper):
        return self.inner.read(hyper)

    def init(self, params, template) -> tuple:
        return self.inner.init(params, template)

    def preprocess(self, params, state, update: LocalStart, key: jax.Array) -> dict:
        """ONE silo's K-th local iterate (0 when unavailable) and its counts: the clipped
        fraction over its steps (and, on the grid, the records sent as zeros)."""
        del state
        return self.local_steps(params, update, key)[0]

    def local_steps(
        self, params, update: LocalStart, key: jax.Array, added: Callable | None = None
    ) -> tuple[dict, Any]:  # fmt: skip
        """:meth:`preprocess`'s record, and what ``added`` observed at each step (stacked over
        the K steps; ``()`` without it). ``added(gradient, key) -> (gradient, observed)``, given
        a step's released gradient ``f32[p]`` and the step's privacy key, returns it with rows
        added (an audit's canary records) and what it observes of it."""
        silo = update.silo

        def step(w, keys):
            index_key, noise_key = keys
            indices, weights = self.sampling.draw(index_key, silo, 1, None, None)
            X, y = silo.rows(indices)
            message = SiloMessage(self.loss.per_example_gradients(w, X, y), weights,
                                  jnp.float32(1.0), silo.silo_id)  # fmt: skip
            gradient, counts = self.inner.privatize(params, message, noise_key)
            observed = ()
            if added is not None:
                gradient, observed = added(gradient, noise_key)
            return w - update.step_size * gradient, (counts, observed)

        keys = (jax.random.split(update.key, self.steps), jax.random.split(key, self.steps))
        w, (counts, observed) = jax.lax.scan(step, update.w, keys)
        counts = {name: jnp.sum(count) for name, count in counts.items()}
        counts["clipped"] = counts["clipped"] / self.steps
        available = update.available
        record = {"value": available * w, "available": available,
                  **{name: available * count for name, count in counts.items()}}  # fmt: skip
        return record, observed

    def release(self, params, state, summed: dict, key: jax.Array):
        return self.inner.release(params, state, summed, key)

    def event(self, params):
        """The inner aggregator's event (K releases of each silo a round)."""
        return self.inner.event(params)

    def coupling_total_variation(self, rounds: int) -> float:
        """The inner aggregator's (its K releases a round counted there)."""
        return self.inner.coupling_total_variation(rounds)


@dataclass(frozen=True)
class LocalStepCanaries(CanaryWrapper):
    """:class:`LocalSteps` with M canary RECORDS in one silo, for an empirical audit of Local
    SGD (the one-run lower bound; :class:`~jfed.algorithms.silo_aggregators.CanaryRecords` is
    the same audit of one release a round, whose rules these follow step by step).

    Each local step of the canaries' silo is a Poisson-sampled release of its own (rate
    ``1 / n_s``, one record expected), and the event counts K of them a round, so the canaries
    join every step as the silo's records do: an included canary (coin 1/2, once per run) is in
    step k's sample with probability ``1 / n_s`` (drawn from a named stream of the step's privacy
    key, which the step's noise does not read), its row ``L u_i`` clipped (and, on the grid,
    rounded) as a record's and added to the step's released gradient, which moves the silo's
    next local iterate. Every step's released gradient of that silo (the canaries' rows in it)
    is an observation: each canary's score is updated with its cosine with it (K observations a
    round). The rows are added inside the silo's steps, not at the server: a step's gradient
    moves the iterate at which the next step's real gradients are taken.

    Nothing of the real records' draws changes (their indices and noise come from the same keys
    as without canaries), nor the event: a canary is one record, protected as any other. Their
    trajectory does change where a canary is sampled, as it would with one more record. Cost: the
    canaries' rows ``M x p`` at every step of every silo (masked to zero outside the canaries'
    silo), as the silos' steps run in one vmapped map.

    Attributes:
      inner: the Local SGD steps audited, Poisson-sampled (:class:`LocalSteps` over a
        :class:`SiloGaussian` knowing every silo's records).
      canaries: M >= 2.
      silo: the silo holding the canary records.
      seed: the audit key's seed: the canaries' directions and coins.
      canary_scale: the norm a canary's gradient is sent with, far above the clip norm.
    """

    inner: LocalSteps
    canaries: int
    silo: int = 0
    seed: int = 0
    canary_scale: float = 1e6

    def __post_init__(self) -> None:
        self.step_canaries  # noqa: B018 (its checks: a Poisson-sampled SiloGaussian, the silo)

    @property
    def step_canaries(self) -> CanaryRecords:
        """The canaries of one step: :class:`CanaryRecords` of the steps' inner release."""
        steps = self.inner.inner
        if not isinstance(steps, SiloGaussian):
            raise ValueError(f"canary records need noised steps: got {steps!r}")
        return CanaryRecords(steps, self.canaries, self.silo, self.seed, self.canary_scale)

    def read(self, hyper):
        return self.inner.read(hyper)

    def preprocess(self, params, state, update: LocalStart, key: jax.Array) -> dict:
        """ONE silo's local steps (:meth:`LocalSteps.local_steps`) with the canaries' rows added
        to each step's gradient, plus ``canary_releases: f32[K, p]``, the steps' released
        gradients where it is the canaries' silo (else 0), and ``canary_taking_part``: the
        canaries sampled into its steps, summed over them."""
        canaries = self.step_canaries
        holds = (update.silo.silo_id == self.silo).astype(jnp.float32) * update.available
        # drawn once for the K steps (the directions are fixed for the run)
        gradients = canaries.canary_gradients(update.w)

        def added(gradient: jax.Array, step_key: jax.Array):
            weights = canaries.canary_weights(state.included, update.silo.silo_id,
                                              update.available, step_key)  # fmt: skip
            rows_key = jfed_random.named(step_key, PREPROCESS_STREAM)
            gradient = gradient + canaries.canary_rows(params, weights, gradients, rows_key)
            return gradient, (holds * gradient, jnp.sum(weights > 0, dtype=jnp.int32))

        record, (releases, taking_part) = self.inner.local_steps(params, update, key, added)
        return dict(record, canary_releases=releases, canary_taking_part=jnp.sum(taking_part))

    def release(self, params, state, summed: dict, key: jax.Array):
        """The inner release of the silos' K-th iterates; the canaries scored against each of
        their silo's K released step gradients in turn."""
        summed = dict(summed)
        releases = summed.pop("canary_releases")
        taking_part = summed.pop("canary_taking_part")
        value, inner_state, diagnostics = self.inner.release(params, state.inner, summed, key)
        ids = jnp.arange(self.canaries, dtype=jnp.int32)

        def score(scores, released):
            return canary_lib.update_scores(scores, self.audit_key(), ids, released), None

        scores, _ = jax.lax.scan(score, state.scores, releases)
        diagnostics = dict(diagnostics, canaries_taking_part=taking_part)
        return value, CanaryState(inner_state, state.included, scores), diagnostics

    def event(self, params):
        """The steps' event: a canary is one record, protected as any other."""
        return self.inner.event(params)


def _local_client(broadcast, silo, key) -> LocalStart:
    w, mask, step_size = broadcast
    return LocalStart(w, step_size, mask[silo.silo_id], silo, key)


LOCAL_SAMPLINGS = (WITH_REPLACEMENT, POISSON)
"""The samplers of Local SGD's one-record steps."""


@dataclass(frozen=True)
class LocalSGD(_SiloConfig):
    """ISRL-DP Local SGD (seed appendix I): each silo takes ``batch`` = K noisy one-sample local
    steps from the global model and sends its K-th iterate; the server averages the iterates of
    the available silos (and projects). :class:`LocalSteps` over :class:`SiloClippedSum` gives
    non-private Local SGD (FedAvg).

    Attributes (beyond :class:`_SiloConfig`):
      sampling: ``with-replacement`` (one uniform record per local step, the seed's) or
        ``poisson`` (each record with probability 1 / n_i per step, what the exact PLD
        calibration covers).
      aggregator: :class:`LocalSteps` (default: ISRL-DP noise at every step).
    """

    sampling: Sampling = WITH_REPLACEMENT
    aggregator: Any = None

    def __post_init__(self) -> None:
        sampling = sampling_named(self.sampling)
        if sampling not in LOCAL_SAMPLINGS:
            raise ValueError(
                f"unknown Local SGD sampling {sampling.name!r}; expected one of "
                f"{[s.name for s in LOCAL_SAMPLINGS]}"
            )
        super().__post_init__()

    def default_aggregator(self) -> LocalSteps:
        return self.local_steps(SiloGaussian(self.sampling, 1, None, self.batch))

    def local_steps(self, inner: SiloClippedSum | SiloGaussian) -> LocalSteps:
        """:class:`LocalSteps` of this algorithm over ``inner``."""
        return LocalSteps(self.loss, self.sampling, self.batch, inner)

    def round(
        self, state: State, hp: Hyperparams, key: jax.Array, clients
    ) -> tuple[State, RoundInfo]:
        broadcast = (state.w, self._mask(key), hp.step_size)
        iterate_sum, released = self._release(clients, hp, _local_client, broadcast, key, state)
        average = project_to_ball(iterate_sum / jnp.maximum(released.available, 1.0), hp.radius)
        w = jnp.where(released.available > 0, average, state.w)
        return self._advance(state, w, w, released)


def local_sgd(
    private: bool, loss: _Loss, sampling: Sampling, steps: int,
    records: tuple[int, ...] | None = None, grid: Grid | None = None,
) -> LocalSteps:  # fmt: skip
    """Local SGD's aggregator: K one-record steps with ISRL-DP noise (``private``; exact on
    ``grid``) or none."""
    inner = minibatch_aggregator(private, sampling, 1, records, steps, grid)
    return LocalSteps(loss, sampling, steps, inner)
