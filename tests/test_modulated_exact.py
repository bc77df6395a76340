"""The exact option of the one-sample methods (``--noise discrete``): every message released on an
integer grid (:mod:`jfed.privacy.local_discrete`).

- What a record certifies: the zCDP closed form of its discrete Gaussian releases, at the
  float32 multiplier that ran, and the device's own noise is at least that (negative controls:
  the sensitivity without the rounding's inflation, one round fewer).
- One client's rounded messages, enumerated on a small grid, stay within the stated integer
  bound (negative control: the bound of the unrounded messages is exceeded); one coordinate's
  output law at the default run's numbers meets the stated (eps, delta) and no smaller eps's,
  and (``-m slow``, 5 s) the float32 release of the same run (enumerated noise) does not.
- The server's statistics stay unbiased (Monte Carlo, tolerance from the draws' standard error;
  negative control: the dithered rounding's variance left in).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfed import _random
from jfed.algorithms import modulated
from jfed.algorithms.linear import second_moments
from jfed.methods import DPSGD, ModulatedOneShot, build_experiment
from jfed.privacy import discrete
from jfed.privacy import exact_release as er
from jfed.privacy.clipping import clip_to_ball
from jfed.privacy.local_discrete import (
    ROUNDING_VARIANCE,
    GridGaussianParams,
    LocalGridGaussian,
    host_noise_variance,
)

IDEAL = "ideal real-valued mechanism; floating-point sampling not modelled"


def _zcdp_epsilon(rho: float, delta: float) -> float:
    """eps of rho-zCDP at delta, written out independently (Bun and Steinke)."""
    return rho + 2 * math.sqrt(rho * math.log(1 / delta))


def _squared_bound(grid_norm: int, dimension: int) -> int:
    """B = ceil((L + 2 sqrt(d))^2), written out independently (float64, then checked exact)."""
    return math.ceil((grid_norm + 2 * math.sqrt(dimension)) ** 2)


@pytest.fixture(scope="module")
def calibrated(fair_task):
    """``{name: (experiment, hp, fields)}`` of the exact runs (and one float run) on Fair."""
    configs = {
        "one-shot": ModulatedOneShot(dataset="fair", noise="discrete"),
        "dpsgd": DPSGD(dataset="fair", epsilon=2.0, rounds=5, noise="discrete"),
        "one-shot float": ModulatedOneShot(dataset="fair"),
    }
    found = {}
    for name, config in configs.items():
        experiment = build_experiment(config, task=fair_task)
        experiment.prepare([config])
        found[name] = (experiment, *experiment.calibrated(config))
    return found


@pytest.mark.parametrize("name, rounds", [("one-shot", 1), ("dpsgd", 5)])
def test_an_exact_record_certifies_its_discrete_gaussian_releases(calibrated, name, rounds):
    """eps = the zCDP closed form of R discrete Gaussian messages at the multiplier z that ran
    (rho = Delta^2 / (2 sigma^2) = 1 / (2 z^2) each, sigma = z Delta), rel 1e-9; the device's
    noise (its (k, m), computed by JAX) has variance at least z^2 4B and at most 2^-15 more, so
    it spends no more; the record's sigma and sensitivity are those numbers in value units.
    Negative controls: the multiplier read against the unrounded sensitivity 2L (the grid's
    inflation forgotten), and one round fewer, give other eps."""
    experiment, hp, fields = calibrated[name]
    z = float(np.float32(hp.noise_multiplier))
    grid_norm, dimension = fields["grid_norm"], experiment.task.dim
    bound = _squared_bound(grid_norm, dimension)
    assert bound == experiment.grid.squared_bound
    certified, delta = fields["epsilon_certified"], fields["delta"]
    assert certified == pytest.approx(_zcdp_epsilon(rounds / (2 * z * z), delta), rel=1e-9)
    assert certified == pytest.approx(experiment.base_config.epsilon, rel=1e-6)
    assert fields["noise_multiplier"] == pytest.approx(z, rel=1e-12)

    variance = host_noise_variance(z, 4 * bound)
    assert z * z * 4 * bound <= variance <= z * z * 4 * bound * (1 + 2.0**-15) + math.sqrt(variance)
    assert _zcdp_epsilon(rounds * 4 * bound / (2 * variance), delta) <= certified
    # R: alpha C + beta for the modulated message, the clip G for a gradient (float32 numbers)
    f32 = np.float32
    radius = float(f32(hp.alpha) * f32(hp.clip_norm) + f32(hp.beta)) if name == "one-shot" \
        else float(f32(hp.clip_norm))  # fmt: skip
    assert fields["sensitivity"] == pytest.approx(2 * math.sqrt(bound) * radius / grid_norm)
    assert fields["sigma"] == pytest.approx(math.sqrt(variance) * radius / grid_norm, rel=1e-6)
    assert fields["mechanism_model"].startswith("exact") and IDEAL not in fields["notion"]

    unrounded = math.sqrt(variance) / (2 * grid_norm)
    for wrong in (_zcdp_epsilon(rounds / (2 * unrounded**2), delta),
                  _zcdp_epsilon((rounds + 1) / (2 * z * z), delta)):  # fmt: skip
        assert certified != pytest.approx(wrong, rel=1e-9)


def test_a_float_record_says_it_is_the_ideal_mechanisms(calibrated):
    """The float path (the default) states the ideal real-valued mechanism's guarantee: its
    notion and its mechanism_model say floating-point sampling is not modelled (the regression
    methods' one statement: DP-SGD's records share it)."""
    _, _, fields = calibrated["one-shot float"]
    assert fields["notion"].endswith(f"({IDEAL})") and fields["mechanism_model"] == IDEAL
    assert "grid_norm" not in fields


def test_rounded_messages_stay_within_the_stated_integer_bound():
    """One client's grid messages (the program's own map, clip, dither and rounding) enumerated
    on a small grid (L = 4, d = 2): every feature vector of a 25 x 25 grid over [-2C, 2C]^2
    (most clipped), 12 phases, 6 rounding draws each. Every rounded message has squared norm
    at most B, checked exactly; any two are at most the event's L2 sensitivity 2 sqrt(B) apart
    (the largest distance is reached by messages near opposite ends of the ball). Negative
    control: the unrounded messages' bound 2L is exceeded (rounding moves a message)."""
    grid = LocalGridGaussian(dimension=2, grid_norm=4)
    grid_map = modulated.ModulatedGridMap(grid)
    hp = modulated.hyperparams(alpha=1.0, beta=0.5, omega=3.0, clip_norm=1.0, noise_multiplier=1.0)
    params = modulated.grid_map_params(hp)
    angle = 0.3
    directions = jnp.array([[math.cos(angle)], [math.sin(angle)]], jnp.float32)
    broadcast = grid_map.broadcast(params, directions)
    radius = grid_map.grid_params(params).radius

    axis = np.linspace(-2.0, 2.0, 25, dtype=np.float32)
    features = np.stack(np.meshgrid(axis, axis), -1).reshape(-1, 2)
    phases = 2 * np.pi * np.arange(12, dtype=np.float32) / 12

    @jax.jit
    def rounded(x, phase, draw):
        clipped, _ = clip_to_ball(x, broadcast.clip_norm)
        signal = modulated.modulated_signal(broadcast, clipped, phase[None])
        return grid.integers(jax.random.key(draw), signal, radius)

    x, phase, draw = (np.repeat(features, 72, 0), np.tile(np.repeat(phases, 6), len(features)),
                      np.tile(np.arange(6), 12 * len(features)))  # fmt: skip
    messages = np.asarray(jax.vmap(rounded)(x, phase, draw), np.int64)
    bound = grid.squared_bound
    assert bound == _squared_bound(4, 2) == 47
    assert (messages**2).sum(1).max() <= bound
    distinct = np.unique(messages, axis=0)
    farthest = ((distinct[:, None, :] - distinct[None, :, :]) ** 2).sum(-1).max()
    event = grid_map.event(jax.tree.map(float, params))
    assert event.l2_sensitivity**2 == pytest.approx(4 * bound, rel=1e-12)
    assert farthest <= event.l2_sensitivity**2
    assert farthest > (2 * grid.grid_norm) ** 2  # negative control: rounding moves messages
    # the rounding draws: the same input takes several integer vectors
    first = messages[:6]
    assert len(np.unique(first, axis=0)) > 1


