"""The silo methods' exact releases (``--noise discrete``, the default of noisy-mbsgd, accel-mbsgd
and local-sgd, an option of shuffle-mbsgd): each record's clipped gradient on an integer grid
under an exact norm bound, the silo's integer sum plus exact discrete Gaussian noise
(``SiloDiscreteGaussian``; shuffle-mbsgd: each message its own noise).

- the certified eps equals dp-accounting's for the continuous Gaussian the discrete noise is
  coupled to (the float release's at the same noise std), the coupling's share of delta written
  out here (rel 1e-9); negative control: a reference 1% off is told apart; the device's integer
  noise variance is at least what the event states, in exact fractions (negative control: the
  float noise without the rounding's inflation falls short);
- the coupling's total-variation bound holds where it can be measured (small smoothing
  variances, quadrature); negative control: the coupling without its variance taken off fails;
- a silo's integer sum moves by a vector of squared norm at most 4B, exactly, when one record is
  replaced by an adversarial one; negative control: rounding without the condition exceeds B;
- in the program, the noise on the server's average has variance sigma^2 / N (tolerance from
  its known variance); negative control: 0.9 and 1.1 times the noise std are rejected;
- training with the exact release and with the float one ends within the seed spread of each
  other; negative control: four times the noise does not (the same compiled program);
- shuffle-mbsgd's exact messages (``--noise discrete``, ``ShuffledGridMessages``): eps0 and the
  run's eps against the coupled Gaussian and the shuffle chain in closed form (rel 1e-9;
  negative controls: the message count 1% off, the grid without the rounding's inflation);
  messages on the grid, each with its own noise (negative controls: one noise, 0.9 and 1.1
  times the std); training within the seed spread of float messages (negative control: twice
  the noise); float messages draw as recorded, to float32's rounding across CPUs (1e-5
  relative; recorded with each silo's records drawn without replacement).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_silo_privacy import (
    CLIP,
    PRIVATE_BATCH,
    PRIVATE_ROUNDS,
    SHUFFLE_BATCH,
    SHUFFLE_SIZES,
    SIZES,
    _float32,
    _gaussian_epsilon,
    _local_steps,
    _minibatch,
    _one_pass,
    _shuffle_chain,
)
from test_silo_sgd import logistic_silos

from jfed.algorithms import silo_aggregators, silo_sgd
from jfed.algorithms.losses import Loss
from jfed.data.silos import SiloData
from jfed.engine import simulate
from jfed.privacy import discrete
from jfed.privacy.discrete_aggregators import DiscreteGaussianSumParams

COUPLING = 9.0  # the continuous Gaussian the discrete noise is accounted as has variance s^2 - 9


def _squared_bound(grid_norm: int, dimension: int) -> int:
    """B at conditional rounding's default beta = e^-0.5 (sqrt(2 ln(1 / beta)) = 1): Kairouz, Liu
    and Steinke's ``L^2 + d/4 + L + sqrt(d)/2``, or the deterministic ``(L + sqrt(d))^2``."""
    deterministic = (grid_norm + math.sqrt(dimension)) ** 2
    concentrated = grid_norm**2 + dimension / 4 + grid_norm + math.sqrt(dimension) / 2
    return math.ceil(min(deterministic, concentrated))


def _coupling_delta(draws: int, epsilon: float) -> float:
    """``(1 + e^eps)`` times the total variation of ``draws`` discrete Gaussian coordinates from
    their continuous coupling: ``eta (1 + eta) / (1 - eta)^2`` each, ``eta = 2 e^{-2 pi^2 s^2} /
    (1 - e^{-6 pi^2 s^2})`` at s^2 = 9."""
    eta = 2 * math.exp(-2 * math.pi**2 * COUPLING) / (1 - math.exp(-6 * math.pi**2 * COUPLING))
    return (1 + math.exp(epsilon)) * draws * eta * (1 + eta) / (1 - eta) ** 2


