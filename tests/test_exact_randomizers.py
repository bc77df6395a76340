"""Local randomizers exact at every eps: the two-point mechanism, randomized response and the
modulated map's Gaussian tails.

The two binary randomizers draw ``U < T / 2^64`` on a 64-bit uniform integer, so the probability
of each output is exactly ``T / 2^64``: the tests check the thresholds' arithmetic exactly (Python
integers, e^eps to 50 digits) at eps 20 and 30, where no sampling test could see probabilities of
2e-9 and 9e-14, and sample at moderate eps where one can. Each negative control is a copy of the
float32 sampler these replace (``uniform(f32) < p``), whose realised probabilities are
``ceil(p 2^23) / 2^23``: it fails the same checks.
"""

import math
from decimal import Decimal, getcontext

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jfed import _random
from jfed._random import normals_and_uniforms, private_normals_and_uniforms
from jfed.algorithms import modulated
from jfed.privacy import randomized_response, two_point
from jfed.privacy.accounting import Zcdp

getcontext().prec = 50
TWO_64 = 1 << 64
HIGH_EPSILONS = [20.0, 30.0]


def _exp(epsilon: float) -> Decimal:
    return Decimal(epsilon).exp()


def _unlikely(epsilon: float) -> Decimal:
    """``1 / (e^eps + 1)``, to 50 digits."""
    return 1 / (_exp(epsilon) + 1)


def _probability(threshold) -> Decimal:
    return Decimal(int(threshold)) / TWO_64


# ------------------------------------------------------------------ the float32 samplers replaced


def _reference_high_probability(w, center, radius, epsilon):
    """The former two-point probability, in float32."""
    e = jnp.exp(jnp.float32(epsilon))
    w = jnp.clip(w, center - radius, center + radius)
    return ((w - center) * (e - 1.0) + radius * (e + 1.0)) / (2.0 * radius * (e + 1.0))


def _reference_perturb(key, w, center, radius, epsilon):
    """The former two-point sampler: ``uniform(f32) < p``."""
    e = jnp.exp(jnp.float32(epsilon))
    spread = radius * (e + 1.0) / jnp.expm1(jnp.float32(epsilon))
    up = jax.random.uniform(key, jnp.shape(w)) < _reference_high_probability(
        w, center, radius, epsilon
    )
    return jnp.where(up, center + spread, center - spread)


def _reference_realised(probability) -> Decimal:
    """Exact probability of ``uniform(f32) < p``: the uniform is ``m 2^-23``, m < 2^23."""
    return Decimal(math.ceil(float(np.float32(probability)) * 2**23)) / 2**23


# ------------------------------------------------------------------------------------ two-point


def _two_point_thresholds(epsilon, inputs):
    thresholds = jax.jit(two_point.high_threshold)(
        jnp.asarray(inputs, jnp.float32), 0.0, 1.0, jnp.float32(epsilon)
    )
    return _random.threshold_value(thresholds)


@pytest.mark.parametrize("epsilon", [*HIGH_EPSILONS, 1.0, 5.0])
def test_two_point_probabilities_are_exact_and_never_exceed_e_eps(epsilon):
    """The unlikely output has probability 1/(e^eps + 1) to (16 + eps) 2^-21 relative (never
    less), at both range ends, and every input's probabilities lie within its bounds, so every
    ratio is at most e^eps, exactly. Negative control: the float32 sampler's realised
    probability of the unlikely output is 0 at eps 20 and 30."""
    inputs = np.concatenate([[-1.0, 1.0], np.linspace(-1.0, 1.0, 101), [-0.9999999, 0.9999999]])
    thresholds = _two_point_thresholds(epsilon, inputs)
    unlikely = _unlikely(epsilon)
    # the log-domain margin (twice, for the f32 error it covers) and the rounding up of G
    tolerance = Decimal(2 * (16 + epsilon) * 2.0**-21) + 1 / (unlikely * TWO_64)
    high_at_low_end = _probability(thresholds[0])
    low_at_high_end = 1 - _probability(thresholds[1])
    for probability in (high_at_low_end, low_at_high_end):
        assert unlikely <= probability <= unlikely * (1 + tolerance)
    smallest, largest = min(thresholds), max(thresholds)
    assert Decimal(largest) / Decimal(smallest) <= _exp(epsilon)
    assert Decimal(TWO_64 - smallest) / Decimal(TWO_64 - largest) <= _exp(epsilon)
    # inside the range the probability is the formula's, to the documented f32 accuracy
    # (the log-domain constant alone is half an ulp of 44.4, 2^-19, before exp)
    middle = _probability(thresholds[2 + 50])
    assert abs(middle - Decimal("0.5")) < Decimal((64 + epsilon) * 2.0**-21)

    reference = _reference_realised(_reference_high_probability(-1.0, 0.0, 1.0, epsilon))
    if epsilon in HIGH_EPSILONS:
        assert reference == 0  # reported with probability 0: no bound on the ratio
    else:
        assert reference > 0