def _grid_law(grid: LocalGridGaussian, params: GridGaussianParams, integer: int, variance: int):
    """The law of one coordinate of a grid release whose rounded coordinate is ``integer``:
    the discrete Gaussian's exact pmf pushed through the release's own float map (within 12
    standard deviations: the mass beyond, below 1e-32, cannot move a delta of 1e-5)."""
    reach = int(12 * math.sqrt(variance)) + 12
    noise = np.arange(-reach, reach + 1, dtype=np.int64)
    masses = np.exp(discrete.discrete_gaussian_log_pmf(noise, variance))
    outputs = jax.jit(grid.scaled_back)(jnp.asarray(integer + noise, jnp.int32), params)
    values, inverse = np.unique(np.asarray(outputs), return_inverse=True)
    return er.ReleaseLaw(values, np.bincount(inverse.ravel(), weights=masses))


def test_the_default_exact_release_meets_its_stated_guarantee(calibrated):
    """``jfed run modulated-one-shot --noise discrete`` (one message per client, eps 1, delta
    1e-5): one coordinate of a message whose rounded values are as far apart as the bound
    allows (2 floor(sqrt(B)): +-floor(sqrt(B)) on that coordinate) has, on the program's own
    output laws, delta at most 1e-5 at the certified eps, and more at eps / 2 (the check can
    see too little noise)."""
    experiment, hp, fields = calibrated["one-shot"]
    grid = experiment.grid
    params = GridGaussianParams(jnp.float32(hp.alpha * hp.clip_norm + hp.beta),
                                jnp.float32(hp.noise_multiplier))  # fmt: skip
    variance = host_noise_variance(float(params.noise_multiplier), grid.squared_sensitivity)
    top = math.isqrt(grid.squared_bound)
    low, high = (_grid_law(grid, params, side * top, variance) for side in (-1, 1))
    epsilon, delta = fields["epsilon_certified"], fields["delta"]
    assert er.hockey_stick(low, high, epsilon) <= delta
    assert er.hockey_stick(low, high, epsilon / 2) > delta