def _settings():
    from jfed.methods import AcceleratedMBSGD, LocalSGD, NoisyMBSGD

    common = dict(rounds=PRIVATE_ROUNDS, batch=PRIVATE_BATCH, gradient_clip=CLIP, epsilon=1.0)
    # (configuration, certified, reference, releases a round, grid_norm)
    return {
        "noisy-mbsgd exact": (NoisyMBSGD(**common), True, _minibatch, 1, 4096),
        "accel-mbsgd one-pass": (AcceleratedMBSGD(**common), True, _one_pass, 1, 4096),
        # the theorem's noise (sigma K / L = 34 at the smallest silo) needs a coarser grid
        "noisy-mbsgd theorem": (NoisyMBSGD(calibration="theorem", **common), False, _minibatch,
                                1, 1024),
        "local-sgd experiments": (LocalSGD(calibration="experiments", **common), False,
                                  _local_steps, PRIVATE_BATCH, 4096),
    }  # fmt: skip


SLOW_SETTINGS = ("local-sgd experiments",)  # its K R steps' PLD; the one-record steps' grid


@pytest.fixture(scope="module")
def uneven():
    """Three logistic silos of two sizes (30, 45, 45 records), as tests/test_silo_privacy.py's."""
    return logistic_silos(SIZES, 3)


@pytest.fixture(scope="module")
def shuffled_silos():
    """Three logistic silos of 90, 120, 120 records (shuffle-mbsgd's K = 80 distinct records a
    silo), as tests/test_silo_privacy.py's."""
    return logistic_silos(SHUFFLE_SIZES, 3)


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_SETTINGS else n for n in _settings()],
)
def test_exact_silo_methods_certify_the_coupled_gaussian_of_their_grid(name, uneven):
    """The record's eps (``exact_epsilon`` for a formula calibration) is dp-accounting's for the
    float release of the noise std the run reads (the continuous Gaussian the grid's release is
    coupled to), at delta less the coupling's share written out above, to rel 1e-9, whatever the
    grid the sweep's noise needs; the record says so (``mechanism_model``, ``grid_norm``,
    ``noise_inflation`` from B's closed form, ``delta_coupling``). Negative control: the same
    reference with a sampling rate (Poisson) or noise (one pass) 1% off is told apart. That the
    device draws at least the noise the event states: the test below."""
    from jfed.methods import build_experiment

    config, certifies, reference, releases, grid_norm = _settings()[name]
    assert config.noise == "discrete"  # the default
    experiment = build_experiment(config, task=uneven)
    hyper, fields = experiment.calibrate(config)
    noise, delta = _float32(hyper.noise_std), experiment.delta
    dimension = Loss("logistic").param_dim(uneven.dim)
    draws = PRIVATE_ROUNDS * releases * dimension
    expected = reference(noise, hyper, delta - _coupling_delta(draws, config.epsilon), 1.0)
    stated = fields["epsilon_certified"] if certifies else fields["exact_epsilon"]
    assert stated == pytest.approx(expected, rel=1e-9)
    if certifies:
        assert stated <= config.epsilon * (1 + 1e-9)
    assert fields["mechanism_model"].startswith("exact")
    assert fields["grid_norm"] == grid_norm and fields["adjacency"] == "replace-one"
    assert fields["delta_coupling"] == pytest.approx(_coupling_delta(draws, stated), rel=1e-9)
    assert 0 < fields["delta_coupling"] < 1e-60
    assert fields["noise_inflation"] == pytest.approx(
        math.sqrt(_squared_bound(grid_norm, dimension)) / grid_norm, rel=1e-12
    )
    assert stated != pytest.approx(reference(noise, hyper, delta, 1.01), rel=1e-6)


def test_a_float_record_says_it_is_the_ideal_mechanisms(uneven):
    from jfed.methods import NoisyMBSGD, build_experiment

    config = NoisyMBSGD(rounds=PRIVATE_ROUNDS, batch=PRIVATE_BATCH, calibration="theorem",
                        noise="float")  # fmt: skip
    _, fields = build_experiment(config, task=uneven).calibrate(config)
    ideal = "ideal real-valued mechanism; floating-point sampling not modelled"
    assert fields["mechanism_model"] == ideal and fields["notion"].endswith(f"({ideal})")
    assert "grid_norm" not in fields


