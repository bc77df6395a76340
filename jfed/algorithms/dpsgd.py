"""DP-SGD FedAvg with one sample per client: the baseline of the modulated-learning paper.

Every round every client computes its own least-squares gradient ``g_i = (x_i^T theta - y_i) x_i``,
clips it to norm ``G``, adds noise and sends it; the server averages and steps. The clip and the
noise are the round's aggregator, a local randomizer
(:class:`~jfed.privacy.client_stream.ClientStreamRandomizerSum`, released through
``clients.aggregate``): replacing one client's record moves its message by at most ``2G``, so a
round is, per client, the randomizer's mechanism at that sensitivity (Gaussian noise of std
``noise_std`` by default: multiplier ``noise_std / 2G``), under bounded adjacency; T
full-participation rounds compose (no subsampling amplification). The guarantee covers the
whole record ``(x_i, y_i)``. The noise is a :class:`~jfed.privacy.NoiseRandomizer`
(``FedAvg.randomizer``): another local randomizer plugs in, and the calibration and accounting
follow its event. With ``FedAvg.grid_norm`` set, each clipped gradient is released exactly on an
integer grid instead (:class:`~jfed.privacy.local_discrete.LocalGridGaussianSum`: an exact
integer norm bound, exact discrete Gaussian noise of multiplier ``hp.noise_multiplier``, scaled
back; sensitivity about ``2G``), so the guarantee holds for the program as it runs.

References: docs/specs/modulated.md (Baseline).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jfed._validation import check_int_range, check_nonnegative, check_positive
from jfed.algorithms.linear import project_to_ball
from jfed.privacy.client_stream import ClientStreamRandomizerSum, KeyedUpdate, NoiseScaleParams
from jfed.privacy.local_discrete import GridSumParams, LocalGridGaussian, LocalGridGaussianSum
from jfed.privacy.privatizers import GaussianNoise, NoiseRandomizer

GAUSSIAN = GaussianNoise()
PROTECTED = "one client's record (x_i, y_i)"
TRUST_MODEL = "local DP: untrusted server; each client randomizes its own gradient"


class Hyperparams(NamedTuple):
    """Traced parameters (f32 scalars): gradient clip ``G``, learning rate, the noise scale
    ``noise_std`` of every message (the randomizer's: its multiplier is ``noise_std`` over its
    sensitivity of a gradient moving by ``2 G``), radius; ``noise_multiplier``: z of the exact
    release on the grid (``FedAvg.grid_norm`` set; ``noise_std`` then 0), else ``None``."""

    clip_norm: jax.Array
    learning_rate: jax.Array
    noise_std: jax.Array
    radius: jax.Array
    noise_multiplier: jax.Array | None = None


def hyperparams(
    *,
    clip_norm: float = 2.0,
    learning_rate: float = 0.1,
    noise_std: float = 0.0,
    radius: float = 10.0,
    noise_multiplier: float | None = None,
) -> Hyperparams:
    """Validated :class:`Hyperparams`; defaults are the paper's tuned values on Fair
    (clip 2.06 rounded to 2, step 0.1); ``noise_std`` (or, on the grid, ``noise_multiplier``,
    with ``noise_std`` left 0) normally comes from the method's calibration
    (``jfed.methods.DPSGD``; :func:`jfed.privacy.rounds_plan`)."""
    multiplier = None
    if noise_multiplier is not None:
        multiplier = jnp.float32(check_positive("noise_multiplier", noise_multiplier))
        if noise_std != 0.0:
            raise ValueError(
                f"expected noise_std=0 with noise_multiplier (the grid release's noise is z's), "
                f"got noise_std={noise_std}"
            )
    return Hyperparams(
        jnp.float32(check_positive("clip_norm", clip_norm)),
        jnp.float32(check_positive("learning_rate", learning_rate)),
        jnp.float32(check_nonnegative("noise_std", noise_std)),
        jnp.float32(check_positive("radius", radius)),
        multiplier,
    )


def sensitivity(clip_norm: float) -> float:
    """L2 sensitivity ``2G`` of one clipped gradient under replace-one adjacency."""
    return 2.0 * check_positive("clip_norm", clip_norm)


def aggregator_params(hp: Hyperparams) -> NoiseScaleParams:
    """The local randomizer's parameters, the very leaves of ``hp`` (the ledger reads them)."""
    return NoiseScaleParams(hp.clip_norm, hp.noise_std)