@pytest.mark.slow
def test_the_default_float_release_does_not_meet_its_stated_guarantee(calibrated):
    """The negative control of the test above (5 s: 2^23 outputs sorted twice): the float32
    message of ``jfed run modulated-one-shot`` (sigma = z L D), its noise enumerated, on first
    coordinates -alpha C and alpha C (x = -C e1 and C e1 with the modulation direction e2, the
    audit's canaries), has delta above 0.5 (measured 0.885) at the eps its record states with
    delta 1e-5."""
    _, float_hp, float_fields = calibrated["one-shot float"]
    noise = np.float32(float_hp.noise_std) * jnp.asarray(
        er.enumerated_noise(lambda key, shape: _random.private_normals(key, shape))
    )
    noise = np.asarray(noise)
    coordinate = float(np.float32(float_hp.alpha) * np.float32(float_hp.clip_norm))
    low = er.float_release_law(-coordinate, noise, er.PRIVATE_NORMAL_TAIL_CELLS)
    high = er.float_release_law(coordinate, noise, er.PRIVATE_NORMAL_TAIL_CELLS)
    assert float_fields["delta"] == 1e-5
    assert er.hockey_stick(low, high, float_fields["epsilon_certified"]) > 0.5


# ------------------------------------------------------------------------ unbiased statistics

Z = 4.5  # standard errors; 9 entries checked: family-wise false alarms below 1e-4
REPLICATES, CLIENTS, DIM = 2000, 16, 3