@pytest.mark.parametrize("batch", [1, 10])
def test_the_grid_noise_is_at_least_what_the_event_states(batch):
    """For noise stds spread over 2.5 decades (float32 values, as the device reads them), the
    integer variance ``2^k m`` the device draws the silo's noise with is at least ``(sigma K /
    L)^2 B + 9`` grid units, checked with Python fractions: the event's ``z^2 B``, whose
    continuous coupling is the float release's ``Gaussian(sigma K / L)``. Negative control: the
    float release's noise put on the grid as it is (least variance ``(sigma K G / L)^2``, without
    the rounding's inflation B / G^2), drawn by the same sampler's parameters, falls short of it
    for most sigma."""
    from fractions import Fraction

    aggregator = silo_aggregators.SiloDiscreteGaussian(silo_aggregators.POISSON, batch, None, 1,
                                                       50, 2048)  # fmt: skip
    clip = np.float32(1.5)
    sigmas = np.geomspace(0.05, 15.0, 97).astype(np.float32) / np.float32(batch)
    params = silo_aggregators.SiloNoiseParams(jnp.float32(clip), jnp.asarray(sigmas))

    bound = _squared_bound(2048, 50)

    def naive(silo):  # the float noise on the grid as it is: (sigma K G / L)^2 = z^2 B
        multiplier = params.noise_std[silo] * batch / params.clip_norm
        return DiscreteGaussianSumParams(params.clip_norm, multiplier * 2048 / math.sqrt(bound))

    @jax.jit
    def variances(silo_ids):
        def one(silo):
            grid = aggregator.grid
            bits, quotient, in_range = grid.noise_parameters(aggregator.grid_params(params, silo))
            naive_bits, naive_quotient, _ = grid.noise_parameters(naive(silo))
            return ((jnp.uint32(1) << bits) * quotient, in_range,
                    (jnp.uint32(1) << naive_bits) * naive_quotient)  # fmt: skip

        return jax.vmap(one)(silo_ids)

    drawn, in_range, naive_drawn = variances(jnp.arange(len(sigmas)))
    assert bool(jnp.all(in_range))
    short = 0
    for sigma, variance, naive_variance in zip(sigmas, np.asarray(drawn), np.asarray(naive_drawn),
                                               strict=True):  # fmt: skip
        multiplier = Fraction(float(sigma)) * batch / Fraction(float(clip))
        assert Fraction(int(variance)) >= multiplier**2 * bound + 9
        short += Fraction(int(naive_variance)) < multiplier**2 * bound + 9
    assert short > len(sigmas) / 2


def _kernel_law(variance: float, smoothing: float, support: np.ndarray) -> np.ndarray:
    """The law on ``support`` of ``K(N(0, variance))``: g continuous, then an integer n drawn with
    probability proportional to ``exp(-(n - g)^2 / (2 smoothing))`` (quadrature over g)."""
    g = np.linspace(support[0] - 12, support[-1] + 12, 30_001)
    density = np.exp(-(g**2) / (2 * variance)) / math.sqrt(2 * math.pi * variance)
    lattice = np.arange(support[0] - 40, support[-1] + 41)
    normaliser = np.exp(-((lattice[:, None] - g[None, :]) ** 2) / (2 * smoothing)).sum(axis=0)
    weights = density / normaliser * (g[1] - g[0])
    return np.exp(-((support[:, None] - g[None, :]) ** 2) / (2 * smoothing)) @ weights


@pytest.mark.parametrize(("smoothing", "variance"), [(0.25, 1.0), (0.5, 1.0), (0.5, 3.0)])
def test_the_coupling_bound_holds_where_it_can_be_measured(smoothing, variance):
    """The coupling behind the certificate, at smoothing variances s^2 small enough for its total
    variation to be measured (the program's s^2 = 9 leaves 10^-77): ``N_Z(0, sigma^2)`` and the
    continuous ``N(0, sigma^2 - s^2)`` followed by the integer kernel of parameter s^2 are within
    ``eta (1 + eta) / (1 - eta)^2``, ``eta = 2 e^{-2 pi^2 s^2} / (1 - e^{-6 pi^2 s^2})``
    (quadrature; measured 1e-4 to 1e-8). Negative control: the kernel after the continuous
    Gaussian of the whole variance sigma^2 (no s^2 taken off) is outside the bound."""
    support = np.arange(-int(12 * math.sqrt(variance)) - 12, int(12 * math.sqrt(variance)) + 13)
    exact = np.exp(-(support**2) / (2 * variance))
    exact /= exact.sum()
    tail = math.exp(-2 * math.pi**2 * smoothing)
    eta = 2 * tail / (1 - tail**3)
    bound = eta * (1 + eta) / (1 - eta) ** 2

    def distance(continuous_variance: float) -> float:
        coupled = _kernel_law(continuous_variance, smoothing, support)
        return 0.5 * float(np.abs(exact - coupled).sum())

    assert 0 < distance(variance - smoothing) <= bound
    assert distance(variance) > 2 * bound  # measured: 3 to 870 times the bound