def test_two_point_reports_the_high_point_exactly_below_the_threshold():
    """The decision is ``U < T``: words just below the threshold report the high point, the
    threshold itself the low one (eps 30, w at the low end: T ~ 1.7e6). The float32 sampler
    never reports the high point there, whatever its word."""
    epsilon = 30.0
    threshold = jax.jit(two_point.high_threshold)(jnp.float32(-1.0), 0.0, 1.0, epsilon)
    high, low = int(threshold[0]), int(threshold[1])
    assert high == 0 and low > 0
    below = (jnp.uint32(high), jnp.uint32(low - 1))
    at = (jnp.uint32(high), jnp.uint32(low))
    report = jax.jit(two_point.perturb_with_words)
    # the points as this backend computes them (exactly -+1 on the CPU; a GPU's exp and expm1
    # gave 1 - 2^-24)
    low_point, high_point = map(float, jax.jit(two_point.output_points)(0.0, 1.0, epsilon))
    on_cpu = jax.default_backend() == "cpu"
    assert high_point == (1.0 if on_cpu else pytest.approx(1.0, abs=1e-6))
    assert low_point == -high_point
    assert float(report(below, jnp.float32(-1.0), 0.0, 1.0, epsilon)) == high_point
    assert float(report(at, jnp.float32(-1.0), 0.0, 1.0, epsilon)) == low_point
    draws = _reference_perturb(jax.random.key(0), jnp.full(1_000_000, -1.0), 0.0, 1.0, epsilon)
    assert float(jnp.max(draws)) < 0


def test_two_point_frequency_matches_at_moderate_eps():
    """At eps 2 the high point's frequency at the low end is 1/(e^2 + 1) within 5 binomial
    standard errors (2^20 draws, fixed key); at the high end, its complement. Negative control:
    the frequency of the eps-1 mechanism is rejected."""
    n, epsilon = 2**20, 2.0
    p = 1.0 / (math.exp(epsilon) + 1.0)
    draws = jax.jit(two_point.perturb)(jax.random.key(7), jnp.full(n, -1.0), 0.0, 1.0, epsilon)
    frequency = float(jnp.mean(draws > 0))
    standard_error = math.sqrt(p * (1 - p) / n)
    assert abs(frequency - p) < 5 * standard_error
    assert abs(frequency - 1.0 / (math.e + 1.0)) > 5 * standard_error
    high_end = jax.jit(two_point.perturb)(jax.random.key(8), jnp.full(n, 1.0), 0.0, 1.0, epsilon)
    assert abs(float(jnp.mean(high_end < 0)) - p) < 5 * standard_error


def test_two_point_draws_are_unchanged_at_moderate_eps():
    """The high word is the float32 sampler's: a million draws at eps 1.3 equal the former
    sampler's (they may differ only when the uniform falls in the one 2^-23 cell holding p)."""
    w = jnp.linspace(-0.2, 0.2, 1_000_000)
    key = jax.random.key(5)
    new = np.asarray(two_point.perturb(key, w, 0.0, 0.2, 1.3))
    old = np.asarray(_reference_perturb(key, w, 0.0, 0.2, 1.3))
    # the points agree; the decisions differ only in p's cell, a draw in 2^23: none on the CPU
    # with this key, one in 10^6 on a GPU (whose transcendentals move p by an ulp), never in bulk
    high = old.max()
    np.testing.assert_allclose(np.abs(new), high, rtol=1e-6)
    allowed = 0 if jax.default_backend() == "cpu" else 3
    assert np.sum(np.sign(new) != np.sign(old)) <= allowed


