"""DP-SGD FedAvg with one sample per client: the baseline of the modulated-learning paper.

Every round every client computes its own least-squares gradient ``g_i = (x_i^T theta - y_i) x_i``,
clips it to norm ``G``, adds ``N(0, sigma^2 I)`` and sends it; the server averages and steps.
Replacing one client's record moves its message by at most ``2G``, so a round is the Gaussian
mechanism with sensitivity ``2G``; T full-participation rounds compose in zCDP (no subsampling
amplification). The guarantee covers the whole record ``(x_i, y_i)``. The Gaussian noise is a
:class:`~jfed.privacy.NoiseRandomizer` (``FedAvg.randomizer``, ``plan(randomizer=...)``): another
local randomizer plugs in, and the calibration and accounting follow its event.

References: docs/specs/modulated.md (Baseline).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jfed import privacy
from jfed._validation import check_int_range, check_nonnegative, check_positive
from jfed.algorithms.linear import project_to_ball
from jfed.privacy.accounting import AccountantSpec, Zcdp, via
from jfed.privacy.clipping import clip_to_ball
from jfed.privacy.plan import PrivacyPlan, rounds_plan
from jfed.privacy.privatizers import GaussianNoise, NoiseRandomizer

GAUSSIAN = GaussianNoise()
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
    epsilon: float,
    delta: float,
    rounds: int,
    clip_norm: float,
    accountant: AccountantSpec = Zcdp(),  # noqa: B008 (frozen, immutable)
) -> tuple[float, privacy.PrivacyGuarantee]:
    """Noise per round so that ``rounds`` full-participation rounds are (eps, delta)-LDP:
    ``(noise_std, guarantee)`` of :func:`plan`."""
    privacy_plan = plan(epsilon, delta, rounds, clip_norm=clip_norm, accountant=accountant)
    return privacy_plan.noise_std, privacy_plan.guarantee


def plan(
    epsilon: float,
    delta: float,
    rounds: int,
    *,
    clip_norm: float = 2.0,
    accountant: AccountantSpec = Zcdp(),  # noqa: B008 (frozen, immutable)
    randomizer: NoiseRandomizer = GAUSSIAN,
    dim: int | None = None,
) -> PrivacyPlan:
    """Calibrate T rounds of clipped gradients (clip G) to be (eps, delta)-LDP and bundle the
    clip, the noise, the event the clients emit (T releases of ``randomizer``, default Gaussian,
    of L2 sensitivity 2G, in the randomizer's own norm for ``dim`` features) and the guarantee
    ``accountant`` certifies for it (:class:`~jfed.privacy.PrivacyPlan`; its ``hyperparams``
    takes ``learning_rate`` and ``radius``). ``accountant`` defaults to zCDP, as the
    modulated-learning paper accounts its DP-SGD baseline."""
    return rounds_plan(
        randomizer.sensitivity(sensitivity(clip_norm), dim), epsilon, delta, rounds,
        accountant=accountant, randomizer=randomizer,
        notion=f"local (eps, delta)-DP{via(accountant)}", protected=PROTECTED,
        trust_model=TRUST_MODEL, parameters={"clip_norm": float(clip_norm)}, build=hyperparams,
    )  # fmt: skip


class State(NamedTuple):
    """``theta: f32[d]``, ``theta_sum: f32[d]``, ``rounds_done: i32[]``."""

    theta: jax.Array
    theta_sum: jax.Array
    rounds_done: jax.Array


class RoundInfo(NamedTuple):
    """``theta: f32[d]`` after the round and the fraction of clipped gradients."""

    theta: jax.Array
    clipped_fraction: jax.Array


def client_message(broadcast, record, key, randomizer: NoiseRandomizer = GAUSSIAN):
    """``(noisy clipped gradient: f32[d], clipped: f32[])`` of one client at ``broadcast.theta``:
    the clipped gradient perturbed by ``randomizer`` at scale ``noise_std``."""
    theta, hp = broadcast
    x, y = record
    gradient, clipped = clip_to_ball((x @ theta - y) * x, hp.clip_norm)
    return randomizer.perturb(key, gradient, hp.noise_std), clipped


@dataclass(frozen=True)
class FedAvg:
    """DP-SGD FedAvg, one local gradient step per client per round (full participation).

    Attributes:
      dim: d.
      randomizer: the local randomizer of every message (default Gaussian noise); the run's
        plan must be calibrated with the same one (:func:`plan`'s ``randomizer``).
    """

    dim: int
    randomizer: NoiseRandomizer = GAUSSIAN

    def __post_init__(self) -> None:
        check_int_range("dim", self.dim, 1, 10**6)

    def init(self, hp: Hyperparams, key: jax.Array) -> State:
        del hp, key
        zeros = jnp.zeros(self.dim, jnp.float32)
        return State(zeros, zeros, jnp.int32(0))

    def round(
        self, state: State, hp: Hyperparams, key: jax.Array, clients
    ) -> tuple[State, RoundInfo]:
        del key

        def statistic(messages, weights):
            gradients, clipped = messages
            return jnp.sum(gradients, 0), jnp.sum(clipped), jnp.sum(weights)

        message = partial(client_message, randomizer=self.randomizer)
        gradient_sum, clipped, count = clients.sum(message, (state.theta, hp), statistic)
        theta = project_to_ball(state.theta - hp.learning_rate * gradient_sum / count, hp.radius)
        new_state = State(theta, state.theta_sum + theta, state.rounds_done + 1)
        return new_state, RoundInfo(theta, clipped / count)