# -- the release itself: one jitted silo message on a small grid

DIMENSION, GRID, BATCH, ROWS = 9, 4096, 4, 6


def _aggregator(max_tries: int = 32) -> silo_aggregators.SiloDiscreteGaussian:
    return silo_aggregators.SiloDiscreteGaussian(
        silo_aggregators.POISSON, BATCH, None, 1, DIMENSION, GRID, max_tries=max_tries
    )


def _adversarial_rows() -> np.ndarray:
    """``f32[ROWS, DIMENSION]`` gradients (clip norm 1): a row just inside the clip norm whose
    every grid coordinate has fractional part 1/2 (seven at 1365.5 grid units, two at 1364.5:
    4095.83 units long), a row 10^30 long (clipped), one along an axis, one of tiny entries, the
    first row negated and with alternating signs."""
    tight = np.array([1365.5] * 7 + [1364.5] * 2) / GRID
    rows = [tight, 1e30 * np.linspace(-1, 1, DIMENSION), np.eye(DIMENSION)[3], 1e-30 * tight,
            -tight, tight * np.where(np.arange(DIMENSION) % 2 == 0, 1.0, -1.0)]  # fmt: skip
    return np.asarray(rows, np.float32)


@pytest.fixture(scope="module")
def integer_records():
    """``i64[draws, ROWS, DIMENSION]``: every row's rounded record, over 256 keys (row j's
    record: the silo's integer sum with only row j in its minibatch)."""
    aggregator = _aggregator()
    params = silo_aggregators.SiloNoiseParams(jnp.float32(1.0), jnp.zeros(1, jnp.float32))
    rows = jnp.asarray(_adversarial_rows())

    @jax.jit
    def records(key):
        def one(row):
            weights = jnp.where(jnp.arange(ROWS) == row, 1.0 / BATCH, 0.0)
            return aggregator.integer_rows(params, rows, weights, key)[0]

        return jax.vmap(one)(jnp.arange(ROWS))

    keys = jax.random.split(jax.random.key(7), 256)
    return np.asarray(jax.vmap(records)(keys), np.int64)


def test_one_record_moves_the_integer_sum_by_at_most_two_sqrt_b_exactly(integer_records):
    """Every rounded record has squared norm at most B, in exact integers, over 256 draws of
    every adversarial row; so replacing any record of a silo's minibatch by any other moves its
    integer sum by a vector of squared norm at most 4B (checked on every pair). Negative control:
    the half-fraction row rounded without the condition exceeds B in some of the draws."""
    bound = _squared_bound(GRID, DIMENSION)
    squared = np.sum(integer_records**2, axis=-1)
    assert squared.max() <= bound
    assert squared[:, 0].min() >= 4094**2  # rounded (each coordinate within 1/2), not zeros
    moved = integer_records[:, :, None, :] - integer_records[:, None, :, :]
    assert np.sum(moved**2, axis=-1).max() <= 4 * bound
    plain = jax.vmap(lambda key: discrete.randomized_round(key, jnp.asarray(
        _adversarial_rows()[0] * GRID)))(jax.random.split(jax.random.key(8), 256))  # fmt: skip
    unconditioned = np.sum(np.asarray(plain, np.int64) ** 2, axis=-1)
    assert unconditioned.max() > bound


# -- the program: Noisy MB-SGD on the grid and in float32, at the same noise

SILOS, RECORDS, FEATURES, STEPS, SEEDS, NOISE = 8, 120, 5, 12, 24, 0.3


def _silos(signal: float) -> SiloData:
    """8 silos of 120 records, features N(0, I / 9), labels from a logistic model of weights
    ``signal * (3, -2, 1, 0, 2)`` (0: fair coins; the same shapes either way)."""
    rng = np.random.default_rng(3)
    X = [rng.normal(size=(RECORDS, FEATURES)) / 3 for _ in range(SILOS)]
    weights = signal * np.array([3.0, -2.0, 1.0, 0.0, 2.0])
    y = [(rng.random(RECORDS) < 1 / (1 + np.exp(-x @ weights))).astype(float) for x in X]
    return SiloData.from_lists(X, y)