def test_two_point_is_finite_at_huge_eps():
    """At eps 1e6 the points are c -+ r and the unlikely output keeps probability 2^-64
    (the former sampler returned NaN: (e^eps + 1)/(e^eps - 1) = inf/inf)."""
    draws = two_point.perturb(jax.random.key(0), jnp.array([-1.0, 0.5, 1.0]), 0.0, 1.0, 1e6)
    assert np.all(np.abs(np.asarray(draws)) == 1.0)
    thresholds = _two_point_thresholds(1e6, [-1.0, 1.0])
    assert thresholds[0] >= 1 and TWO_64 - thresholds[1] >= 1
    assert np.isnan(float(_reference_perturb(jax.random.key(0), jnp.float32(0.5), 0.0, 1.0, 1e6)))
    assert two_point.variance(0.0, 0.0, 1.0, 1e6) == 1.0


# -------------------------------------------------------------------------- randomized response


@pytest.mark.parametrize("epsilon", [*HIGH_EPSILONS, 0.5, 5.0])
def test_randomized_response_flip_is_exact_at_every_eps(epsilon):
    """Flip probability ``G / 2^64`` in ``[1/(e^eps+1), (1 + tol)/(e^eps+1)]``, so the ratio
    ``(1 - G/2^64) / (G/2^64) <= e^eps``. Negative control: the float32 sampler
    ``uniform < e^eps/(e^eps+1)`` flips with realised probability 0 at eps 20 and 30."""
    flip = _probability(_random.threshold_value(jax.jit(randomized_response.flip_threshold)(
        jnp.float32(epsilon))))  # fmt: skip
    unlikely = _unlikely(epsilon)
    tolerance = Decimal(2 * (16 + epsilon) * 2.0**-21) + 1 / (unlikely * TWO_64)
    assert unlikely <= flip <= unlikely * (1 + tolerance)
    assert (1 - flip) / flip <= _exp(epsilon)
    truthful = randomized_response.truthful_probability(epsilon)
    reference_flip = 1 - _reference_realised(truthful)
    if epsilon in HIGH_EPSILONS:
        assert reference_flip == 0
    else:
        assert reference_flip > 0


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 7.0, 12.0, 15.0, 16.5, 17.0, 20.0, 30.0, 1e6])
def test_randomized_response_from_float32_truthful_never_exceeds_e_eps(epsilon):
    """The estimation search holds only the f32 ``truthful``: its flip probability is at least
    1/(e^eps + 1) (ratio <= e^eps) and at most 3 2^-25 above it (the margin 2^-24 over the
    rounding of ``truthful``, at most 2^-25 either way). Negative control: the float32
    sampler's realised flip probability falls below 1/(e^eps + 1) at some of these eps."""
    truthful = np.float32(randomized_response.truthful_probability(epsilon))
    flip = _probability(_random.threshold_value(
        jax.jit(randomized_response.flip_threshold_from_truthful)(truthful)))  # fmt: skip
    unlikely = _unlikely(epsilon)
    assert unlikely <= flip <= unlikely + Decimal(3 * 2.0**-25)
    if epsilon in (12.0, 15.0, 20.0, 30.0, 1e6):
        assert 1 - _reference_realised(truthful) < unlikely


def test_randomized_response_frequency_and_unchanged_draws():
    """At eps 1 the flip frequency is 1/(e + 1) within 5 binomial standard errors (2^20 keys)
    and, from the f32 truthful, the decisions equal the former ``uniform(key) < truthful`` for
    every key. Negative control: the frequency of eps 1.2 is rejected."""
    n, epsilon = 2**20, 1.0
    keys = jax.random.split(jax.random.key(11), n)
    bits = jnp.zeros(n, bool)
    reports = jax.jit(jax.vmap(randomized_response.respond, in_axes=(0, 0, None)))(
        keys, bits, epsilon
    )
    p = 1.0 / (math.exp(epsilon) + 1.0)
    standard_error = math.sqrt(p * (1 - p) / n)
    assert abs(float(jnp.mean(reports)) - p) < 5 * standard_error
    assert abs(float(jnp.mean(reports)) - 1.0 / (math.exp(1.2) + 1.0)) > 5 * standard_error
    truthful = jnp.float32(randomized_response.truthful_probability(epsilon))
    kept = jax.jit(jax.vmap(randomized_response.keeps_true_bit_given_truthful, (0, None)))(
        keys, truthful
    )
    former = jax.jit(jax.vmap(lambda k: jax.random.uniform(k) < truthful))(keys)
    assert np.array_equal(np.asarray(kept), np.asarray(former))