class State(NamedTuple):
    """``theta: f32[d]``, ``theta_sum: f32[d]``, ``rounds_done: i32[]``."""

    theta: jax.Array
    theta_sum: jax.Array
    rounds_done: jax.Array


class RoundInfo(NamedTuple):
    """``theta: f32[d]`` after the round and the fraction of clipped gradients."""

    theta: jax.Array
    clipped_fraction: jax.Array


def client_gradient(theta: jax.Array, record, key: jax.Array) -> KeyedUpdate:
    """ONE client's least-squares gradient ``(x^T theta - y) x: f32[d]`` at ``theta: f32[d]``,
    with its key for its randomizer (the client draws nothing else)."""
    x, y = record
    return KeyedUpdate((x @ theta - y) * x, key)


def client_message(broadcast, record, key, randomizer: NoiseRandomizer = GAUSSIAN):
    """``(noisy clipped gradient: f32[d], clipped: f32[])`` of one client at ``broadcast =
    (theta, hp)``: what the round's aggregator makes of :func:`client_gradient` (its
    ``preprocess``), for code that needs one client's message."""
    theta, hp = broadcast
    aggregator = ClientStreamRandomizerSum(randomizer, int(jnp.shape(theta)[-1]))
    record = aggregator.preprocess(aggregator_params(hp), (), client_gradient(theta, record, key),
                                   key)  # fmt: skip
    return record["value"], record["clipped"]


@dataclass(frozen=True)
class FedAvg:
    """DP-SGD FedAvg, one local gradient step per client per round (full participation).

    Attributes:
      dim: d.
      randomizer: the local randomizer of every message (default Gaussian noise); its event is
        what the run composes.
      grid_norm: ``None`` (float noise of ``randomizer``), or L: every gradient released exactly
        on the integer grid with discrete Gaussian noise
        (:class:`~jfed.privacy.local_discrete.LocalGridGaussianSum`; ``randomizer`` unused).
    """

    dim: int
    randomizer: NoiseRandomizer = GAUSSIAN
    grid_norm: int | None = None

    def __post_init__(self) -> None:
        check_int_range("dim", self.dim, 1, 10**6)
        if self.grid_norm is not None:
            check_int_range("grid_norm", self.grid_norm, 1, 2**24)

    @property
    def aggregator(self) -> ClientStreamRandomizerSum | LocalGridGaussianSum:
        """The clip and the noise of every client's gradient (a local randomizer)."""
        if self.grid_norm is not None:
            return LocalGridGaussianSum(LocalGridGaussian(self.dim, self.grid_norm))
        return ClientStreamRandomizerSum(self.randomizer, self.dim)

    def params(self, hp: Hyperparams) -> NoiseScaleParams | GridSumParams:
        """The aggregator's parameters, the very leaves of ``hp``."""
        if self.grid_norm is None:
            return aggregator_params(hp)
        if hp.noise_multiplier is None:
            raise ValueError(
                "FedAvg on the integer grid (grid_norm set) reads "
                "hp.noise_multiplier: build hp with hyperparams(noise_multiplier=z)"
            )
        return GridSumParams(hp.clip_norm, hp.noise_multiplier)

    def init(self, hp: Hyperparams, key: jax.Array) -> State:
        del hp, key
        zeros = jnp.zeros(self.dim, jnp.float32)
        return State(zeros, zeros, jnp.int32(0))

    def round(
        self, state: State, hp: Hyperparams, key: jax.Array, clients
    ) -> tuple[State, RoundInfo]:
        # the release adds no noise: the server key is not read
        gradient_sum, _, diagnostics = clients.aggregate(
            self.aggregator, self.params(hp), (), client_gradient, state.theta, key
        )
        count = jnp.float32(clients.n_clients)
        theta = project_to_ball(state.theta - hp.learning_rate * gradient_sum / count, hp.radius)
        new_state = State(theta, state.theta_sum + theta, state.rounds_done + 1)
        return new_state, RoundInfo(theta, diagnostics["clipped_count"] / count)