def _program(grid: silo_sgd.Grid | None) -> silo_sgd.NoisyMBSGD:
    aggregator = silo_sgd.minibatch_aggregator(True, silo_aggregators.POISSON, 6,
                                               (RECORDS,) * SILOS, grid=grid)  # fmt: skip
    return silo_sgd.NoisyMBSGD(Loss("logistic"), FEATURES, SILOS, 6, STEPS, sampling="poisson",
                               aggregator=aggregator)  # fmt: skip


EXACT = _program(silo_sgd.Grid(FEATURES, 4096))


def _runs(program, data, noise: float, seeds: int, shuffle: bool = False):
    """``(w_average f64[seeds, p], w per round f64[seeds, rounds, p])`` of ``seeds`` runs
    (``shuffle``: with the shuffled messages' deltas, which their device code does not read)."""
    deltas = dict(message_delta=1e-9, shuffle_delta=1e-9) if shuffle else {}
    hp = silo_sgd.hyperparams(SILOS, step_size=1.0, noise_std=noise, **deltas)
    finals, iterates = [], []
    for seed in range(seeds):
        state, infos = simulate(program, data, hp, jax.random.key(seed), STEPS)
        finals.append(np.asarray(state.w_average, np.float64))
        iterates.append(np.asarray(infos.w, np.float64))
    return np.asarray(finals), np.asarray(iterates)


def test_the_noise_on_the_servers_average_has_its_stated_variance():
    """Silos whose records are all zeros send their noise alone (a zero gradient rounds to 0):
    each round moves the iterate by minus the average of 8 silos' noise, of variance sigma^2 / 8
    per coordinate (the grid's variance exceeds ``(sigma K G / L)^2`` by less than 10^-4 of it
    here). Over 50 seeds x 12 rounds x 5 coordinates the sample variance is within 5 standard
    errors of a sample variance (``v sqrt(2 / (n - 1))``). Negative control: 0.9 and 1.1 times
    sigma are rejected by the same test. The program is the exact one of the training test
    below (one compile)."""
    zeros = SiloData.from_lists([np.zeros((RECORDS, FEATURES))] * SILOS,
                                [np.zeros(RECORDS)] * SILOS)  # fmt: skip
    _, iterates = _runs(EXACT, zeros, NOISE, 50)
    steps = np.diff(np.concatenate([np.zeros_like(iterates[:, :1]), iterates], axis=1), axis=1)
    n = steps.size
    variance = float(np.mean(steps**2))  # the mean is 0: the law is symmetric

    def consistent(std: float) -> bool:
        expected = std**2 / SILOS
        return abs(variance - expected) <= 5 * expected * math.sqrt(2 / (n - 1))

    assert consistent(NOISE)
    assert not consistent(0.9 * NOISE) and not consistent(1.1 * NOISE)


def test_training_with_the_exact_release_ends_within_the_seed_spread_of_the_float_one():
    """Noisy MB-SGD (Poisson-sampled, 8 silos of 120 records with a logistic signal, 12 rounds)
    with the same noise std on the grid and in float32: the mean training losses of the averaged
    iterate over 24 seeds differ by less than 3 standard errors of their difference (measured:
    1.3). Negative control: the exact program with four times the noise ends more than 3 standard
    errors above the float one (measured: 4.0)."""
    data = _silos(1.0)
    X, y = (np.asarray(a, np.float64) for a in data.pooled())

    def losses(program, noise):
        finals, _ = _runs(program, data, noise, SEEDS)
        return np.mean(np.logaddexp(0.0, -(2 * y - 1)[None, :] * (finals @ X.T)), axis=1)

    def standard_errors(a, b) -> float:
        return (a.mean() - b.mean()) / math.sqrt(a.var(ddof=1) / SEEDS + b.var(ddof=1) / SEEDS)

    exact, floating = losses(EXACT, NOISE), losses(_program(None), NOISE)
    assert abs(standard_errors(exact, floating)) < 3
    assert standard_errors(losses(EXACT, 4 * NOISE), floating) > 3


