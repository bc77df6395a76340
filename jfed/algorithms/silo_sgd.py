"""ISRL-DP federated SGD across data silos (docs/specs/silo_sgd.md; seed 004).

The silo axis is the engine's client axis: each client function below is written for ONE silo
(its padded records, its count n_i and its id) and the engine vmaps it over silos. Per-example
gradients are clipped to norm ``clip_norm`` (L), so one record changes a silo's minibatch-mean
gradient by at most ``2 L / K`` (replace-one adjacency): that is the sensitivity every noise scale
here is calibrated for (:mod:`jfed.algorithms.silo_privacy`).

Algorithms (all ``init`` + ``round``):

- :class:`NoisyMBSGD` (seed Algorithm 2): available silos send ``g_i + u_i``, the server averages
  and takes a projected step. Non-private MB-SGD is the same with zero noise.
- :class:`AcceleratedMBSGD`: AC-SA updates (Ghadimi and Lan), one-pass (disjoint batches without
  replacement, parallel composition) or ERM (with replacement, optional ridge), multi-stage
  restarts for strongly convex losses.
- :class:`ShuffleMBSGD` (seed section 5): every record's noisy gradient is a separate message;
  a shuffler permutes them, which leaves their sum unchanged, so the simulation averages them.
- :class:`LocalSGD`: ISRL-DP Local SGD (K noisy one-sample steps per silo, iterates averaged);
  with zero noise it is FedAvg.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jfed import catalog
from jfed._random import integers_and_normals, private_normals
from jfed._validation import check_int_range, check_nonnegative, check_positive
from jfed.algorithms.linear import project_to_ball
from jfed.algorithms.losses import Loss
from jfed.privacy.clipping import clip_per_example

AVAILABILITY = catalog.AVAILABILITIES
SAMPLING = catalog.SILO_SAMPLINGS


class Hyperparams(NamedTuple):
    """Traced parameters of a silo run.

    Attributes:
      step_size: ``f32[]``, eta (MB-SGD, Local SGD) or the AC-SA base step gamma.
      clip_norm: ``f32[]``, per-example gradient clip L.
      radius: ``f32[]``, projection radius B of the parameter ball.
      noise_std: ``f32[N]``, per-silo noise std (of the minibatch-mean gradient; per record for
        :class:`ShuffleMBSGD`; per local step for :class:`LocalSGD`).
      ridge: ``f32[]``, lambda of the ERM regulariser ``(lambda / 2) ||w||^2`` (accelerated ERM).
    """

    step_size: jax.Array
    clip_norm: jax.Array
    radius: jax.Array
    noise_std: jax.Array
    ridge: jax.Array


def hyperparams(
    n_silos: int,
    *,
    step_size: float,
    clip_norm: float = 1.0,
    radius: float = 10.0,
    noise_std: float | np.ndarray = 0.0,
    ridge: float = 0.0,
) -> Hyperparams:
    """Validated :class:`Hyperparams`; ``noise_std`` is a scalar or one value per silo."""
    noise = np.broadcast_to(np.asarray(noise_std, np.float64), (n_silos,))
    for value in noise:
        check_nonnegative("noise_std", value)
    return Hyperparams(
        jnp.float32(check_positive("step_size", step_size)),
        jnp.float32(check_positive("clip_norm", clip_norm)),
        jnp.float32(check_positive("radius", radius)),
        jnp.asarray(noise, jnp.float32),
        jnp.float32(check_nonnegative("ridge", ridge)),
    )


# ------------------------------------------------------------------------------ shared pieces


def availability_mask(key: jax.Array, n_silos: int, mode: str, available: int) -> jax.Array:
    """``f32[N]``: 1 for the silos that can talk to the server this round.

    ``all``: every silo; ``fixed``: a uniformly random subset of exactly ``available`` silos;
    ``bernoulli``: each silo independently with probability ``available / N`` (so M_r is random
    with mean ``available``).
    """
    if mode == "all":
        return jnp.ones(n_silos, jnp.float32)
    if mode == "fixed":
        ranks = jnp.argsort(jax.random.uniform(key, (n_silos,)))
        return (ranks < available).astype(jnp.float32)
    if mode == "bernoulli":
        return jax.random.bernoulli(key, available / n_silos, (n_silos,)).astype(jnp.float32)
    raise ValueError(f"unknown availability {mode!r}; expected one of {AVAILABILITY}")


def minibatch_weights(
    key: jax.Array, count: jax.Array, n_max: int, batch: int, sampling: str
) -> tuple[jax.Array, jax.Array]:
    """Which records a silo uses this round, as ``(indices: i32[b], weights: f32[b])``.

    The minibatch gradient is ``sum_j weights_j clip(grad_j)`` with weights summing to 1 in
    expectation (exactly, for the fixed-size samplers).

    - ``with-replacement``: K uniform draws from ``[0, count)`` (the seed's sampler), weights 1/K.
    - ``without-replacement``: K distinct records, weights 1/K.
    - ``poisson``: every record independently with probability q = K / count, weights 1/K on the
      chosen ones (the sampler dp-accounting's PLD accountant covers exactly); b = n_max, so a
      round costs O(n_i) gradients instead of O(K).
    """
    if sampling == "with-replacement":
        return jax.random.randint(key, (batch,), 0, count), jnp.full(batch, 1.0 / batch)
    if sampling == "without-replacement":
        scores = jnp.where(jnp.arange(n_max) < count, jax.random.uniform(key, (n_max,)), -1.0)
        return jax.lax.top_k(scores, batch)[1], jnp.full(batch, 1.0 / batch)
    if sampling == "poisson":
        chosen = jax.random.uniform(key, (n_max,)) < batch / count
        chosen = chosen & (jnp.arange(n_max) < count)
        return jnp.arange(n_max), chosen.astype(jnp.float32) / batch
    raise ValueError(f"unknown sampling {sampling!r}; expected one of {SAMPLING}")


def clipped_gradients(
    loss: Loss, w: jax.Array, X: jax.Array, y: jax.Array, clip_norm: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Per-example gradients ``f32[b, p]`` clipped to ``clip_norm``, and ``clipped: f32[b]``."""
    return clip_per_example(loss.per_example_gradients(w, X, y), clip_norm)


def noisy_minibatch_gradient(
    loss: Loss,
    w: jax.Array,
    silo,
    indices: jax.Array,
    weights: jax.Array,
    hp: Hyperparams,
    noise_key: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """One silo's ``g_i + u_i``: weighted sum of clipped gradients plus N(0, sigma_i^2 I).

    Returns the noisy gradient ``f32[p]`` and the fraction of the used examples that were clipped.
    """
    X, y = silo.rows(indices)
    gradients, clipped = clipped_gradients(loss, w, X, y, hp.clip_norm)
    noise = hp.noise_std[silo.silo_id] * private_normals(noise_key, w.shape)
    used = weights > 0
    clipped_fraction = jnp.sum(clipped * used) / jnp.maximum(jnp.sum(used), 1)
    # float32 on every backend: the noise is calibrated to the clipped gradients' norms, which a
    # GPU's default product (tf32 operands) could raise by up to 2^-11
    weighted = jnp.matmul(weights, gradients, precision=jax.lax.Precision.HIGHEST)
    return weighted + noise, clipped_fraction


def _available_sum(messages, weights):
    """Statistic: sums of the messages of available silos, their number, and clip counts."""
    vectors, available, clipped = messages
    return jnp.sum(vectors, 0), jnp.sum(available), jnp.sum(clipped)


class State(NamedTuple):
    """Server state shared by the silo algorithms.

    Attributes:
      w: ``f32[p]``, the current iterate (for AC-SA: the prox-center sequence w_t).
      w_ag: ``f32[p]``, the aggregated sequence (AC-SA output; equals w for the others).
      w_sum: ``f32[p]``, sum of the iterates being averaged.
      averaged: ``f32[]``, how many iterates are in ``w_sum``.
      round: ``i32[]``, rounds done.
      batch_key: key of the one-pass batch permutations (fixed for the run).
    """

    w: jax.Array
    w_ag: jax.Array
    w_sum: jax.Array
    averaged: jax.Array
    round: jax.Array
    batch_key: jax.Array

    @property
    def w_average(self) -> jax.Array:
        return self.w_sum / jnp.maximum(self.averaged, 1.0)


class RoundInfo(NamedTuple):
    """Per round: the iterate reported, the number of available silos and the clipped fraction."""

    w: jax.Array
    available: jax.Array
    clipped_fraction: jax.Array


@dataclass(frozen=True)
class _SiloConfig:
    """Static configuration common to the silo algorithms.

    Attributes:
      loss: the per-example loss.
      dim: feature dimension d (the parameter has ``loss.param_dim(d)`` entries).
      n_silos: N.
      batch: K, records per silo per round (local steps for Local SGD).
      rounds: R (sets the averaging window).
      availability: ``all``, ``fixed`` or ``bernoulli`` (see :func:`availability_mask`).
      available: M for ``fixed`` / ``bernoulli``.
      average_last: the output average covers the last this-many iterates (0: ``ceil(R / 2)``).
    """

    loss: Loss
    dim: int
    n_silos: int
    batch: int
    rounds: int
    availability: str = "all"
    available: int = 0
    average_last: int = 0

    def __post_init__(self) -> None:
        check_int_range("silos", self.n_silos, 1, 10**7)
        check_int_range("batch", self.batch, 1, 10**7)
        check_int_range("rounds", self.rounds, 1, 10**7)
        if self.availability not in AVAILABILITY:
            raise ValueError(
                f"unknown availability {self.availability!r}; expected one of {AVAILABILITY}"
            )
        if self.availability != "all":
            check_int_range("available", self.available, 1, self.n_silos)

    @property
    def param_dim(self) -> int:
        return self.loss.param_dim(self.dim)

    @property
    def window(self) -> int:
        return self.average_last or math.ceil(self.rounds / 2)

    def init(self, hp: Hyperparams, key: jax.Array) -> State:
        zeros = jnp.zeros(self.param_dim, jnp.float32)
        del hp
        return State(zeros, zeros, zeros, jnp.float32(0), jnp.int32(0), key)

    def _mask(self, key: jax.Array) -> jax.Array:
        return availability_mask(key, self.n_silos, self.availability, self.available)

    def _advance(self, state: State, w: jax.Array, w_ag: jax.Array, available, clipped):
        """Next state (averaging the reported iterate over the last ``window`` rounds) and info."""
        in_window = (state.round >= self.rounds - self.window).astype(jnp.float32)
        new_state = State(
            w,
            w_ag,
            state.w_sum + in_window * w_ag,
            state.averaged + in_window,
            state.round + 1,
            state.batch_key,
        )
        return new_state, RoundInfo(w_ag, available, clipped / jnp.maximum(available, 1.0))


def _mbsgd_client(loss, batch, sampling, broadcast, silo, key):
    w, mask, hp = broadcast
    if sampling == "with-replacement":
        # one counter-mode draw for the K indices and the noise (the common case, kept cheap)
        indices, normals = integers_and_normals(key, batch, silo.count, w.shape[0])
        X, y = silo.rows(indices)
        gradients, clipped = clipped_gradients(loss, w, X, y, hp.clip_norm)
        gradient = gradients.mean(0) + hp.noise_std[silo.silo_id] * normals
        clipped = clipped.mean()
    else:
        index_key, noise_key = jax.random.split(key)
        indices, weights = minibatch_weights(index_key, silo.count, silo.n_max, batch, sampling)
        gradient, clipped = noisy_minibatch_gradient(loss, w, silo, indices, weights, hp, noise_key)
    available = mask[silo.silo_id]
    return available * gradient, available, available * clipped


def _server_step(w, gradient_sum, available, step_size, radius):
    """Projected step with the average over available silos (no step when none is available)."""
    step = project_to_ball(w - step_size * gradient_sum / jnp.maximum(available, 1.0), radius)
    return jnp.where(available > 0, step, w)


@dataclass(frozen=True)
class NoisyMBSGD(_SiloConfig):
    """ISRL-DP Noisy MB-SGD (seed Algorithm 2); zero noise gives non-private MB-SGD.

    Attributes (beyond :class:`_SiloConfig`):
      sampling: ``with-replacement`` (the seed's), ``without-replacement`` (K distinct records) or
        ``poisson`` (what the exact PLD calibration covers); see :func:`minibatch_weights`.
    """

    sampling: str = "with-replacement"

    def round(
        self, state: State, hp: Hyperparams, key: jax.Array, clients
    ) -> tuple[State, RoundInfo]:
        client = partial(_mbsgd_client, self.loss, self.batch, self.sampling)
        gradient_sum, available, clipped = clients.sum(
            client, (state.w, self._mask(key), hp), _available_sum
        )
        w = _server_step(state.w, gradient_sum, available, hp.step_size, hp.radius)
        return self._advance(state, w, w, available, clipped)


def one_pass_indices(
    batch_key: jax.Array,
    silo_id: jax.Array,
    count: jax.Array,
    n_max: int,
    batch: int,
    round_index: jax.Array,
) -> jax.Array:
    """Round r's batch ``perm[rK : (r+1)K]`` of a per-silo permutation of ``[0, count)`` that is
    fixed for the run, so no record is used twice while ``R K <= count``."""
    scores = jax.random.uniform(jax.random.fold_in(batch_key, silo_id), (n_max,))
    order = jnp.argsort(jnp.where(jnp.arange(n_max) < count, scores, 2.0))
    return jax.lax.dynamic_slice(order, (round_index * batch,), (batch,))


def _one_pass_client(loss, batch, broadcast, silo, key):
    """Disjoint batches (see :func:`one_pass_indices`)."""
    w, mask, hp, batch_key, round_index = broadcast
    indices = one_pass_indices(batch_key, silo.silo_id, silo.count, silo.n_max, batch, round_index)
    weights = jnp.full(batch, 1.0 / batch)
    gradient, clipped = noisy_minibatch_gradient(loss, w, silo, indices, weights, hp, key)
    available = mask[silo.silo_id]
    return available * gradient, available, available * clipped


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
        a sampler of :func:`minibatch_weights` (fresh minibatch each round, the ERM variant).
      momentum: AC-SA (True) or plain projected SGD (False).
      stages: stage lengths, or ``None`` for a single stage.
    """

    sampling: str = "one-pass"
    momentum: bool = True
    stages: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.stages is not None and sum(self.stages) != self.rounds:
            raise ValueError(f"expected stages summing to rounds={self.rounds}, got {self.stages}")
        if self.sampling not in catalog.SAMPLINGS:
            raise ValueError(f"unknown sampling {self.sampling!r}")

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
        mask = self._mask(key)
        if self.sampling == "one-pass":
            client = partial(_one_pass_client, self.loss, self.batch)
            broadcast: tuple = (w_md, mask, hp, state.batch_key, state.round)
        else:
            client = partial(_mbsgd_client, self.loss, self.batch, self.sampling)
            broadcast = (w_md, mask, hp)
        gradient_sum, available, clipped = clients.sum(client, broadcast, _available_sum)
        gradient_sum = gradient_sum + hp.ridge * w_md * available
        w_new = _server_step(w, gradient_sum, available, gamma, hp.radius)
        w_ag_new = w_new / beta + (1.0 - 1.0 / beta) * w_ag
        return self._advance(state, w_new, w_ag_new, available, clipped)


def _shuffle_client(loss, batch, broadcast, silo, key):
    """Every sampled record's clipped gradient plus its own N(0, sigma0^2 I) is a message; the
    sum of the K messages has noise N(0, K sigma0^2 I), drawn at once (equal in distribution)."""
    w, mask, hp = broadcast
    index_key, noise_key = jax.random.split(key)
    indices, _ = minibatch_weights(index_key, silo.count, silo.n_max, batch, "with-replacement")
    X, y = silo.rows(indices)
    gradients, clipped = clipped_gradients(loss, w, X, y, hp.clip_norm)
    noise = math.sqrt(batch) * hp.noise_std[silo.silo_id] * private_normals(noise_key, w.shape)
    available = mask[silo.silo_id]
    return available * (gradients.sum(0) + noise), available, available * clipped.mean()


@dataclass(frozen=True)
class ShuffleMBSGD(_SiloConfig):
    """Shuffle-DP Noisy MB-SGD: M K per-record noisy gradients, shuffled, averaged by the server.

    The shuffler hides which silo and record each message came from; it does not change their sum,
    so the simulation averages directly. ``noise_std`` is per record (sigma0).
    """

    def round(
        self, state: State, hp: Hyperparams, key: jax.Array, clients
    ) -> tuple[State, RoundInfo]:
        client = partial(_shuffle_client, self.loss, self.batch)
        gradient_sum, available, clipped = clients.sum(
            client, (state.w, self._mask(key), hp), _available_sum
        )
        w = _server_step(state.w, gradient_sum / self.batch, available, hp.step_size, hp.radius)
        return self._advance(state, w, w, available, clipped)


def _local_sgd_client(loss, steps, sampling, broadcast, silo, key):
    """K local steps from the global model, ``w <- w - eta (g + u)``: g is the clipped gradient
    of one uniformly drawn record (``with-replacement``, the seed's), or the sum of the clipped
    gradients of the records Poisson-sampled at rate 1 / n_i (``poisson``: one record in
    expectation; what the exact PLD calibration covers)."""
    w, mask, hp = broadcast

    def step(carry, step_key):
        w_local, clipped_total = carry
        index_key, noise_key = jax.random.split(step_key)
        if sampling == "poisson":
            indices, weights = minibatch_weights(index_key, silo.count, silo.n_max, 1, "poisson")
            gradient, clipped = noisy_minibatch_gradient(
                loss, w_local, silo, indices, weights, hp, noise_key
            )
            return (w_local - hp.step_size * gradient, clipped_total + clipped), None
        X, y = silo.rows(jax.random.randint(index_key, (1,), 0, silo.count))
        gradient, clipped = clipped_gradients(loss, w_local, X, y, hp.clip_norm)
        noise = hp.noise_std[silo.silo_id] * jax.random.normal(noise_key, w_local.shape)
        return (w_local - hp.step_size * (gradient[0] + noise), clipped_total + clipped[0]), None

    (w_final, clipped), _ = jax.lax.scan(step, (w, 0.0), jax.random.split(key, steps))
    available = mask[silo.silo_id]
    return available * w_final, available, available * clipped / steps


@dataclass(frozen=True)
class LocalSGD(_SiloConfig):
    """ISRL-DP Local SGD (seed appendix I): each silo takes ``batch`` = K noisy one-sample local
    steps from the global model and sends its K-th iterate; the server averages the iterates of
    the available silos (and projects). Zero noise gives non-private Local SGD (FedAvg).

    Attributes (beyond :class:`_SiloConfig`):
      sampling: ``with-replacement`` (one uniform record per local step, the seed's) or
        ``poisson`` (each record with probability 1 / n_i per step, what the exact PLD
        calibration covers).
    """

    sampling: str = "with-replacement"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sampling not in ("with-replacement", "poisson"):
            raise ValueError(
                f"unknown Local SGD sampling {self.sampling!r}; expected 'with-replacement' or "
                "'poisson'"
            )

    def round(
        self, state: State, hp: Hyperparams, key: jax.Array, clients
    ) -> tuple[State, RoundInfo]:
        client = partial(_local_sgd_client, self.loss, self.batch, self.sampling)
        iterate_sum, available, clipped = clients.sum(
            client, (state.w, self._mask(key), hp), _available_sum
        )
        average = project_to_ball(iterate_sum / jnp.maximum(available, 1.0), hp.radius)
        w = jnp.where(available > 0, average, state.w)
        return self._advance(state, w, w, available, clipped)