# ------------------------------------------------------------------- the modulated map's noise


def _extreme_cell_words(n, seed, last):
    """Words whose uniform lies in the first (or last) 2^-23 cell, and random refinements."""
    rng = np.random.default_rng(seed)
    unused = rng.integers(0, 512, n, dtype=np.uint32)
    words = unused + (np.uint32(_random._LAST_CELL) << np.uint32(9) if last else np.uint32(0))
    refinements = rng.integers(0, 2**32, n, np.uint64).astype(np.uint32)
    return jnp.asarray(words, jnp.uint32), jnp.asarray(refinements)


@pytest.mark.parametrize("last", [False, True])
def test_private_normals_follow_the_gaussian_tail_inside_the_extreme_cells(last):
    """Inside the uniform's first (last) 2^-23 cell the draw is the normal conditioned on that
    cell: ``Phi(x) 2^23`` (``Phi(-x) 2^23``) is uniform on (0, 1) (KS at level 1e-4, 200000
    draws). Negative control: the former sampler maps the whole cell to one value (-5.42 or
    5.17), which the same test rejects."""
    words, refinements = _extreme_cell_words(200_000, 3 if last else 4, last)
    draws = np.asarray(jax.jit(_random._normals_with_tails)(words, refinements), np.float64)
    tail = stats.norm.sf(draws) if last else stats.norm.cdf(draws)
    assert stats.kstest(tail * 2**23, "uniform").pvalue > 1e-4
    unit = _random._unit_uniform(words)
    former = np.sqrt(2) * np.asarray(
        jax.lax.erf_inv(jnp.maximum(_random._LOWEST_OPEN, 2.0 * unit - 1.0)), np.float64
    )
    assert np.ptp(former) == 0.0
    former_tail = stats.norm.sf(former) if last else stats.norm.cdf(former)
    assert stats.kstest(former_tail * 2**23, "uniform").pvalue < 1e-4
    # 200000 draws of the cell reach about the quantile of 2^-23 / 200000 (7.1); the cell's
    # deepest word (all refinement bits 0, or 1) reaches the quantile of 2^-65, 9.155
    assert stats.norm.isf(2.0**-23 * 20 / 200_000) < np.max(np.abs(draws)) <= 9.16
    corner = jnp.asarray([words[0] & ~jnp.uint32(0x1FF) | (jnp.uint32(0x1FF) if last else 0)])
    deepest = jax.jit(_random._normals_with_tails)(
        corner, jnp.asarray([0xFFFFFFFF if last else 0], jnp.uint32)
    )
    assert abs(float(deepest[0])) == pytest.approx(stats.norm.isf(2.0**-65), abs=1e-3)
    assert np.max(np.abs(former)) < 5.43


def test_private_normals_equal_the_former_draws_outside_the_extreme_cells():
    key = jax.random.key(2)
    normals, uniforms = private_normals_and_uniforms(key, 100_000, 10)
    former_normals, former_uniforms = normals_and_uniforms(key, 100_000, 10)
    assert np.array_equal(np.asarray(uniforms), np.asarray(former_uniforms))
    assert np.array_equal(np.asarray(normals), np.asarray(former_normals))


def _map_statement(epsilon: float, delta: float, rounds: int):
    """``(guarantee, shift)`` of ``rounds`` messages of the default map calibrated to (eps,
    delta) under zCDP, as a run states it (:func:`modulated.reach_statement`)."""
    from dp_accounting import GaussianDpEvent

    from jfed.privacy import certify, rounds_of

    sensitivity = modulated.sensitivity(1.0, 0.5, 1.0, 1, 3.0)
    multiplier = modulated.calibrated_noise_std(epsilon, delta, rounds, sensitivity) / sensitivity
    guarantee = certify(rounds_of(GaussianDpEvent(multiplier), rounds), delta, accountant=Zcdp(),
                        adjacency="bounded", notion="local (eps, delta)-DP via zCDP",
                        protected="x", trust_model="t")  # fmt: skip
    return modulated.reach_statement(guarantee, multiplier, rounds, Zcdp()), 1.0 / multiplier