# -- shuffle-mbsgd --noise discrete: every message an exact local randomizer on the grid


def _message_chain(sigma0, grid_norm, dimension, delta0, delta_shuffle, delta, messages,
                   inflated=True):  # fmt: skip
    """``(eps0, the coupling's share of delta0, the run's eps)`` of exact messages in closed
    form: the grid's B, the discrete noise's least variance ``(sigma0 / L)^2 B + 9`` grid units,
    the continuous Gaussian it is coupled to (variance less 9) at sensitivity ``2 sqrt(B)``
    (dp-accounting's Gaussian), eps0 at delta0 less ``(1 + e^E) T`` (E: its eps at delta0 / 2,
    T: the p coordinates' total variation), then the shuffle chain. ``inflated=False`` is the
    negative control: the float noise put on the grid as it is (variance ``(sigma0 G / L)^2``,
    without the rounding's inflation B / G^2)."""
    bound = _squared_bound(grid_norm, dimension)
    scale = bound if inflated else grid_norm**2
    coupled_std = math.sqrt((sigma0 / CLIP) ** 2 * scale + COUPLING - COUPLING)
    sensitivity = 2 * math.sqrt(bound)
    highest = _gaussian_epsilon(coupled_std, sensitivity, delta0 / 2)
    share = _coupling_delta(dimension, highest)
    epsilon0 = _gaussian_epsilon(coupled_std, sensitivity, delta0 - share)
    return epsilon0, share, _shuffle_chain(epsilon0, messages, delta0, delta_shuffle, delta)


def test_exact_shuffle_messages_certify_their_coupled_gaussian(shuffled_silos):
    """shuffle-mbsgd with --noise discrete: the record's eps0 (at the calibrated sigma0 and
    delta0) and eps (at the float32 values the run reads) equal the closed form above to rel
    1e-9, and its fields say how (``mechanism_model``, ``delta0_coupling`` the share of delta0,
    ``delta_coupling`` its share of the run's delta through the shuffling bound, ``grid_norm``,
    ``noise_inflation``). Negative controls: the same chain with the message count 1% off, or
    with the float noise on the grid without the rounding's inflation, is told apart."""
    from jfed.methods import ShuffleMBSGD, build_experiment

    config = ShuffleMBSGD(rounds=PRIVATE_ROUNDS, batch=SHUFFLE_BATCH, gradient_clip=CLIP,
                          epsilon=3.0, noise="discrete")  # fmt: skip
    experiment = build_experiment(config, task=shuffled_silos)
    hyper, fields = experiment.calibrate(config)
    dimension, delta = Loss("logistic").param_dim(shuffled_silos.dim), experiment.delta
    messages, grid_norm = len(SHUFFLE_SIZES) * SHUFFLE_BATCH, fields["grid_norm"]
    (sigma0,) = set(_float32(hyper.noise_std))
    deltas = _float32([hyper.message_delta, hyper.shuffle_delta])
    _, _, expected = _message_chain(sigma0, grid_norm, dimension, *deltas, delta, messages)
    assert fields["epsilon_certified"] == pytest.approx(expected, rel=1e-9)
    assert fields["epsilon_certified"] <= config.epsilon * (1 + 1e-9)
    epsilon0, share, _ = _message_chain(fields["sigma"], grid_norm, dimension, fields["delta0"],
                                        deltas[1], delta, messages)  # fmt: skip
    assert fields["epsilon0"] == pytest.approx(epsilon0, rel=1e-9)
    assert fields["delta0_coupling"] == pytest.approx(share, rel=1e-9) and 0 < share < 1e-70
    carried = (math.exp(fields["epsilon_per_round"]) + 1) * (1 + math.exp(-epsilon0) / 2)
    coupling = PRIVATE_ROUNDS * carried * messages * share
    assert fields["delta_coupling"] == pytest.approx(coupling, rel=1e-9)
    assert fields["delta_accountant"] == delta - fields["delta_coupling"]
    assert fields["mechanism_model"].startswith("exact") and "ideal" not in fields["notion"]
    assert fields["noise_inflation"] == pytest.approx(
        math.sqrt(_squared_bound(grid_norm, dimension)) / grid_norm, rel=1e-12
    )
    off = _message_chain(sigma0, grid_norm, dimension, *deltas, delta, round(1.01 * messages))
    plain = _message_chain(sigma0, grid_norm, dimension, *deltas, delta, messages, False)
    for control in (off[2], plain[2]):
        assert fields["epsilon_certified"] != pytest.approx(control, rel=1e-6)