def _clients():
    rng = np.random.default_rng(11)
    X = rng.normal(size=(CLIENTS, DIM))
    X *= rng.uniform(0.2, 0.95, size=(CLIENTS, 1)) / np.linalg.norm(X, axis=1, keepdims=True)
    y = X @ np.array([0.5, -1.0, 2.0]) + 0.3 * rng.normal(size=CLIENTS)
    return X.astype(np.float32), y.astype(np.float32)


@pytest.fixture(scope="module")
def replicated_statistics():
    """``(S_hat: [R, d, d], b_hat: [R, d], rounding, hp)`` of R independent rounds of the grid
    map on a coarse grid (L = 1: the dithered rounding's variance, gamma^2 / 4, is a tenth of a
    message's noise variance, so leaving it in is seen), each debiased by the server's own
    variance (:meth:`ModulatedGridMap.noise_std`)."""
    X, y = _clients()
    grid = LocalGridGaussian(DIM, grid_norm=1)
    grid_map = modulated.ModulatedGridMap(grid, directions=2)
    # z^2 4B = 1.6 (4B = 80): the device's variance 2 (k = 1, m = 1)
    hp = modulated.hyperparams(alpha=0.8, beta=1.3, omega=2.0, clip_norm=1.0,
                               noise_multiplier=math.sqrt(1.6 / 80))  # fmt: skip
    params = modulated.grid_map_params(hp)
    directions = jnp.asarray(np.linalg.qr(np.random.default_rng(2).normal(size=(DIM, 2)))[0],
                             jnp.float32)  # fmt: skip
    broadcast = grid_map.broadcast(params, directions)
    z = params.noise_multiplier

    def message(x, y, key):
        return modulated.grid_client_message(broadcast, (x, y), key, grid, z)

    def debiased(messages, ys):
        stats = second_moments((messages, ys, jnp.zeros(CLIENTS)), jnp.ones(CLIENTS))
        return modulated.debias(stats, broadcast)

    @jax.jit
    def rounds(key):  # every client of every round in one vmap (one batched sampler to compile)
        keys = jax.random.split(key, REPLICATES * CLIENTS)
        messages, ys, _ = jax.vmap(message)(np.tile(X, (REPLICATES, 1)), np.tile(y, REPLICATES),
                                            keys)  # fmt: skip
        return jax.vmap(debiased)(messages.reshape(REPLICATES, CLIENTS, DIM),
                                  ys.reshape(REPLICATES, CLIENTS))  # fmt: skip

    S_hat, b_hat = rounds(jax.random.key(5))
    gamma = float(grid_map.grid_params(params).radius) / grid.grid_norm
    assert host_noise_variance(float(params.noise_multiplier), grid.squared_sensitivity) == 2
    rounding = gamma**2 * ROUNDING_VARIANCE / float(hp.alpha) ** 2
    return np.asarray(S_hat, np.float64), np.asarray(b_hat, np.float64), rounding


def _is_unbiased(samples: np.ndarray, truth: np.ndarray) -> bool:
    mean = samples.mean(0)
    standard_error = samples.std(0, ddof=1) / np.sqrt(samples.shape[0])
    return bool(np.all(np.abs(mean - truth) <= Z * standard_error))


def test_the_exact_maps_statistics_are_unbiased(replicated_statistics):
    """E[S_hat] = S and E[b_hat] = b with discrete noise and the dithered rounding (the server
    removes (R / L)^2 (sigma^2 + 1/4) per coordinate). Negative control: the rounding's 1/4
    not removed (as plain randomized rounding, whose f (1 - f) varies with the data, could not
    be) is detected."""
    X, y = _clients()
    S, b = X.T.astype(np.float64) @ X / CLIENTS, X.T.astype(np.float64) @ y / CLIENTS
    S_hat, b_hat, rounding = replicated_statistics
    assert _is_unbiased(S_hat, S)
    assert _is_unbiased(b_hat, b)
    assert not _is_unbiased(S_hat + rounding * np.eye(DIM), S)
