"""The exact discrete samplers against their laws, and the integer pieces they rest on.

Statistical tests run at fixed seeds. A Bernoulli frequency is accepted within 5 standard
deviations of its probability (false alarm 6e-7 per check); a sample is accepted against a pmf
when Pearson's chi-square statistic (cells of expected count >= 20, the two tails pooled) stays
below the chi-square quantile at 1 - 1e-5 (the null law of the statistic). Every check comes with
a negative control that it rejects: a sampler run at a slightly wrong parameter.
"""

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jfed.privacy import discrete

SAMPLES = 100_000
BLOCK = 4_000  # the discrete Laplace sampler's draws per compiled call (see _in_blocks)


def _binomial_ok(successes: int, trials: int, probability: float) -> bool:
    spread = math.sqrt(trials * probability * (1 - probability))
    return abs(successes - trials * probability) <= 5 * max(spread, 1e-9)


def _chi_square_ok(samples: np.ndarray, log_pmf, reach: int = 5000) -> tuple[bool, float, float]:
    """(accepted, statistic, threshold) of Pearson's test of ``samples`` against ``log_pmf``
    (whose mass lies within ``+-reach``): one cell per value of expected count >= 20, and the
    two tails beyond them."""
    samples = np.asarray(samples, np.int64)
    n = samples.size
    support = np.arange(-reach, reach + 1)
    expected = n * np.exp(log_pmf(support))
    kept = support[expected >= 20]
    low, high = kept.min(), kept.max()
    inside = (support >= low) & (support <= high)
    counts = np.bincount(samples[(samples >= low) & (samples <= high)] - low,
                         minlength=high - low + 1)  # fmt: skip
    counts = np.concatenate([counts, [np.sum(samples < low), np.sum(samples > high)]])
    cells = np.concatenate([expected[inside], [expected[support < low].sum(),
                                               expected[support > high].sum()]])  # fmt: skip
    statistic = float(np.sum((counts - cells) ** 2 / cells))
    threshold = float(stats.chi2.ppf(1 - 1e-5, counts.size - 1))
    return statistic <= threshold, statistic, threshold


# ------------------------------------------------------------------------- integer pieces


def test_wide_products_and_sums_are_exact():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2**32, 1000, dtype=np.uint64)
    b = rng.integers(0, 2**32, 1000, dtype=np.uint64)
    a[:3], b[:3] = [2**32 - 1, 0, 65535], [2**32 - 1, 7, 65537]
    multiply = jax.jit(discrete.multiply_wide)
    high, low = multiply(jnp.asarray(a, jnp.uint32), jnp.asarray(b, jnp.uint32))
    got = [
        (int(h) << 32) + int(lo) for h, lo in zip(np.asarray(high), np.asarray(low), strict=True)
    ]
    assert got == [int(x) * int(y) for x, y in zip(a, b, strict=True)]
    values = rng.integers(2**31, 2**32, 200_000, dtype=np.uint64)  # the sum passes 2^47
    high, low = jax.jit(discrete.exact_sum)(jnp.asarray(values, jnp.uint32))
    assert (int(high) << 32) + int(low) == sum(int(v) for v in values)


def test_norm_checks_are_exact_at_the_bound():
    squared_at_most = jax.jit(discrete.squared_norm_at_most, static_argnums=1)
    absolute_at_most = jax.jit(discrete.absolute_sum_at_most, static_argnums=1)
    vector = jnp.asarray([70_000, -3, 0, 46_341, -1], jnp.int32)  # squares above 2^32
    squared = sum(int(v) ** 2 for v in np.asarray(vector))
    assert bool(squared_at_most(vector, squared))
    assert not bool(squared_at_most(vector, squared - 1))
    absolute = sum(abs(int(v)) for v in np.asarray(vector))
    assert bool(absolute_at_most(vector, absolute))
    assert not bool(absolute_at_most(vector, absolute - 1))
    big = jnp.full((300_000,), -40_000, jnp.int32)  # 4.8e14: the high words carry
    assert bool(squared_at_most(big, 300_000 * 40_000**2))
    assert not bool(squared_at_most(big, 300_000 * 40_000**2 - 1))


# ---------------------------------------------------------------------------- Bernoullis