# the 10^30 row's float32 norm overflows, so its clip sends zeros (inside the bound too): its
# messages are sent with the value 0, as an excluded row's
INCLUDED = np.array([True, False, False, True, True, False])
MESSAGES = np.array([2, 1, 3, 0, 4, 1])  # of each adversarial row: 11, sent 4 at a time


def test_exact_messages_are_integers_within_their_norm_bound_with_their_own_noise():
    """Exact messages (ShuffledGridMessages, clip norm 1, G = 4096): ``MESSAGES`` of each
    adversarial row above, its value the clipped row where ``INCLUDED`` (else 0), sent 4 at a
    time in three steps (an audit's canary messages; a silo's K messages are one such step).
    Their sum times G is an integer vector; every rounded row has squared norm at most B in
    exact integers; what is left after the included rows' values, the messages' noise (and the
    unbiased rounding), has mean 0 and variance ``11 s^2`` per coordinate over 512 keys (s^2 >=
    (sigma0 / L)^2 B + 9: each message its own draw; within 5 standard errors). Negative
    controls: one noise for all the messages (s^2), a noise in each of the 4 x 6 slots, and 0.9
    and 1.1 times the noise std are rejected, and so is the signal with the excluded rows'
    values sent."""
    sigma0 = 0.1
    messages = silo_aggregators.ShuffledGridMessages(4, 24, DIMENSION, GRID)
    params = silo_aggregators.ShuffleParams(jnp.float32(1.0), jnp.full(1, sigma0, jnp.float32),
                                            jnp.float32(1e-9), jnp.float32(1e-9))  # fmt: skip
    rows = jnp.asarray(_adversarial_rows())
    included, counts = jnp.asarray(INCLUDED), jnp.asarray(MESSAGES, jnp.float32)

    @jax.jit
    def one(key):
        rounding_key, noise_key = jax.random.split(key)
        value = messages.repeated_messages(params, rows, included, counts, 0, noise_key)
        rounded, _ = messages.record.rounded_rows(params, rows, jnp.ones(ROWS, bool),
                                                  rounding_key)  # fmt: skip
        return value, rounded

    values, rounded = jax.vmap(one)(jax.random.split(jax.random.key(11), 512))
    scaled = np.asarray(values, np.float64) * GRID
    assert np.array_equal(scaled, np.round(scaled))
    bound = _squared_bound(GRID, DIMENSION)
    assert np.sum(np.asarray(rounded, np.int64) ** 2, axis=-1).max() <= bound
    clipped = _adversarial_rows().astype(np.float64)
    clipped /= np.maximum(np.linalg.norm(clipped, axis=1, keepdims=True), 1.0)
    signal = GRID * (MESSAGES * INCLUDED) @ clipped
    noise, n = scaled - signal, scaled.size
    variance = float(np.mean(noise**2))
    least = sigma0**2 * bound + COUPLING  # the sampler's 2^k m exceeds it by < sqrt(2) s

    def consistent(expected: float) -> bool:
        return abs(variance - expected) <= 5 * expected * math.sqrt(2 / (n - 1))

    sent = int(MESSAGES.sum())
    assert consistent(sent * least)
    for control in (least, 4 * ROWS * least, 0.81 * sent * least, 1.21 * sent * least):
        assert not consistent(control)
    error = math.sqrt(sent * least / len(scaled))  # the standard error of a coordinate's mean

    def centred(expected_signal) -> bool:
        return bool(np.all(np.abs(np.mean(scaled - expected_signal, axis=0)) <= 5 * error))

    assert centred(signal)
    assert not centred(GRID * MESSAGES @ clipped)


def _shuffle_program(grid_norm: int | None) -> silo_sgd.ShuffleMBSGD:
    """Shuffle-DP MB-SGD on the 8 silos above, 6 messages a silo, float or exact messages."""
    if grid_norm is None:
        aggregator = silo_aggregators.ShuffledMessages(6, 6 * SILOS)
    else:
        aggregator = silo_aggregators.ShuffledGridMessages(
            6, 6 * SILOS, Loss("logistic").param_dim(FEATURES), grid_norm
        )
    return silo_sgd.ShuffleMBSGD(Loss("logistic"), FEATURES, SILOS, 6, STEPS,
                                 aggregator=aggregator)  # fmt: skip


