"""Modulated learning: private single-sample regression (docs/specs/modulated.md).

Each client holds one record ``(x_i, y_i)`` and, per round, sends

    z_i = alpha x_i + (beta / sqrt(k)) sum_j cos(omega <v_j, x_i> + phi_ij) v_j + sigma xi_i

with fresh uniform phases ``phi_ij`` and ``xi_i ~ N(0, I_d)``. The server only needs the sums
``sum z z^T`` and ``sum z y`` and removes the bias of the map:

    S_hat = (Sigma_tilde - beta^2/(2k) P - sigma^2 I) / alpha^2,   b_hat = sum z y / (n alpha)

(``Sigma_tilde = sum z z^T / n``, ``P = V V^T``) so that ``E[S_hat] = S`` and ``E[b_hat] = b``.
Privacy protects the feature vector ``x_i`` (the response ``y_i`` is public, as in the paper): the
noise-free map is ``L = alpha + beta omega / sqrt(k)``-Lipschitz, so one round is the Gaussian
mechanism with L2 sensitivity ``L D`` (``D = 2 C`` for features clipped to radius ``C``).
The map is a local randomizer, :class:`ModulatedMap` (:mod:`jfed.privacy.aggregators`): every
round releases it through ``clients.aggregate``, and the run's guarantee is the composition of
the events it states.

Two estimators share the client map:

- :class:`Iterative` (T rounds): fresh random directions each round, projected gradient steps
  ``theta <- Proj_B(theta - eta_t (S_hat theta - b_hat))`` with ``eta_t = c / max(lambda_max(
  S_hat^+), floor)``; returns the last iterate and the iterate average.
- :class:`OneShot` (one round): ``theta = (S_hat + lambda I)^{-1} b_hat``, and the same with
  ``S_hat`` replaced by its PSD part.

References:
  docs/specs/modulated.md; seed 001 ("Modulated learning for private and distributed regression with
  just a single sample per client device").
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jfed._random import PRIVATE_NORMAL_REACH, normal_reach_mass, private_normals_and_uniforms
from jfed._validation import (
    check_int_range,
    check_nonnegative,
    check_orthonormal,
    check_positive,
)
from jfed.algorithms.linear import (
    SecondMoments,
    project_to_ball,
    psd_part,
    second_moments,
)
from jfed.privacy.accounting import AccountantSpec, Zcdp, via
from jfed.privacy.client_stream import KeyedUpdate
from jfed.privacy.clipping import clip_to_ball
from jfed.privacy.guarantee import Adjacency, PrivacyGuarantee
from jfed.privacy.local_discrete import GridGaussianParams, LocalGridGaussian
from jfed.privacy.plan import rounds_plan

PROTECTED = "one client's feature vector x_i (responses y_i treated as public)"
TRUST_MODEL = "local DP: untrusted server; each client randomizes its own message"


class Hyperparams(NamedTuple):
    """Traced parameters of a modulated run (f32 scalars unless said).

    Attributes:
      alpha: signal amplitude (> 0).
      beta: modulation amplitude (>= 0).
      omega: modulation frequency (>= 0).
      noise_std: Gaussian noise ``sigma`` per coordinate (>= 0; 0 only for non-private checks).
      clip_norm: feature clipping radius ``C`` (> 0).
      radius: projection radius ``B`` of the iterate (iterative estimator).
      step_scale: ``c`` in the adaptive step ``c / max(lambda_max(S_hat^+), floor)``.
      step_floor: the floor of that rule (> 0).
      ridge: ``lambda`` of the one-shot ridge solve (>= 0).
      directions: optional fixed orthonormal ``V: f32[d, k]``; ``None`` draws fresh random
        directions every round from the server key.
      adjacency_diameter: optional ``D: f32[]``, how far apart two neighbouring feature
        vectors may be (at most ``2 C``); ``None``: ``2 C``. Read only by the map's event.
      noise_multiplier: ``z: f32[]`` of the exact map on the integer grid (an estimator with a
        ``grid_norm``, :class:`ModulatedGridMap`): its discrete Gaussian noise is at least z
        times a message's integer sensitivity; ``noise_std`` is then 0 (the server reads the
        noise's variance from the grid, :meth:`ModulatedGridMap.noise_std`). ``None`` for the
        float map.
    """

    alpha: jax.Array
    beta: jax.Array
    omega: jax.Array
    noise_std: jax.Array
    clip_norm: jax.Array
    radius: jax.Array
    step_scale: jax.Array
    step_floor: jax.Array
    ridge: jax.Array
    directions: jax.Array | None = None
    adjacency_diameter: jax.Array | None = None
    noise_multiplier: jax.Array | None = None


def hyperparams(
    *,
    alpha: float = 1.0,
    beta: float = 0.5,
    omega: float = 1.0,
    noise_std: float = 0.0,
    clip_norm: float = 3.0,
    radius: float = 10.0,
    step_scale: float = 0.8,
    step_floor: float = 1e-3,
    ridge: float = 1.0,
    directions: np.ndarray | None = None,
    adjacency_diameter: float | None = None,
    noise_multiplier: float | None = None,
) -> Hyperparams:
    """Validated :class:`Hyperparams` (host floats in, f32 device scalars out).

    Defaults: alpha 1, beta 0.5, omega 1 (so L = 1.5 for k = 1), radius 10, step scale 0.8 and
    ridge 1.0 (the paper's tuned values on Fair); ``noise_std`` normally comes from
    :func:`calibrated_noise_std` (or the method's calibration), ``adjacency_diameter`` (at most
    ``2 clip_norm``) only where neighbouring features are closer than any two in the ball;
    ``noise_multiplier`` (> 0) only for an estimator on the integer grid, with ``noise_std``
    left at 0.
    """
    values = dict(
        alpha=check_positive("alpha", alpha),
        beta=check_nonnegative("beta", beta),
        omega=check_nonnegative("omega", omega),
        noise_std=check_nonnegative("noise_std", noise_std),
        clip_norm=check_positive("clip_norm", clip_norm),
        radius=check_positive("radius", radius),
        step_scale=check_positive("step_scale", step_scale),
        step_floor=check_positive("step_floor", step_floor),
        ridge=check_nonnegative("ridge", ridge),
    )
    fixed = None
    if directions is not None:
        fixed = jnp.asarray(check_orthonormal("directions", directions), jnp.float32)
    diameter = None
    if adjacency_diameter is not None:
        diameter = jnp.float32(adjacency_diameter_of(clip_norm, adjacency_diameter))
    multiplier = None
    if noise_multiplier is not None:
        multiplier = jnp.float32(check_positive("noise_multiplier", noise_multiplier))
        if values["noise_std"] != 0.0:
            raise ValueError(
                f"expected noise_std=0 with noise_multiplier (the grid map's noise is z's), got "
                f"noise_std={noise_std}"
            )
    return Hyperparams(**{k: jnp.float32(v) for k, v in values.items()}, directions=fixed,
                       adjacency_diameter=diameter, noise_multiplier=multiplier)  # fmt: skip


# ----------------------------------------------------------------------------- privacy (host)


def lipschitz_constant(alpha: float, beta: float, omega: float, directions: int) -> float:
    """Lipschitz constant ``L = alpha + beta omega / sqrt(k)`` of the noise-free client map."""
    alpha = check_positive("alpha", alpha)
    beta = check_nonnegative("beta", beta)
    omega = check_nonnegative("omega", omega)
    directions = check_int_range("directions", directions, 1, 10**9)
    return alpha + beta * omega / math.sqrt(directions)


def sensitivity(
    alpha: float,
    beta: float,
    omega: float,
    directions: int,
    clip_norm: float,
    adjacency_diameter: float | None = None,
) -> float:
    """L2 sensitivity ``L * D`` of one message, with ``D = 2 C`` unless given explicitly."""
    lipschitz = lipschitz_constant(alpha, beta, omega, directions)
    return lipschitz * adjacency_diameter_of(clip_norm, adjacency_diameter)


def message_radius(alpha: Any, beta: Any, clip_norm: Any) -> Any:
    """``R = alpha C + beta``: no noise-free message is longer (``||alpha x|| <= alpha C``, and
    ``||V c|| = ||c|| <= sqrt(k)`` for orthonormal V and cosines ``c``, times ``beta /
    sqrt(k)``). Host floats or device ``f32[]``: the grid map's bound on a message."""
    return alpha * clip_norm + beta


def adjacency_diameter_of(clip_norm: float, adjacency_diameter: float | None = None) -> float:
    """D: how far apart two neighbouring (clipped) feature vectors may be, ``2 C`` unless a
    smaller one is given; ``ValueError`` for one above ``2 C``."""
    clip_norm = check_positive("clip_norm", clip_norm)
    if adjacency_diameter is None:
        return 2.0 * clip_norm
    diameter = check_positive("adjacency_diameter", adjacency_diameter)
    if diameter > 2.0 * clip_norm:
        raise ValueError(
            f"expected adjacency_diameter <= 2 * clip_norm = {2 * clip_norm}, "
            f"got adjacency_diameter={diameter}"
        )
    return diameter


def calibrated_noise_std(
    epsilon: float,
    delta: float,
    rounds: int,
    message_sensitivity: float,
    accountant: AccountantSpec = Zcdp(),  # noqa: B008 (frozen, immutable)
) -> float:
    """Noise ``sigma`` per round so that ``rounds`` full-participation releases of a message of
    L2 sensitivity ``message_sensitivity`` are (eps, delta)-LDP under ``accountant`` (a
    calibration: what a run certifies is its releases' events, :class:`ModulatedMap`).

    Args:
      epsilon: target eps (> 0).
      delta: target delta in (0, 1).
      rounds: number of releases per client (T for the iterative estimator, 1 for one-shot).
      message_sensitivity: L2 sensitivity of one message (:func:`sensitivity`).
      accountant: :class:`~jfed.privacy.Zcdp` (default, the paper's: rho adds over rounds,
        converted once), :class:`~jfed.privacy.Classic` (Dwork-Roth per round at (eps/T,
        delta/T); eps/T < 1 needed), :class:`~jfed.privacy.Pld` (numerically tight T-fold
        composition) or :class:`~jfed.privacy.Analytic` (exact).
    """
    rounds = check_int_range("rounds", rounds, 1, 10**9)
    return rounds_plan(message_sensitivity, epsilon, delta, rounds, accountant=accountant).noise_std


def reach_statement(
    guarantee: PrivacyGuarantee, noise_multiplier: float, rounds: int, accountant: AccountantSpec
) -> PrivacyGuarantee:
    """``guarantee`` (of ``rounds`` releases of the map at ``noise_multiplier = sigma / (L D)``)
    as it must be stated for the float32 sampler: unchanged where a message lands out of a
    neighbouring input's reach with probability at most :data:`REACH_SHARE_OF_DELTA` of delta
    (:func:`out_of_reach_probability`); beyond (the paper's grid reaches eps 100), its notion
    says it is the ideal real-valued Gaussian's and names the largest eps the sampler's reach
    certifies (:func:`check_noise_reach` refuses such an eps for code that wants only what the
    sampler itself proves)."""
    shift = 1.0 / noise_multiplier
    out_of_reach = out_of_reach_probability(shift, rounds)
    if out_of_reach <= REACH_SHARE_OF_DELTA * guarantee.delta:
        return guarantee
    notion = (
        f"{guarantee.notion} of the ideal real-valued Gaussian, not certified for the float32 "
        f"sampler (its noise reaches {PRIVATE_NORMAL_REACH:g} sd, the sensitivity is "
        f"{shift:.3g} sd: up to {out_of_reach:.2g} more delta; certified up to eps "
        f"{largest_reachable_epsilon(guarantee.delta, rounds, accountant):.4g})"
    )
    return dataclasses.replace(guarantee, notion=notion)


# the share of delta that the bounded reach of float32 normals may take
REACH_SHARE_OF_DELTA = 1e-3


def out_of_reach_probability(shift: float, rounds: int) -> float:
    """Upper bound on the probability that one of a client's ``rounds`` messages lands where the
    noise around a neighbouring input never reaches, for a sensitivity of ``shift`` noise
    standard deviations (worst case: the whole shift along one coordinate;
    :func:`jfed._random.normal_reach_mass`). It adds to delta, whatever eps."""
    return min(1.0, rounds * normal_reach_mass(shift))


def check_noise_reach(
    shift: float, epsilon: float, delta: float, rounds: int, accountant: AccountantSpec
) -> None:
    """Refuse (``ValueError``) an (eps, delta) whose noise is so small relative to the
    sensitivity (``shift`` standard deviations per message) that the float32 normals' bounded
    reach (:data:`jfed._random.PRIVATE_NORMAL_REACH`) would add more than
    :data:`REACH_SHARE_OF_DELTA` of delta; the message names the largest eps honoured."""
    out_of_reach = out_of_reach_probability(shift, rounds)
    if out_of_reach <= REACH_SHARE_OF_DELTA * delta:
        return
    raise ValueError(
        f"expected epsilon <= {largest_reachable_epsilon(delta, rounds, accountant):.4g} "
        f"(delta={delta:g}, {rounds} round(s), {via(accountant).strip(' ()') or 'accountant'}), "
        f"got epsilon={epsilon:g}: float32 Gaussian noise reaches {PRIVATE_NORMAL_REACH:g} "
        f"standard deviations and one message's sensitivity is {shift:.3g} of them, so a message "
        f"lands out of a neighbouring input's reach with probability up to {out_of_reach:.2g}, "
        f"more than {REACH_SHARE_OF_DELTA:g} of delta"
    )


def largest_reachable_epsilon(delta: float, rounds: int, accountant: AccountantSpec) -> float:
    """The largest eps (rounded down to 4 digits) that :func:`check_noise_reach` accepts for
    ``rounds`` Gaussian messages at ``delta`` under ``accountant``; 0 if none."""
    from statistics import NormalDist

    from jfed.privacy.accounting import gaussian_rounds_event, spent

    tail = REACH_SHARE_OF_DELTA * delta / rounds
    largest_shift = PRIVATE_NORMAL_REACH - NormalDist().inv_cdf(1.0 - tail)
    if largest_shift <= 0:
        return 0.0
    event = gaussian_rounds_event(1.0 / largest_shift, rounds)
    epsilon = spent(event, delta, accountant=accountant, adjacency="bounded")
    digits = 10 ** (3 - math.floor(math.log10(epsilon)))
    return math.floor(epsilon * digits * (1 - 1e-9)) / digits


# ----------------------------------------------------------------------------- client (one)


def noise_scaled_ridge(
    noise_std: float, alpha: float, n_clients: int, dim: int, scale: float = 1.0
) -> float:
    """The one-shot ridge ``lambda = scale * (sigma / alpha)^2 * 2 sqrt(d / n)``: the spectral
    size of the privacy noise in ``S_hat``.

    Each message carries ``sigma xi_i`` with ``xi_i ~ N(0, I_d)``; after debiasing, S_hat keeps
    ``(sigma / alpha)^2 (1/n) sum (xi xi^T - I)``, whose eigenvalues spread over
    ``+-2 sqrt(d / n)`` times ``(sigma / alpha)^2`` (Bai-Yin). A fixed ridge is too small when
    that spread is large (small eps, or a fixed lambda as n grows: S_hat + lambda I turns
    near-singular and R^2 goes far below 0) and too large when it is small (large eps: the
    estimate is shrunk to a plateau). Measured (``sims/one_shot_ridge.py``, 3 seeds): scale 1
    came within 0.035 of OLS at eps 100 on co2, Fair, ModeChoice and procedural clients (n = 10^5,
    10^6), and stayed above R^2 -0.06 at every eps in 0.5 .. 100 there except on 10^5 procedural
    clients at eps 0.5 (-0.43); single seeds still fail at eps 1 to 5 on the RandHIE targets
    (``sims/modulated_study.py``). README, "The one-shot ridge".
    """
    level = (check_positive("noise_std", noise_std) / check_positive("alpha", alpha)) ** 2
    n_clients = check_int_range("n_clients", n_clients, 1, 2**62)
    dim = check_int_range("dim", dim, 1, 10**6)
    return check_positive("scale", scale) * level * 2.0 * math.sqrt(dim / n_clients)


class Broadcast(NamedTuple):
    """What the server sends each round: the public map parameters and directions."""

    directions: jax.Array  # V: f32[d, k]
    alpha: jax.Array
    beta: jax.Array
    omega: jax.Array
    noise_std: jax.Array
    clip_norm: jax.Array


def modulated_signal(broadcast: Broadcast, x: jax.Array, phases: jax.Array) -> jax.Array:
    """The noise-free part ``alpha x + (beta / sqrt(k)) V cos(omega V^T x + phi): f32[d]`` of the
    client map, for ``x: f32[d]`` and ``phases: f32[k]`` in [0, 2 pi)."""
    V = broadcast.directions
    k = V.shape[1]
    # HIGHEST: f32 products on every backend. The map's Lipschitz constant, hence the noise's
    # calibration, is the exact map's; a GPU's default (tf32) moved messages by about 1e-3 of
    # their scale, which broke the bound between close inputs (tests/test_modulated_privacy.py).
    highest = lax.Precision.HIGHEST
    modulation = jnp.cos(broadcast.omega * jnp.matmul(V.T, x, precision=highest) + phases)
    return broadcast.alpha * x + (broadcast.beta / math.sqrt(k)) * jnp.matmul(
        V, modulation, precision=highest
    )


def encode(broadcast: Broadcast, x: jax.Array, phases: jax.Array, noise: jax.Array) -> jax.Array:
    """The client map with its randomness given: ``z: f32[d]`` from ``x: f32[d]``,
    ``phases: f32[k]`` in [0, 2 pi) and standard normal ``noise: f32[d]``."""
    return modulated_signal(broadcast, x, phases) + broadcast.noise_std * noise


def _clipped_draws(broadcast: Broadcast, record, key: jax.Array):
    x, y = record
    x, clipped = clip_to_ball(x, broadcast.clip_norm)
    k = broadcast.directions.shape[1]
    # tails to 9 standard deviations: out-of-reach messages are what check_noise_reach bounds
    noise, unit = private_normals_and_uniforms(key, x.shape[0], k)
    return x, y, clipped, 2.0 * jnp.pi * unit, noise


def client_message(
    broadcast: Broadcast, record: tuple[jax.Array, jax.Array], key: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One client's message ``(z: f32[d], y: f32[], clipped: f32[])``.

    The feature vector is clipped to ``clip_norm`` first; ``clipped`` counts that (a simulation
    diagnostic, not part of the private transcript).
    """
    x, y, clipped, phases, noise = _clipped_draws(broadcast, record, key)
    return encode(broadcast, x, phases, noise), y, clipped


def signal_and_noise_message(
    broadcast: Broadcast, record: tuple[jax.Array, jax.Array], key: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The same draws as :func:`client_message`, kept apart: ``([a; xi]: f32[2d], y, clipped)``
    with ``z = a + sigma xi`` for every noise level ``sigma`` (``broadcast.noise_std`` unused)."""
    x, y, clipped, phases, noise = _clipped_draws(broadcast, record, key)
    return jnp.concatenate([modulated_signal(broadcast, x, phases), noise]), y, clipped


def moments_at_noise(joint: SecondMoments, noise_std: jax.Array) -> SecondMoments:
    """Second moments of ``z = a + sigma xi`` from those of ``[a; xi]`` (``joint.zz: f32[2d, 2d]``):
    ``sum z z^T = A + sigma (B + B^T) + sigma^2 C`` and ``sum z y = sum a y + sigma sum xi y``."""
    dim = joint.zy.shape[0] // 2
    signal, cross, noise = joint.zz[:dim, :dim], joint.zz[:dim, dim:], joint.zz[dim:, dim:]
    zz = signal + noise_std * (cross + cross.T) + noise_std**2 * noise
    zy = joint.zy[:dim] + noise_std * joint.zy[dim:]
    return SecondMoments(zz, zy, joint.count, joint.clipped)


# ----------------------------------------------------------------------------- the randomizer


class MapParams(NamedTuple):
    """Parameters of :class:`ModulatedMap` (``f32[]`` each on the device, floats on the host),
    read from a run's :class:`Hyperparams` unchanged (:func:`map_params`).

    Attributes:
      alpha, beta, omega: the map's amplitudes and frequency.
      clip_norm: C, the radius the features are clipped into.
      noise_std: sigma, the Gaussian noise per coordinate.
      adjacency_diameter: D, how far apart neighbouring features may be (``None``: ``2 C``).
    """

    alpha: Any
    beta: Any
    omega: Any
    clip_norm: Any
    noise_std: Any
    adjacency_diameter: Any = None


def map_params(hp: Hyperparams) -> MapParams:
    """The map's parameters, the very leaves of ``hp`` (so the ledger reads what ran)."""
    return MapParams(hp.alpha, hp.beta, hp.omega, hp.clip_norm, hp.noise_std,
                     hp.adjacency_diameter)  # fmt: skip


def client_record(broadcast: None, record: tuple[jax.Array, jax.Array], key: jax.Array):
    """What ONE client hands its randomizer: its record ``(x: f32[d], y: f32[])`` and its own
    key, from which :class:`ModulatedMap` draws the phases and the noise
    (:class:`~jfed.privacy.client_stream.KeyedUpdate`)."""
    del broadcast
    return KeyedUpdate(record, key)


@dataclass(frozen=True)
class ModulatedMap:
    """The modulated map as a local randomizer (an aggregator, :mod:`jfed.privacy.aggregators`):
    each client clips its features to C, maps them with fresh phases and adds ``N(0, sigma^2
    I_d)``; the server sums the messages' second moments (``clients.aggregate(...,
    statistic=second_moments)``) and adds no noise of its own.

    Its event is one message's: for any phases the noise-free map moves by at most ``L D``
    between two neighbouring features (``L = alpha + beta omega / sqrt(k)``, D the adjacency
    diameter, ``2 C`` by default), so a message is the Gaussian mechanism of multiplier
    ``sigma / (L D)``, under bounded adjacency, and not wrapped by any sampling (``local``).
    The float32 normals reach :data:`jfed._random.PRIVATE_NORMAL_REACH` standard deviations: the
    mass beyond adds to delta (:func:`reach_statement`).

    The phases and the noise are drawn in one call from the key that comes with the client's
    record (:func:`client_record`: the client's own key, used for nothing else), so a message is
    exactly :func:`client_message` of that key (:mod:`jfed.privacy.client_stream` says why not
    the engine's privacy stream).

    State: the round's public directions ``V: f32[d, k]`` (what the server broadcasts); ``k``
    (``directions``) is static.
    """

    directions: int = 1
    Params: ClassVar[type] = MapParams
    local: ClassVar[bool] = True
    adjacency: ClassVar[Adjacency] = Adjacency.BOUNDED

    def init(self, params: MapParams, template: KeyedUpdate) -> jax.Array:
        """Zero directions ``f32[d, k]`` (a round sets its own)."""
        del params
        dim = jnp.shape(template.update[0])[-1]
        return jnp.zeros((dim, self.directions), jnp.float32)

    def broadcast(self, params: MapParams, directions: jax.Array) -> Broadcast:
        return Broadcast(directions, params.alpha, params.beta, params.omega, params.noise_std,
                         params.clip_norm)  # fmt: skip

    def preprocess(
        self, params: MapParams, directions: jax.Array, update: KeyedUpdate, key: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """ONE client's message ``(z: f32[d], y: f32[], clipped: f32[])``."""
        del key  # the map draws from the key of the update
        return client_message(self.broadcast(params, directions), update.update, update.key)

    def release(
        self, params: MapParams, directions: jax.Array, summed: SecondMoments, key: jax.Array
    ) -> tuple[SecondMoments, jax.Array, dict]:
        """The summed second moments as they are (the noise is the clients')."""
        del params, key
        return summed, directions, {"clipped_count": summed.clipped}

    def message_sensitivity(self, params: MapParams) -> float:
        """``L D`` of one message (host)."""
        return sensitivity(params.alpha, params.beta, params.omega, self.directions,
                           params.clip_norm, params.adjacency_diameter)  # fmt: skip

    def event(self, params: MapParams):
        """``GaussianDpEvent(sigma / (L D))`` of one message (host side, bounded adjacency)."""
        import dp_accounting

        noise_std = check_positive("noise_std", params.noise_std)
        return dp_accounting.GaussianDpEvent(noise_std / self.message_sensitivity(params))


@dataclass(frozen=True)
class ModulatedMapLevels(ModulatedMap):
    """:class:`ModulatedMap` at several noise levels from ONE pass over the clients
    (:class:`SharedNoise`): ``params.noise_std: f32[E]``, the other parameters shared. A
    client's draws are the map's; its record keeps the noise-free message ``a`` and the standard
    normals ``xi`` apart (:func:`signal_and_noise_message`), and the release gives every level's
    second moments exactly (:func:`moments_at_noise`): what each level's own
    :class:`ModulatedMap` release sums, up to float32 grouping. Each run's guarantee is the
    map's event at its own level; :meth:`event` states the least private of them."""

    def preprocess(
        self, params: MapParams, directions: jax.Array, update: KeyedUpdate, key: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """ONE client's ``([a; xi]: f32[2d], y: f32[], clipped: f32[])``."""
        del key
        return signal_and_noise_message(self.broadcast(params, directions), update.update,
                                        update.key)  # fmt: skip

    def release(
        self, params: MapParams, directions: jax.Array, summed: SecondMoments, key: jax.Array
    ) -> tuple[SecondMoments, jax.Array, dict]:
        """Every level's second moments (leaves with a leading axis E)."""
        del key
        levels = jax.vmap(lambda noise_std: moments_at_noise(summed, noise_std))(params.noise_std)
        return levels, directions, {"clipped_count": summed.clipped}

    def event(self, params: MapParams):
        """The map's event at the least noise of the levels."""
        least = float(np.min(np.asarray(params.noise_std, np.float64)))
        return super().event(params._replace(noise_std=least))


class GridMapParams(NamedTuple):
    """Parameters of :class:`ModulatedGridMap` (``f32[]`` each on the device, floats on the
    host), read from a run's :class:`Hyperparams` unchanged (:func:`grid_map_params`).

    Attributes:
      alpha, beta, omega: the map's amplitudes and frequency.
      clip_norm: C, the radius the features are clipped into.
      noise_multiplier: z, the discrete Gaussian's standard deviation over a message's integer
        sensitivity.
    """

    alpha: Any
    beta: Any
    omega: Any
    clip_norm: Any
    noise_multiplier: Any


def grid_map_params(hp: Hyperparams) -> GridMapParams:
    """The grid map's parameters, the very leaves of ``hp`` (so the ledger reads what ran)."""
    return GridMapParams(hp.alpha, hp.beta, hp.omega, hp.clip_norm, hp.noise_multiplier)


def grid_client_message(
    broadcast: Broadcast, record: tuple[jax.Array, jax.Array], key: jax.Array,
    randomizer: LocalGridGaussian, noise_multiplier: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:  # fmt: skip
    """One client's exact message ``(m: f32[d], y: f32[], clipped: f32[])``: the noise-free
    map of its clipped features (phases from its own key) released by ``randomizer`` on the
    integer grid (:class:`~jfed.privacy.local_discrete.LocalGridGaussian`, radius
    :func:`message_radius`). ``broadcast.noise_std`` is not read."""
    x, y = record
    x, clipped = clip_to_ball(x, broadcast.clip_norm)
    phase_key, grid_key = jax.random.split(key)
    phases = 2.0 * jnp.pi * jax.random.uniform(phase_key, (broadcast.directions.shape[1],))
    signal = modulated_signal(broadcast, x, phases)
    radius = message_radius(broadcast.alpha, broadcast.beta, broadcast.clip_norm)
    message = randomizer.release(grid_key, signal, GridGaussianParams(radius, noise_multiplier))
    return message, y, clipped


@dataclass(frozen=True)
class ModulatedGridMap:
    """The modulated map as an exact local randomizer on an integer grid (``--noise discrete``):
    each client clips its features to C, maps them with fresh phases, and releases the
    noise-free message through :class:`~jfed.privacy.local_discrete.LocalGridGaussian`: put on
    the grid (``R = alpha C + beta`` becomes ``grid_norm`` units), rounded with a triangular
    dither under an exact integer norm bound, exact discrete Gaussian noise, scaled back. The
    server sums the messages' second moments, as for :class:`ModulatedMap`.

    Its event is one message's discrete Gaussian (bounded adjacency, local): any two messages
    of a client are at most ``2 sqrt(B)`` grid units apart, because each lies in the ball of
    radius ``sqrt(B)``, checked in integers. This bounds a message by its norm, not by the
    map's Lipschitz constant (a float32 map is not exactly Lipschitz, and a client cannot check
    a distance to a neighbour's message): the sensitivity is about ``2 (alpha C + beta)``
    instead of ``L D``, smaller where ``omega C > sqrt(k)`` (the defaults: 7 against 9), and it
    does not shrink with a smaller adjacency diameter. Each coordinate of a message has
    variance ``(R / L)^2 (sigma^2 + 1/4)`` around the noise-free one (:meth:`noise_std`), which
    the server removes as it removes ``sigma^2`` of the float map: ``S_hat`` and ``b_hat`` stay
    unbiased.

    Attributes:
      randomizer: the grid release of every message: its dimension d and grid norm L, the
        message radius in grid units (:func:`~jfed.privacy.local_discrete.grid_norm_for`).
      directions: k (static).
    """

    randomizer: LocalGridGaussian
    directions: int = 1
    Params: ClassVar[type] = GridMapParams
    local: ClassVar[bool] = True
    adjacency: ClassVar[Adjacency] = Adjacency.BOUNDED

    def grid_params(self, params: GridMapParams) -> GridGaussianParams:
        """``(R, z)`` of the grid release (host floats or device ``f32[]``)."""
        radius = message_radius(params.alpha, params.beta, params.clip_norm)
        return GridGaussianParams(radius, params.noise_multiplier)

    def init(self, params: GridMapParams, template: KeyedUpdate) -> jax.Array:
        """Zero directions ``f32[d, k]`` (a round sets its own)."""
        del params, template
        return jnp.zeros((self.randomizer.dimension, self.directions), jnp.float32)

    def broadcast(self, params: GridMapParams, directions: jax.Array) -> Broadcast:
        """What the clients receive, with ``noise_std`` the release's (:meth:`noise_std`)."""
        return Broadcast(directions, params.alpha, params.beta, params.omega,
                         self.noise_std(params), params.clip_norm)  # fmt: skip

    def noise_std(self, params: GridMapParams) -> jax.Array:
        """``f32[]``: the square root of what a release adds to each coordinate's second
        moment, ``(R / L)^2 (sigma^2 + 1/4)`` (the noise and the dithered rounding), computed
        from the pair the clients draw with: the server's ``sigma`` of :func:`debias`."""
        return jnp.sqrt(self.randomizer.noise_variance(self.grid_params(params)))

    def preprocess(
        self, params: GridMapParams, directions: jax.Array, update: KeyedUpdate, key: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """ONE client's message ``(m: f32[d], y: f32[], clipped: f32[])``."""
        del key  # the map draws from the key of the update
        broadcast = Broadcast(directions, params.alpha, params.beta, params.omega,
                              jnp.float32(0.0), params.clip_norm)  # fmt: skip
        return grid_client_message(broadcast, update.update, update.key, self.randomizer,
                                   params.noise_multiplier)  # fmt: skip

    release = ModulatedMap.release

    def message_sensitivity(self, params: GridMapParams) -> float:
        """Host: ``2 sqrt(B) R / L``, the sensitivity in value units."""
        return self.randomizer.value_sensitivity(self.grid_params(params).radius)

    def event(self, params: GridMapParams):
        """``DiscreteGaussianDpEvent(z, 2 sqrt(B), ...)`` of one message (host)."""
        return self.randomizer.event(self.grid_params(params))


# ----------------------------------------------------------------------------- server


def random_directions(key: jax.Array, dim: int, k: int) -> jax.Array:
    """Haar-random orthonormal ``V: f32[d, k]`` (QR of a Gaussian matrix, signs fixed)."""
    q, r = jnp.linalg.qr(jax.random.normal(key, (dim, k)))
    return q * jnp.sign(jnp.diagonal(r))


def debias(stats: SecondMoments, broadcast: Broadcast) -> tuple[jax.Array, jax.Array]:
    """Unbiased ``(S_hat: f32[d, d], b_hat: f32[d])`` from the summed messages of one round."""
    V = broadcast.directions
    dim, k = V.shape
    n = stats.count
    sigma_tilde = stats.zz / n
    S_hat = (
        sigma_tilde
        - (broadcast.beta**2 / (2.0 * k)) * (V @ V.T)
        - broadcast.noise_std**2 * jnp.eye(dim, dtype=V.dtype)
    ) / broadcast.alpha**2
    b_hat = stats.zy / (n * broadcast.alpha)
    return S_hat, b_hat


def gradient_estimate(S_hat: jax.Array, b_hat: jax.Array, theta: jax.Array) -> jax.Array:
    """``g_hat(theta) = S_hat theta - b_hat``, unbiased for the least-squares gradient."""
    return S_hat @ theta - b_hat


class State(NamedTuple):
    """Server state of the iterative estimator.

    Attributes:
      theta: ``f32[d]``, the current (last) iterate.
      theta_sum: ``f32[d]``, sum of the iterates after each round (for the average).
      rounds_done: ``i32[]``.
    """

    theta: jax.Array
    theta_sum: jax.Array
    rounds_done: jax.Array

    @property
    def theta_average(self) -> jax.Array:
        return self.theta_sum / jnp.maximum(self.rounds_done, 1)


class RoundInfo(NamedTuple):
    """Per-round diagnostics (each gains a leading ``rounds`` axis in a run).

    Attributes:
      theta: ``f32[d]``, the estimate after this round.
      step_size: ``f32[]``, eta_t (iterative) or 0 (one-shot).
      lambda_max: ``f32[]``, largest eigenvalue of the PSD part of S_hat.
      clipped_fraction: ``f32[]``, fraction of clients whose features were clipped.
    """

    theta: jax.Array
    step_size: jax.Array
    lambda_max: jax.Array
    clipped_fraction: jax.Array


def _broadcast(hp: Hyperparams, key: jax.Array, dim: int, k: int) -> Broadcast:
    V = hp.directions if hp.directions is not None else random_directions(key, dim, k)
    return Broadcast(V, hp.alpha, hp.beta, hp.omega, hp.noise_std, hp.clip_norm)


def _release(k: int, hp: Hyperparams, broadcast: Broadcast, key: jax.Array, clients):
    """The float map's release of a round (:meth:`_Config.release`)."""
    stats, _, _ = clients.aggregate(ModulatedMap(k), map_params(hp), broadcast.directions,
                                    client_record, None, key, second_moments)  # fmt: skip
    return stats


@dataclass(frozen=True)
class _Config:
    """Static configuration shared by the estimators: dimension d, number k of directions, and
    the noise's arithmetic: ``grid_norm`` ``None`` for the float map (:class:`ModulatedMap`,
    Gaussian noise of ``hp.noise_std``), an integer L for the exact map on the integer grid
    (:class:`ModulatedGridMap`, discrete Gaussian noise of multiplier ``hp.noise_multiplier``).
    """

    dim: int
    directions: int = 1
    grid_norm: int | None = None

    def __post_init__(self) -> None:
        check_int_range("dim", self.dim, 1, 10**6)
        check_int_range("directions", self.directions, 1, self.dim)
        if self.grid_norm is not None:
            check_int_range("grid_norm", self.grid_norm, 1, 2**24)

    @property
    def local_randomizer(self) -> ModulatedMap | ModulatedGridMap:
        """The map every client releases (an aggregator)."""
        if self.grid_norm is None:
            return ModulatedMap(self.directions)
        return ModulatedGridMap(LocalGridGaussian(self.dim, self.grid_norm), self.directions)

    def release(
        self, hp: Hyperparams, broadcast: Broadcast, key: jax.Array, clients
    ) -> tuple[SecondMoments, Broadcast]:
        """The round's one private release: every client's map, summed as second moments, and
        the broadcast the server debiases with (the grid map's: its noise's variance). The
        server's ``key`` drew the directions; the release adds no noise and reads none of it."""
        randomizer = self.local_randomizer
        if not isinstance(randomizer, ModulatedGridMap):
            return _release(self.directions, hp, broadcast, key, clients), broadcast
        if hp.noise_multiplier is None:
            raise ValueError(
                "an estimator on the integer grid (grid_norm set) reads "
                "hp.noise_multiplier: build hp with hyperparams(noise_multiplier=z)"
            )
        params = grid_map_params(hp)
        stats, _, _ = clients.aggregate(randomizer, params, broadcast.directions, client_record,
                                        None, key, second_moments)  # fmt: skip
        return stats, randomizer.broadcast(params, broadcast.directions)


@dataclass(frozen=True)
class Iterative(_Config):
    """The iterative modulated estimator (T rounds of projected debiased gradient descent).

    Attributes:
      dim: feature dimension d.
      directions: number k of modulation directions, 1 <= k <= d.

    Example:
      >>> algorithm = Iterative(dim=8, directions=1)
      >>> hp = hyperparams(noise_std=sigma)    # sigma from calibrated_noise_std(...)
      >>> state, infos = jfed.engine.simulate(algorithm, task.train, hp, key, rounds=10)
    """

    def init(self, hp: Hyperparams, key: jax.Array) -> State:
        del hp, key
        zeros = jnp.zeros(self.dim, jnp.float32)
        return State(zeros, zeros, jnp.int32(0))

    def round(
        self, state: State, hp: Hyperparams, key: jax.Array, clients
    ) -> tuple[State, RoundInfo]:
        broadcast = _broadcast(hp, key, self.dim, self.directions)
        stats, broadcast = self.release(hp, broadcast, key, clients)
        return self.server_step(state, hp, broadcast, stats)

    def server_step(
        self, state: State, hp: Hyperparams, broadcast: Broadcast, stats: SecondMoments
    ) -> tuple[State, RoundInfo]:
        """The server's update from the summed messages of one round."""
        S_hat, b_hat = debias(stats, broadcast)
        lambda_max = jnp.maximum(jnp.linalg.eigvalsh(S_hat)[-1], 0.0)
        step_size = hp.step_scale / jnp.maximum(lambda_max, hp.step_floor)
        theta = project_to_ball(
            state.theta - step_size * gradient_estimate(S_hat, b_hat, state.theta), hp.radius
        )
        new_state = State(theta, state.theta_sum + theta, state.rounds_done + 1)
        info = RoundInfo(theta, step_size, lambda_max, stats.clipped / stats.count)
        return new_state, info


class OneShotState(NamedTuple):
    """Result of the one-shot estimator.

    Attributes:
      theta: ``f32[d]``, ``(S_hat + lambda I)^{-1} b_hat``.
      theta_psd: ``f32[d]``, the same with ``S_hat`` replaced by its PSD part.
    """

    theta: jax.Array
    theta_psd: jax.Array


@dataclass(frozen=True)
class OneShot(_Config):
    """The one-shot modulated ridge estimator (a single private release; run it for 1 round).

    Attributes:
      dim: feature dimension d.
      directions: number k of modulation directions, 1 <= k <= d.
    """

    def init(self, hp: Hyperparams, key: jax.Array) -> OneShotState:
        del hp, key
        zeros = jnp.zeros(self.dim, jnp.float32)
        return OneShotState(zeros, zeros)

    def round(self, state: OneShotState, hp: Hyperparams, key: jax.Array, clients):
        broadcast = _broadcast(hp, key, self.dim, self.directions)
        stats, broadcast = self.release(hp, broadcast, key, clients)
        return self.server_step(state, hp, broadcast, stats)

    def server_step(
        self, state: OneShotState, hp: Hyperparams, broadcast: Broadcast, stats: SecondMoments
    ) -> tuple[OneShotState, RoundInfo]:
        """The ridge solves from the summed messages of the single round."""
        S_hat, b_hat = debias(stats, broadcast)
        ridge = hp.ridge * jnp.eye(self.dim, dtype=S_hat.dtype)
        theta = jnp.linalg.solve(S_hat + ridge, b_hat)
        S_psd = psd_part(S_hat)
        theta_psd = jnp.linalg.solve(S_psd + ridge, b_hat)
        lambda_max = jnp.linalg.eigvalsh(S_psd)[-1]
        info = RoundInfo(theta, jnp.float32(0.0), lambda_max, stats.clipped / stats.count)
        return OneShotState(theta, theta_psd), info


@dataclass(frozen=True)
class SharedNoise:
    """Runs of one modulated estimator that differ only in their noise level, sharing every draw.

    Runs with the same key draw the same phases, directions and standard normals ``xi_i``; only
    ``sigma`` scales the noise. So one pass over the clients (one release of
    :class:`ModulatedMapLevels`) computes the second moments of ``[a_i; xi_i]`` (``a_i`` the
    noise-free message) and every noise level's statistics follow exactly
    (:func:`moments_at_noise`); the server steps then run vmapped over the levels. An
    eps sweep costs about one run per seed instead of one per (eps, seed); each run equals its
    separate run up to float32 rounding (the sums are grouped differently).

    ``hyperparams`` leaves carry a leading axis ``E`` (one entry per noise level); the fields
    the shared pass over the clients reads (:attr:`SHARED_FIELDS`: the map and the clip) must be
    the same across it (:meth:`check_shared`); the noise and the server's own fields (ridge,
    step scale, floor, radius) may differ, since each level's server step reads its own. The
    state and the per-round infos gain that axis (infos: ``[rounds, E, ...]``).

    Attributes:
      estimator: an :class:`Iterative` or :class:`OneShot`.
    """

    estimator: Iterative | OneShot

    SHARED_FIELDS = ("alpha", "beta", "omega", "clip_norm", "directions")

    def __post_init__(self) -> None:
        if self.estimator.grid_norm is not None:
            raise ValueError(
                "runs on the integer grid draw discrete noise at their own level: they share no "
                "pass over the clients (use the estimator with grid_norm=None, or run each level)"
            )

    def check_shared(self, hps: list[Hyperparams]) -> None:
        """Raise ``ValueError`` unless the runs agree on :attr:`SHARED_FIELDS`."""
        for hp in hps[1:]:
            for name in self.SHARED_FIELDS:
                first, other = getattr(hps[0], name), getattr(hp, name)
                if (first is None) != (other is None) or (
                    first is not None and not np.array_equal(first, other)
                ):
                    raise ValueError(
                        f"runs sharing their noise must have the same {name} (the clients' "
                        "pass is shared); they may differ in the noise and the server's fields"
                    )

    def init(self, hp: Hyperparams, key: jax.Array):
        return jax.vmap(lambda h: self.estimator.init(h, key))(hp)

    def round(self, states, hp: Hyperparams, key: jax.Array, clients):
        shared = jax.tree.map(lambda leaf: leaf[0], hp)
        estimator = self.estimator
        broadcast = _broadcast(shared, key, estimator.dim, estimator.directions)
        params = map_params(shared)._replace(noise_std=hp.noise_std)
        levels, _, _ = clients.aggregate(
            ModulatedMapLevels(estimator.directions), params, broadcast.directions,
            client_record, None, key, second_moments,
        )  # fmt: skip

        def step(state, level, stats):
            return estimator.server_step(
                state, level, broadcast._replace(noise_std=level.noise_std), stats
            )

        return jax.vmap(step)(states, hp, levels)


# ----------------------------------------------------------------------------- audit


def audit_report(
    key: jax.Array,
    epsilon: float,
    delta: float,
    samples: int,
    confidence: float = 0.95,
    noise_scale: float = 1.0,
    *,
    alpha: float = 1.0,
    beta: float = 0.5,
    omega: float = 1.0,
    clip_norm: float = 3.0,
):
    """Audit one client's message (one round, :func:`client_message`) calibrated by
    :func:`calibrated_noise_std` to (eps, delta)-LDP, with a Clopper-Pearson lower bound on eps
    (:func:`jfed.privacy.audit.audit_threshold` on the first coordinate).

    The canaries are ``x = C e_1`` and ``x' = -C e_1`` in d = 2, with the fixed modulation
    direction ``e_2``: the modulation then has the same law under both, and the noise-free
    messages differ by ``2 alpha C`` along ``e_1`` (the calibration's bound ``L D =
    2 C (alpha + beta omega)`` also covers modulation, so an honest audit stays well below the
    claim). ``noise_scale`` multiplies the calibrated noise (below 1: a negative control).

    Returns:
      a :class:`jfed.privacy.audit.RandomizerAudit`.
    """
    from jfed.privacy.audit import APPROXIMATE_DP, ONE_REPORT, RandomizerAudit, audit_threshold

    message_sensitivity = sensitivity(alpha, beta, omega, 1, clip_norm)
    noise_std = calibrated_noise_std(epsilon, delta, 1, message_sensitivity) * noise_scale
    hp = hyperparams(alpha=alpha, beta=beta, omega=omega, clip_norm=clip_norm,
                     noise_std=noise_std, directions=np.array([[0.0], [1.0]]))  # fmt: skip
    broadcast = _broadcast(hp, key, 2, 1)

    @jax.jit
    def first_coordinates(key, sign):
        x = jnp.array([sign * clip_norm, 0.0], jnp.float32)
        keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(samples))
        z, _, _ = jax.vmap(lambda k: client_message(broadcast, (x, jnp.float32(0.0)), k))(keys)
        return z[:, 0]

    key_low, key_high = jax.random.split(key)
    null = np.asarray(first_coordinates(key_low, -1.0), np.float64)
    alternative = np.asarray(first_coordinates(key_high, 1.0), np.float64)
    return RandomizerAudit(
        "modulated", epsilon, delta, "local " + APPROXIMATE_DP + via(Zcdp()), "any two feature "
        f"vectors in the ball of radius {clip_norm:g}", ONE_REPORT + " (one round's message)",
        f"x = -{clip_norm:g} e1 and x = {clip_norm:g} e1, modulation direction e2",
        audit_threshold(null, alternative, delta, confidence), samples,
    )  # fmt: skip