@pytest.mark.parametrize(
    "numerator, denominator", [(1, 3), (2**31 - 5, 2**32 - 1), (0, 5), (7, 7), (9, 8)]
)
def test_bernoulli_fraction_frequency(numerator, denominator):
    draws = jax.jit(discrete.bernoulli_fraction)(
        jax.random.key(1),
        jnp.full(SAMPLES, numerator, jnp.uint32),
        jnp.full(SAMPLES, denominator, jnp.uint32),
    )
    probability = min(1.0, numerator / denominator)
    assert _binomial_ok(int(draws.sum()), SAMPLES, probability)
    # negative control: the frequency of a probability off by 1% of the trials' spread scale
    if 0 < probability < 1:
        assert not _binomial_ok(int(draws.sum()), SAMPLES, probability * 1.05)


def test_a_tied_word_continues_with_the_remainder():
    """The word 1431655765 ties for 1/3 (its product with 3 is 2^32 - 1): the verdict is then
    the next bits' Bernoulli((2^32 - low) / 3) = Bernoulli(1/3), drawn afresh per lane."""
    word = jnp.full(SAMPLES, 1431655765, jnp.uint32)
    ones, threes = jnp.ones(SAMPLES, jnp.uint32), jnp.full(SAMPLES, 3, jnp.uint32)
    below, tie, remainder = jax.jit(discrete._fraction_from_word)(word, ones, threes)
    assert bool(jnp.all(tie)) and not bool(jnp.any(below)) and bool(jnp.all(remainder == 1))
    draws = jax.jit(discrete._bernoulli_from_word)(jax.random.key(2), word, ones, threes)
    assert _binomial_ok(int(draws.sum()), SAMPLES, 1 / 3)
    assert not _binomial_ok(0, SAMPLES, 1 / 3)  # a tie read as "not below" would be caught


@pytest.mark.slow  # the discrete Gaussian's pmf test runs this acceptance step too
@pytest.mark.parametrize("numerator, denominator", [(0, 1), (1, 2), (1, 1), (5, 2), (7, 3)])
def test_bernoulli_exp_frequency(numerator, denominator):
    run = jax.jit(discrete.bernoulli_exp)
    draws = run(
        jax.random.key(3),
        jnp.full(SAMPLES, numerator, jnp.uint32),
        jnp.full(SAMPLES, denominator, jnp.uint32),
    )
    assert _binomial_ok(int(draws.sum()), SAMPLES, math.exp(-numerator / denominator))
    wrong = run(
        jax.random.key(3),
        jnp.full(SAMPLES, numerator + 1, jnp.uint32),
        jnp.full(SAMPLES, denominator, jnp.uint32),
    )
    assert not _binomial_ok(int(wrong.sum()), SAMPLES, math.exp(-numerator / denominator))


# ---------------------------------------------------------------------------- the samplers