SHUFFLE_NOISE = 0.75  # sigma0 of a message: about NOISE on the mean of its silo's 6 messages
SHUFFLE_SEEDS = 16


def test_training_with_exact_messages_ends_within_the_seed_spread_of_float_ones():
    """Shuffle-DP MB-SGD (8 silos of 120 records with a logistic signal, 6 messages a silo, 12
    rounds) with the same sigma0 on the grid and in float32, scored by the averaged iterate's
    squared distance from the noise-free run's at the same seed (the same minibatches: what the
    messages' noise costs; the training loss barely moves with it here): over 16 seeds the mean
    distances differ by less than 3 standard errors of their difference (measured: 1.2; means
    0.42 exact, 0.32 float). Negative control: exact messages with twice the noise end more
    than 3 standard errors further (measured: 4.9)."""
    data = _silos(1.0)
    exact = _shuffle_program(4096)
    noise_free, _ = _runs(_shuffle_program(None), data, 0.0, SHUFFLE_SEEDS, shuffle=True)

    def distances(program, noise):
        finals, _ = _runs(program, data, noise, SHUFFLE_SEEDS, shuffle=True)
        return np.sum((finals - noise_free) ** 2, axis=1)

    def standard_errors(a, b) -> float:
        return (a.mean() - b.mean()) / math.sqrt(
            a.var(ddof=1) / SHUFFLE_SEEDS + b.var(ddof=1) / SHUFFLE_SEEDS
        )

    floating = distances(_shuffle_program(None), SHUFFLE_NOISE)
    assert abs(standard_errors(distances(exact, SHUFFLE_NOISE), floating)) < 3
    assert standard_errors(distances(exact, 2 * SHUFFLE_NOISE), floating) > 3


FLOAT_SHUFFLE_ITERATE = (2.4901652336120605, 2.565979480743408, -0.6075748801231384)
"""The averaged iterate of the float messages' fixed-seed run below (float32 values), recorded
with each silo's K records drawn without replacement (the values recorded before that, with
replacement, were of another sampler and were replaced on purpose)."""


def test_float_shuffle_messages_draw_as_recorded(shuffled_silos):
    """shuffle-mbsgd's default is float messages, and they draw as recorded: a fixed-seed run
    (3 silos of 90, 120, 120 records, 80 messages a silo drawn without replacement, sigma0 20, 3
    rounds) ends at the recorded iterate to 1e-5 relative: the draws are the same bits on any
    machine, but the float32 arithmetic on them may round differently on another CPU's
    instruction set (fused multiply-adds, vector widths), and a changed draw (sigma0 20) moves
    the iterate by far more. Negative control: the next seed ends elsewhere (the same compiled
    program)."""
    from jfed.methods import ShuffleMBSGD, build_experiment

    config = ShuffleMBSGD(rounds=PRIVATE_ROUNDS, batch=SHUFFLE_BATCH, epsilon=3.0)
    assert config.noise == "float"
    experiment = build_experiment(config, task=shuffled_silos)
    assert type(experiment.message_aggregator()) is silo_aggregators.ShuffledMessages
    hp = silo_sgd.hyperparams(3, step_size=1.0, noise_std=20.0, message_delta=1e-9,
                              shuffle_delta=1e-9)  # fmt: skip
    aggregator = silo_aggregators.ShuffledMessages(SHUFFLE_BATCH, 3 * SHUFFLE_BATCH)
    program = silo_sgd.ShuffleMBSGD(Loss("logistic"), 3, 3, SHUFFLE_BATCH, PRIVATE_ROUNDS,
                                    aggregator=aggregator)  # fmt: skip

    def final(seed: int) -> tuple:
        state, _ = simulate(program, shuffled_silos.train, hp, jax.random.key(seed),
                            PRIVATE_ROUNDS)  # fmt: skip
        return tuple(float(v) for v in np.asarray(state.w_average))

    assert final(0) == pytest.approx(FLOAT_SHUFFLE_ITERATE, rel=1e-5)
    assert final(1) != pytest.approx(FLOAT_SHUFFLE_ITERATE, rel=1e-5)