@pytest.mark.parametrize("rounds", [1, 10])
def test_modulated_statement_labels_eps_beyond_the_noise_reach(rounds):
    """Up to the largest eps whose messages stay within the float32 normals' reach but for 0.1%
    of delta the guarantee is stated plainly; above it (the paper's grid reaches eps 100) the
    notion says it is the ideal Gaussian's, not certified for the sampler, and names that eps;
    ``check_noise_reach`` refuses it for code that wants only what the sampler proves. Negative
    control: at that largest eps the former reach (5.17 standard deviations) would put a message
    out of reach with probability above delta itself."""
    delta = 1e-5
    largest = modulated.largest_reachable_epsilon(delta, rounds, Zcdp())
    accepted, shift = _map_statement(largest, delta, rounds)
    assert modulated.out_of_reach_probability(shift, rounds) <= 1e-3 * delta
    assert "not certified" not in accepted.notion
    beyond, beyond_shift = _map_statement(largest * 1.01, delta, rounds)
    assert "of the ideal real-valued Gaussian, not certified for the float32 sampler" in (
        beyond.notion
    )
    assert f"certified up to eps {largest:.4g}" in beyond.notion
    with pytest.raises(ValueError, match=f"expected epsilon <= {largest:.4g}"):
        modulated.check_noise_reach(beyond_shift, largest * 1.01, delta, rounds, Zcdp())
    former = min(1.0, rounds * stats.norm.sf(5.17 - shift))
    assert former > delta
    assert "not certified" not in _map_statement(10.0, delta, 1)[0].notion


def test_a_run_states_the_reach_in_its_record():
    """A modulated run at eps 100 (beyond the reach) says so in its record's notion."""
    from jfed.data import load_regression
    from jfed.methods import ModulatedOneShot, build_experiment

    config = ModulatedOneShot(dataset="fair", epsilon=100.0)
    experiment = build_experiment(config, task=load_regression("fair"))
    _, fields = experiment.calibrated(config)
    assert "not certified for the float32 sampler" in fields["notion"]
    _, fields = experiment.calibrated(config.replace(epsilon=5.0))
    assert "not certified" not in fields["notion"]


@pytest.mark.parametrize("with_extreme", [False, True])
def test_tails_computed_only_when_drawn_equal_the_eager_tails(with_extreme):
    """The private normals compute their tails only when some word of the (vmapped) batch fell in
    an extreme cell: the numbers equal the eager kernel's, vmapped or not, with or without such a
    word in the batch. Negative control: a batch with an extreme word differs from the bare
    normals exactly there."""
    words = jax.random.bits(jax.random.key(8), (64, 10), jnp.uint32)
    refinements = jax.random.bits(jax.random.key(9), (64, 10), jnp.uint32)
    if with_extreme:
        words = words.at[17, 3].set(jnp.uint32(5)).at[40, 0].set(jnp.uint32(0xFFFFFFF0))
    eager = np.asarray(jax.jit(_random._normals_with_tails)(words, refinements))
    lazy = _random._private_normals_from_words
    assert np.array_equal(np.asarray(jax.jit(jax.vmap(lazy))(words, refinements)), eager)
    assert np.array_equal(np.asarray(jax.jit(lazy)(words, refinements)), eager)
    assert np.array_equal(np.asarray(jax.vmap(jax.vmap(lazy))(words, refinements)), eager)
    bare = np.asarray(_random.normals_from_words(words))
    differs = eager != bare
    if with_extreme:
        assert differs[17, 3] and differs[40, 0] and differs.sum() == 2
        assert eager[17, 3] < -5.5 and eager[40, 0] > 5.5
    else:
        assert not differs.any()


def test_the_tail_quantile_is_ndtri_in_the_tails():
    """``_lower_tail_quantile`` against ``jax.scipy.special.ndtri`` on 10^5 probabilities spread
    log-uniformly over (2^-65, 2^-23] and the cell edges: identical floats."""
    rng = np.random.default_rng(0)
    p = np.exp(rng.uniform(-65 * np.log(2), -23 * np.log(2), 100_000))
    p = np.concatenate([p, [2.0**-23, 2.0**-65, np.exp(-32.0)]]).astype(np.float32)
    reference = np.asarray(jax.jit(jax.scipy.special.ndtri)(p))
    ours = np.asarray(jax.jit(_random._lower_tail_quantile)(p))
    assert np.array_equal(ours, reference)
    assert reference.min() < -9.1 and reference.max() < -5.1
