"""DP-SGD FedAvg with one sample per client: the baseline of the modulated-learning paper.

Every round every client computes its own least-squares gradient ``g_i = (x_i^T theta - y_i) x_i``,
clips it to norm ``G``, adds ``N(0, sigma^2 I)`` and sends it; the server averages and steps.
Replacing one client's record moves its message by at most ``2G``, so a round is the Gaussian
mechanism with sensitivity ``2G``; T full-participation rounds compose in zCDP (no subsampling
amplification). The guarantee covers the whole record ``(x_i, y_i)``.

References: specs/modulated.md (Baseline).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jfed import privacy
from jfed._validation import check_int_range, check_nonnegative, check_positive
from jfed.algorithms.linear import project_to_ball
from jfed.privacy.calibration import calibrate_rounds
from jfed.privacy.clipping import clip_to_ball

PROTECTED = "one client's record (x_i, y_i)"
TRUST_MODEL = "local DP: untrusted server; each client randomizes its own gradient"


class Hyperparams(NamedTuple):
    """Traced parameters (f32 scalars): gradient clip ``G``, learning rate, noise, radius."""

    clip_norm: jax.Array
    learning_rate: jax.Array
    noise_std: jax.Array
    radius: jax.Array


def hyperparams(
    *,
    clip_norm: float = 2.0,
    learning_rate: float = 0.1,
    noise_std: float = 0.0,
    radius: float = 10.0,
) -> Hyperparams:
    """Validated :class:`Hyperparams`; defaults are the paper's tuned values on Fair
    (clip 2.06 rounded to 2, step 0.1)."""
    return Hyperparams(
        jnp.float32(check_positive("clip_norm", clip_norm)),
        jnp.float32(check_positive("learning_rate", learning_rate)),
        jnp.float32(check_nonnegative("noise_std", noise_std)),
        jnp.float32(check_positive("radius", radius)),
    )


def sensitivity(clip_norm: float) -> float:
    """L2 sensitivity ``2G`` of one clipped gradient under replace-one adjacency."""
    return 2.0 * check_positive("clip_norm", clip_norm)


def calibrate(
    epsilon: float, delta: float, rounds: int, clip_norm: float, accountant: str = "zcdp"
) -> tuple[float, privacy.PrivacyGuarantee]:
    """Noise per round so that ``rounds`` full-participation rounds are (eps, delta)-LDP.

    ``accountant`` as in :func:`jfed.privacy.calibration.calibrate_rounds` (default zCDP, as the
    modulated-learning paper accounts its DP-SGD baseline).
    """
    rounds = check_int_range("rounds", rounds, 1, 10**9)
    noise_std, spent, rho, label = calibrate_rounds(
        sensitivity(clip_norm), epsilon, delta, rounds, accountant
    )
    guarantee = privacy.PrivacyGuarantee.local(spent, delta, label, PROTECTED, TRUST_MODEL, rho)
    return noise_std, guarantee


@dataclass(frozen=True)
class PrivacyPlan:
    """The gradient clip, the noise calibrated for it and the guarantee it certifies, built
    together by :func:`plan` so they cannot drift apart; :meth:`hyperparams` takes only what does
    not change privacy (learning rate, radius).

    Attributes:
      clip_norm: G; rounds: T; noise_std: sigma per coordinate per round; guarantee: what it
      certifies.
    """

    clip_norm: float
    rounds: int
    noise_std: float
    guarantee: privacy.PrivacyGuarantee

    def hyperparams(self, **server: float) -> Hyperparams:
        """The traced hyper-parameters; the clip and the noise are the plan's, ``server`` takes
        ``learning_rate`` and ``radius`` (with :func:`hyperparams`' defaults); passing the clip or
        the noise again is a ``TypeError``."""
        return hyperparams(clip_norm=self.clip_norm, noise_std=self.noise_std, **server)


def plan(
    epsilon: float, delta: float, rounds: int, *, clip_norm: float = 2.0, accountant: str = "zcdp"
) -> PrivacyPlan:
    """Calibrate T rounds of clipped gradients (clip G) to be (eps, delta)-LDP and bundle the
    clip, the noise and the guarantee (:class:`PrivacyPlan`)."""
    noise_std, guarantee = calibrate(epsilon, delta, rounds, clip_norm, accountant)
    return PrivacyPlan(float(clip_norm), int(rounds), float(noise_std), guarantee)


class State(NamedTuple):
    """``theta: f32[d]``, ``theta_sum: f32[d]``, ``rounds_done: i32[]``, hyper-parameters."""

    theta: jax.Array
    theta_sum: jax.Array
    rounds_done: jax.Array
    hyperparams: Hyperparams


class RoundInfo(NamedTuple):
    """``theta: f32[d]`` after the round and the fraction of clipped gradients."""

    theta: jax.Array
    clipped_fraction: jax.Array


def client_message(broadcast, record, key):
    """``(noisy clipped gradient: f32[d], clipped: f32[])`` of one client at ``broadcast.theta``."""
    theta, hp = broadcast
    x, y = record
    gradient, clipped = clip_to_ball((x @ theta - y) * x, hp.clip_norm)
    return gradient + hp.noise_std * jax.random.normal(key, gradient.shape), clipped


@dataclass(frozen=True)
class FedAvg:
    """DP-SGD FedAvg, one local gradient step per client per round (full participation)."""

    dim: int

    def __post_init__(self) -> None:
        check_int_range("dim", self.dim, 1, 10**6)

    def init(self, hp: Hyperparams, key: jax.Array) -> State:
        del key
        zeros = jnp.zeros(self.dim, jnp.float32)
        return State(zeros, zeros, jnp.int32(0), hp)

    def round(self, state: State, key: jax.Array, clients) -> tuple[State, RoundInfo]:
        del key
        hp = state.hyperparams

        def statistic(messages, weights):
            gradients, clipped = messages
            return jnp.sum(gradients, 0), jnp.sum(clipped), jnp.sum(weights)

        gradient_sum, clipped, count = clients(client_message, (state.theta, hp), statistic)
        theta = project_to_ball(state.theta - hp.learning_rate * gradient_sum / count, hp.radius)
        new_state = State(theta, state.theta_sum + theta, state.rounds_done + 1, hp)
        return new_state, RoundInfo(theta, clipped / count)