def _in_blocks(draw, seed: int, *args) -> np.ndarray:
    """``SAMPLES`` draws: ``draw(key, *args) -> i32[BLOCK]`` on keys split from ``seed``. XLA
    compiles the discrete Laplace sampler over 4,000 lanes in a third of the CPU time of one over
    100,000 (1.2 s against 3.5 s, measured), and the 25 calls cost less than the difference (not
    so for the discrete Gaussian, whose calls then cost more: drawn at once)."""
    keys = jax.random.split(jax.random.key(seed), SAMPLES // BLOCK)
    return np.concatenate([np.asarray(draw(key, *args)) for key in keys])


@pytest.fixture(scope="module")
def gaussian_draws():
    return jax.jit(lambda key, k, m: discrete.discrete_gaussian(key, (SAMPLES,), k, m))


@pytest.mark.parametrize("bits, quotient", [(0, 1), (2, 3), (7, 79)])
def test_discrete_gaussian_matches_its_pmf(gaussian_draws, bits, quotient):
    sigma_squared = 2**bits * quotient
    samples = np.asarray(gaussian_draws(jax.random.key(bits), bits, quotient))

    def log_pmf(x):
        return discrete.discrete_gaussian_log_pmf(x, sigma_squared)

    accepted, statistic, threshold = _chi_square_ok(samples, log_pmf)
    assert accepted, (statistic, threshold)
    # negative control: a sampler at a 10% larger variance, tested against this pmf
    wider = np.asarray(gaussian_draws(jax.random.key(bits), bits, math.ceil(quotient * 1.1)))
    assert not _chi_square_ok(wider, log_pmf)[0]


def test_discrete_laplace_matches_its_pmf():
    bits, divisor = discrete.discrete_laplace_parameters(10.0)
    draw = jax.jit(lambda key, s: discrete.discrete_laplace(key, (BLOCK,), bits, s))
    scale = 2.0**bits / divisor
    assert 10.0 <= scale < 10.0 * (1 + 10.0 / 2**bits)

    def log_pmf(x):
        return discrete.discrete_laplace_log_pmf(x, scale)

    accepted, statistic, threshold = _chi_square_ok(_in_blocks(draw, 5, divisor), log_pmf)
    assert accepted, (statistic, threshold)
    wider = _in_blocks(draw, 5, discrete.discrete_laplace_parameters(11.0)[1])
    assert not _chi_square_ok(wider, log_pmf)[0]


def test_factorial_thresholds_read_a_word_as_the_exact_fraction_does():
    """A run at gamma = 1 is settled by comparing one word with 1 / j!: the same verdict and
    tie as :func:`discrete._fraction_from_word` gives, at and around each threshold."""
    for factorial in discrete._FACTORIALS:
        cut = 2**32 // factorial
        words = jnp.asarray([0, cut - 1, cut, cut + 1, 2**32 - 1], jnp.uint32)
        below, tie = discrete._factorial_threshold(words, factorial)
        expected = discrete._fraction_from_word(
            words, jnp.ones_like(words), jnp.full_like(words, factorial)
        )
        np.testing.assert_array_equal(below, expected[0])
        np.testing.assert_array_equal(tie, expected[1])
    assert not bool(discrete._factorial_threshold(jnp.uint32(2**31), 2)[1])  # 1/2: no tie


def test_fast_rounds_are_the_exact_rounds_where_no_word_ties():
    """The fast schedule reads a tied word as "not below" and says that it did; the exact one
    settles a tie with fresh bits. On the same words and with no tie they give the same draws
    (so the sampler, which reruns a block exactly where a tie was read, always has the exact
    law); 5,000 lanes run the compacted buffers too."""
    machine = discrete._Machine(7, 1, 79, gaussian=True)
    state = discrete._round_state((5000,))
    schedule = jax.jit(discrete._schedule, static_argnums=0)
    fast, tied = schedule(machine, jax.random.key(12), state, False)
    exact, _ = schedule(machine, jax.random.key(12), state, True)
    assert not bool(tied) and not bool(jnp.any(discrete._pending(fast)))
    np.testing.assert_array_equal(fast["value"], exact["value"])
    other, _ = schedule(machine, jax.random.key(13), state, False)  # the control: other words
    assert not np.array_equal(np.asarray(other["value"]), np.asarray(fast["value"]))


def test_a_substeps_ties_are_settled_as_each_sites_bernoulli_settles_them():
    """The exact round settles the ties of a substep's seven decisions together: each site's
    verdict is :func:`discrete._bernoulli_from_word`'s with the key folded with ``16 i +
    site``, tied words included (every word here is at its threshold's cell or beside it).
    Negative control: keys folded for another substep settle the ties differently."""
    key, sites = jax.random.key(3), len(discrete._SITES)
    threes = jnp.full((sites, 4000), 3, jnp.uint32)
    ones = jnp.ones_like(threes)
    cut = 2**32 // 3  # a word at cut reads 1/3 as tied
    words = jnp.broadcast_to(jnp.asarray([cut - 1, cut, cut + 1, cut] * 1000, jnp.uint32),
                             threes.shape)  # fmt: skip
    below, tie, following = discrete._fraction_from_word(words, ones, threes)
    assert bool(jnp.any(tie))

    def settled(offset):
        return np.asarray(jax.jit(discrete._settle_ties, static_argnums=1)(
            key, offset, following, threes, below, tie))  # fmt: skip

    one_by_one = np.stack([
        np.asarray(discrete._bernoulli_from_word(
            jax.random.fold_in(key, 16 + site), words[j], ones[j], threes[j]))
        for j, site in enumerate(discrete._SITES)
    ])  # fmt: skip
    np.testing.assert_array_equal(settled(16), one_by_one)
    assert not np.array_equal(settled(0)[np.asarray(tie)], one_by_one[np.asarray(tie)])


def test_samplers_trace_once_and_run_under_vmap():
    traces = []

    @jax.jit
    def shares(keys, bits, quotient):
        traces.append(1)
        return jax.vmap(lambda k: discrete.discrete_gaussian(k, (64,), bits, quotient))(keys)

    keys = jax.random.split(jax.random.key(6), 8)
    first = shares(keys, jnp.uint32(3), jnp.uint32(5))
    second = shares(keys, jnp.uint32(4), jnp.uint32(9))  # other parameters, no retrace
    assert first.shape == second.shape == (8, 64) and first.dtype == jnp.int32
    again = shares(keys, jnp.uint32(3), jnp.uint32(5))
    np.testing.assert_array_equal(first, again)  # keys fix every draw
    assert len(traces) == 1


# ------------------------------------------------------------------------ parameters, rounding


def test_gaussian_parameters_agree_on_host_and_device():
    rng = np.random.default_rng(7)
    edges = [1, 2, 3, 4, 7, 8, 2**31 - 2**16 - 1]
    variances = np.concatenate([edges, rng.integers(1, 2**31 - 2**16, 2000)]).astype(np.uint32)
    host_bits, host_quotient = discrete.discrete_gaussian_parameters(variances)
    device_bits, device_quotient = discrete.discrete_gaussian_parameters(jnp.asarray(variances))
    np.testing.assert_array_equal(host_bits, np.asarray(device_bits))
    np.testing.assert_array_equal(host_quotient, np.asarray(device_quotient))
    scale = 2 ** host_bits.astype(np.int64)
    product = scale * host_quotient.astype(np.int64)
    assert np.all(product >= variances) and np.all(product < variances.astype(np.int64) + scale)
    assert np.all(product < 2**31)
    sigma = np.sqrt(variances.astype(np.float64))
    assert np.all(scale > sigma / math.sqrt(2) - 1e-9) and np.all(scale <= sigma * math.sqrt(2))


def test_variance_at_least_covers_the_exact_product():
    rng = np.random.default_rng(8)
    multipliers = np.concatenate([rng.uniform(0.3, 5.0, 500), [1.0, 0.7, 1 / 3]])
    for bound in (1, 4097**2, 12_345_679):
        variance = jax.jit(discrete.variance_at_least, static_argnums=1)(multipliers, bound)
        for z, v in zip(multipliers, np.asarray(variance), strict=True):
            assert Fraction(int(v)) >= Fraction(float(z)) ** 2 * bound  # the float64 z itself


def test_randomized_rounding_is_unbiased_and_conditional_rounding_meets_its_bound():
    values = jnp.full((SAMPLES,), 2.3, jnp.float32)
    rounded = jax.jit(discrete.randomized_round)(jax.random.key(9), values)
    fraction = float(np.float32(2.3) - 2)
    assert set(np.unique(np.asarray(rounded))) == {2, 3}
    assert _binomial_ok(int(np.sum(np.asarray(rounded) == 3)), SAMPLES, fraction)
    assert not _binomial_ok(int(np.sum(np.asarray(rounded) == 3)), SAMPLES, 0.0)  # rounding down

    # the bound and the number of tries are static: one compile per bound
    conditional_round = jax.jit(discrete.conditional_round, static_argnums=(2, 3))
    x = jnp.asarray(np.random.default_rng(10).normal(size=1000) * 3, jnp.float32)
    bound = discrete.rounded_squared_norm_bound(float(jnp.linalg.norm(x)), 1000, math.exp(-0.5))
    for seed in range(5):
        vector, fell_back = conditional_round(jax.random.key(seed), x, bound, 10)
        assert int(np.sum(np.asarray(vector, np.int64) ** 2)) <= bound and float(fell_back) == 0
    # an impossible bound: after the tries, zeros, and the fallback is counted
    vector, fell_back = conditional_round(jax.random.key(0), x, 0, 10)
    assert not np.any(np.asarray(vector)) and float(fell_back) == 1.0
    assert discrete.rounded_squared_norm_bound(10.0, 100, 0.0) == 400  # (L + sqrt d)^2
    assert discrete.rounded_absolute_sum_bound(64, 1, 0.5) == 64  # one coordinate: ceil|x|
