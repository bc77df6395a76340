"""Correlated noise (jfed.privacy.correlated): the noise the compiled round draws has the
mechanism's covariance, and the certified eps matches an independent computation.

References for the matrices are built here from jax-privacy (the BLT's and banded strategy's
Toeplitz matrices, inverted densely) or from first principles (the tree's dyadic blocks, and
Honaker's estimator as the least-squares decoder of the completed nodes); sensitivities from
jax-privacy's functions and by brute force over every participation pattern; eps from
dp-accounting's own accountants. Statistical tests run at a fixed seed with a threshold from the
known variance, each with a negative control that the same test rejects.
"""

from __future__ import annotations

import functools
import itertools
import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_privacy.experimental import accounting as jp_accounting
from jax_privacy.matrix_factorization import buffered_toeplitz, sensitivity, toeplitz
from scipy import stats

from jfed._validation import UsageError
from jfed.privacy.accounting import Pld, Rdp, certify, spent
from jfed.privacy.correlated import (
    BandedNoise,
    BltNoise,
    ClippedContribution,
    CorrelatedGaussianSum,
    CorrelatedGaussianSumParams,
    IndependentNoise,
    TreeNoise,
    noise_matrix,
)
from jfed.privacy.participation import Participation, gram_sensitivity

ACCEPT = 1e-3  # a correct generator fails a test at this level once in a thousand seeds
REJECT = 1e-6  # a negative control must be this far out
ROUNDS = 16
DIM = 2**15  # coordinates: independent samples of the R-round noise vector
BLT = BltNoise(buf_decay=(0.95, 0.6, 0.15), output_scale=(0.12, 0.2, 0.25))
BANDED = BandedNoise(tuple(np.asarray(toeplitz.optimal_max_error_strategy_coefs(4))))


def prefix_matrix(rounds: int) -> np.ndarray:
    return np.tril(np.ones((rounds, rounds)))


def toeplitz_decoder(strategy_matrix: np.ndarray) -> np.ndarray:
    """B = A C^{-1} for a square strategy, inverted densely in float64."""
    return prefix_matrix(len(strategy_matrix)) @ np.linalg.inv(strategy_matrix)


def blt_matrix(noise: BltNoise, rounds: int) -> np.ndarray:
    with jax.enable_x64():
        return np.asarray(noise.as_jax_privacy().materialize(rounds), np.float64)


def banded_matrix(noise: BandedNoise, rounds: int) -> np.ndarray:
    with jax.enable_x64():
        coefficients = jnp.asarray(noise.coefficients, jnp.float64)
        return np.asarray(toeplitz.materialize_lower_triangular(coefficients, rounds))


def tree_reference(per_tree: int, rounds: int, honaker: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(C, B)`` of a tree restarted every ``per_tree`` rounds, from first principles.

    C's rows are the nodes a run draws, in draw order: with Honaker every dyadic interval
    ``[a, a + 2^l)`` of a tree (``a`` a multiple of ``2^l``) when it completes, lowest level
    first; without, only the intervals that are a block of some prefix (``a`` a multiple of
    ``2^(l+1)``). B's row t: without Honaker, the indicator of the dyadic blocks of the prefix
    in t's tree plus every earlier tree's full prefix; with Honaker, the least-squares (BLUE)
    decoder of the prefix from every node completed by round t, computed by a linear solve.
    """
    nodes = []
    for t in range(rounds):
        base, tau = t - t % per_tree, t % per_tree
        for level in range(per_tree.bit_length()):
            start = tau + 1 - 2**level
            if start < 0 or start % 2**level:
                continue
            if honaker or start % 2 ** (level + 1) == 0:
                nodes.append((t, base + start, 2**level))
    strategy = np.zeros((len(nodes), rounds))
    for row, (_, start, length) in enumerate(nodes):
        strategy[row, start : start + length] = 1.0
    decoder = np.zeros((rounds, len(nodes)))
    for t in range(rounds):
        done = [row for row, (end, _, _) in enumerate(nodes) if end <= t]
        if honaker:
            completed = strategy[done][:, : t + 1]
            decoder[t, done] = completed @ np.linalg.solve(completed.T @ completed, np.ones(t + 1))
        else:  # dyadic blocks of [base, t], and the last prefix of every earlier tree
            covered = set()
            for end in [e for e in range(per_tree - 1, t, per_tree)] + [t]:
                base = end - end % per_tree
                position = base
                while position <= end:
                    length = 2 ** ((end - position + 1).bit_length() - 1)
                    covered.add((position, length))
                    position += length
            for row, (_, start, length) in enumerate(nodes):
                decoder[t, row] = float((start, length) in covered)
    return strategy, decoder


def released_prefix_noise(
    aggregator: CorrelatedGaussianSum, params, key: jax.Array, rounds: int = ROUNDS
) -> np.ndarray:
    """``f64[R, DIM]``: the running sums of R jitted releases of a zero sum (pure noise)."""
    released = release_rounds(aggregator, rounds, DIM)(params, key)
    return np.cumsum(np.asarray(released, np.float64), axis=0)


@functools.cache
def release_rounds(aggregator: CorrelatedGaussianSum, rounds: int, dim: int):
    """A jitted ``(params, key) -> f32[R, dim]``: R releases of a zero sum, release t keyed by
    ``fold_in(key, t)`` (one compile per aggregator and shape)."""
    template = jnp.zeros(dim, jnp.float32)
    summed = ClippedContribution(template, jnp.float32(0.0))

    @jax.jit
    def run(params, key):
        def round_(state, t):
            released, state, _ = aggregator.release(
                params, state, summed, jax.random.fold_in(key, t)
            )
            return state, released

        return jax.lax.scan(round_, aggregator.init(params, template), jnp.arange(rounds))[1]

    return run


def covariance_p_value(samples: np.ndarray, covariance: np.ndarray) -> float:
    """p-value of ``samples: [R, N]`` (N independent columns) being N(0, covariance).

    The columns are whitened by the Cholesky factor L of the covariance; under the null the
    empirical second moments S = W W^T / N have mean I and variance 1 / N off the diagonal, 2 / N
    on it (Gaussian fourth moments), the means W / N variance 1 / N: each entry's z-score, the
    largest one Bonferroni-corrected over the R (R + 3) / 2 entries.
    """
    rounds, count = samples.shape
    whitened = np.linalg.solve(np.linalg.cholesky(covariance), samples)
    second = whitened @ whitened.T / count
    variance = np.where(np.eye(rounds, dtype=bool), 2.0, 1.0) / count
    upper = np.triu_indices(rounds)
    scores = np.concatenate([
        ((second - np.eye(rounds)) / np.sqrt(variance))[upper],
        whitened.mean(axis=1) * math.sqrt(count),
    ])  # fmt: skip
    tail = 2 * stats.norm.sf(np.abs(scores).max())
    return float(min(1.0, tail * len(scores)))


PARAMS = CorrelatedGaussianSumParams(clip_norm=0.5, noise_multiplier=2.0)
PARTICIPATION = Participation(rounds=ROUNDS, max_participations=4, min_separation=4, period=4)


# ------------------------------------------------------------------- the streamed linear maps


@pytest.mark.parametrize(
    ("noise", "reference"),
    [
        (BLT, lambda r: toeplitz_decoder(blt_matrix(BLT, r))),
        (BANDED, lambda r: toeplitz_decoder(banded_matrix(BANDED, r))),
        (IndependentNoise(), prefix_matrix),
        (TreeNoise(8), lambda r: tree_reference(8, r, honaker=True)[1]),
        (TreeNoise(8, honaker=False), lambda r: tree_reference(8, r, honaker=False)[1]),
        (TreeNoise(5), lambda r: tree_reference(5, r, honaker=True)[1]),
        (TreeNoise(6, honaker=False), lambda r: tree_reference(6, r, honaker=False)[1]),
    ],
    ids=["blt", "banded", "independent", "tree", "plain-tree", "tree-5", "plain-tree-6"],
)
def test_streamed_noise_is_the_mechanisms_decoder(noise, reference):
    """The device recursion, run on unit draws, is B = A C^{-1} (Toeplitz) or the tree's
    decoder built independently; and B C = A."""
    rounds = 13
    decoder = np.cumsum(noise_matrix(noise, rounds), axis=0)
    np.testing.assert_allclose(decoder, reference(rounds), atol=1e-10)
    np.testing.assert_allclose(decoder @ noise.strategy_matrix(rounds), prefix_matrix(rounds),
                               atol=1e-10)  # fmt: skip


def test_tree_strategy_matches_first_principles():
    for per_tree, honaker in [(8, True), (5, True), (6, False)]:
        expected, _ = tree_reference(per_tree, 13, honaker)
        noise = TreeNoise(per_tree, honaker)
        np.testing.assert_array_equal(noise.strategy_matrix(13), expected)
        np.testing.assert_array_equal(noise.gram(13), expected.T @ expected)


def test_honaker_reduces_the_prefix_variance():
    """Honaker's estimator never adds variance, and halves it at the end of a 2^k tree."""
    plain = np.cumsum(noise_matrix(TreeNoise(64, honaker=False), 64), axis=0)
    honaker = np.cumsum(noise_matrix(TreeNoise(64), 64), axis=0)
    plain_var, honaker_var = (plain**2).sum(1), (honaker**2).sum(1)
    assert np.all(honaker_var <= plain_var + 1e-12)
    assert honaker_var[-1] < 0.6 * plain_var[-1]


# ------------------------------------------------------------ what the compiled round draws


def _blt_decoder(noise: BltNoise):
    return lambda rounds: toeplitz_decoder(blt_matrix(noise, rounds))


def _banded_decoder(noise: BandedNoise):
    return lambda rounds: toeplitz_decoder(banded_matrix(noise, rounds))


def _tree_decoder(per_tree: int, honaker: bool = True):
    return lambda rounds: tree_reference(per_tree, rounds, honaker)[1]


SLOWER_DECAY = BltNoise(buf_decay=(0.9, 0.6, 0.15), output_scale=BLT.output_scale)
DIAGONAL = BandedNoise((1.0,))


@pytest.mark.parametrize(
    ("noise", "decoder", "wrongs"),
    [
        (
            BLT,
            _blt_decoder(BLT),
            [(IndependentNoise(), prefix_matrix), (SLOWER_DECAY, _blt_decoder(SLOWER_DECAY))],
        ),
        (BANDED, _banded_decoder(BANDED), [(DIAGONAL, _banded_decoder(DIAGONAL))]),
        (TreeNoise(8), _tree_decoder(8), [(TreeNoise(8, honaker=False), _tree_decoder(8, False))]),
    ],
    ids=["blt", "banded", "tree"],
)  # fmt: skip
def test_released_prefix_noise_has_the_mechanisms_covariance(noise, decoder, wrongs):
    """The running sums of R jitted releases of a zero sum are N(0, sigma^2 B B^T), B from the
    reference matrices. Negative controls: the same draws against a wrong mechanism's law
    (independent noise, the BLT with one buffer's decay 5% off, a diagonal band, the tree
    without Honaker's estimator), each at its own calibrated sigma, are rejected by the same
    test. The statistic whitens the draws, so the roles are symmetric: draws of law A whitened
    by law B's covariance give the inverse of the matrix that B's draws whitened by A's give
    (the wrong mechanisms' own draws, compiled, were rejected as far: p < 1e-49)."""
    key = jax.random.key(20240)
    aggregator = CorrelatedGaussianSum(noise, PARTICIPATION)
    decoder_matrix = decoder(ROUNDS)
    expected = aggregator.noise_std(PARAMS) ** 2 * decoder_matrix @ decoder_matrix.T
    samples = released_prefix_noise(aggregator, PARAMS, key)
    assert covariance_p_value(samples, expected) > ACCEPT
    for wrong, wrong_decoder in wrongs:
        sigma = CorrelatedGaussianSum(wrong, PARTICIPATION).noise_std(PARAMS)
        wrong_matrix = wrong_decoder(ROUNDS)
        assert covariance_p_value(samples, sigma**2 * wrong_matrix @ wrong_matrix.T) < REJECT


def test_draws_are_exactly_the_decoder_applied_to_keyed_normals():
    """Round t's fresh draw j is gaussian_noise_tree(fold_in(key_t, j)); the increments are
    sigma M z exactly (to float32 rounding), so every draw is reproducible from the keys."""
    from jfed.privacy.privatizers import gaussian_noise_tree

    noise, rounds = TreeNoise(8), ROUNDS
    aggregator = CorrelatedGaussianSum(noise, PARTICIPATION)  # compiled for the covariance test
    key, template = jax.random.key(7), jnp.zeros(DIM, jnp.float32)
    released = np.asarray(release_rounds(aggregator, rounds, DIM)(PARAMS, key), np.float64)
    unit_normals = jax.jit(lambda key: gaussian_noise_tree(key, template, 1.0))
    fresh = [
        np.asarray(unit_normals(jax.random.fold_in(jax.random.fold_in(key, t), j)), np.float64)
        for t in range(rounds)
        for j in range(noise.draws(t))
    ]
    expected = aggregator.noise_std(PARAMS) * noise_matrix(noise, rounds) @ np.stack(fresh)
    np.testing.assert_allclose(released, expected, rtol=1e-5, atol=1e-5)


def test_a_trees_audit_view_is_the_rounds_own_leaf():
    """Canaries are scored against a tree's own leaf node of their round (``audit_view``): the
    round's clipped sum plus the leaf's fresh draw, draw 0 of the release, exactly (a row of the
    certified strategy: one draw's noise where the increment carries several). Negative control:
    it is not draw 1. Strategies without a single-round node (plain tree, BLT, banded,
    independent, whose increment already is one) give ``None``."""
    from jfed.privacy.privatizers import gaussian_noise_tree

    aggregator = CorrelatedGaussianSum(TreeNoise(8), PARTICIPATION)
    template = jnp.zeros(64, jnp.float32)
    summed = ClippedContribution(jnp.arange(64, dtype=jnp.float32), jnp.float32(0.0))
    state, key = aggregator.init(PARAMS, template), jax.random.key(11)
    std = aggregator.noise_std(PARAMS)
    for t in range(4):  # rounds with 1, 2, 1 and 3 fresh draws
        release_key = jax.random.fold_in(key, t)
        view = aggregator.audit_view(PARAMS, state, summed, release_key)
        leaf = gaussian_noise_tree(jax.random.fold_in(release_key, 0), template, 1.0)
        np.testing.assert_allclose(view, summed.update + std * leaf, rtol=1e-6, atol=1e-5)
        other = gaussian_noise_tree(jax.random.fold_in(release_key, 1), template, 1.0)
        assert not np.allclose(view, summed.update + std * other)
        _, state, _ = aggregator.release(PARAMS, state, summed, release_key)
    for noise in (TreeNoise(8, honaker=False), BLT, BANDED, IndependentNoise()):
        other_aggregator = CorrelatedGaussianSum(noise, PARTICIPATION)
        other_state = other_aggregator.init(PARAMS, template)
        assert other_aggregator.audit_view(PARAMS, other_state, summed, key) is None


def test_noise_scales_exactly_with_the_noise_multiplier():
    """Same keys, noise multiplier s and 1: exactly s times the noise (float32 rounding)."""
    aggregator = CorrelatedGaussianSum(BLT, PARTICIPATION)
    key = jax.random.key(3)
    one = released_prefix_noise(aggregator, PARAMS._replace(noise_multiplier=1.0), key)
    three = released_prefix_noise(aggregator, PARAMS._replace(noise_multiplier=3.0), key)
    np.testing.assert_allclose(three, 3.0 * one, rtol=1e-5, atol=1e-4)
    again = released_prefix_noise(aggregator, PARAMS._replace(noise_multiplier=1.0), key)
    np.testing.assert_array_equal(one, again)


SMALL = CorrelatedGaussianSum(BLT, Participation(2, 1, 2))
"""A BLT of two rounds over a two-leaf model: the release tests below share its one program."""


@functools.cache
def small_release():
    """``SMALL.release`` jitted (``_cache_size`` counts its compiled programs)."""
    return jax.jit(SMALL.release)


def test_release_adds_the_clipped_sum_and_reports_its_diagnostics():
    params = CorrelatedGaussianSumParams(clip_norm=1.0, noise_multiplier=0.0)
    updates = {"w": jnp.array([[3.0, 4.0], [0.3, 0.4]]), "b": jnp.array([[0.0], [0.0]])}
    state = SMALL.init(params, jax.tree.map(lambda x: x[0], updates))
    key = jax.random.key(0)
    preprocess = jax.jit(jax.vmap(lambda u: SMALL.preprocess(params, state, u, key)))
    summed = jax.tree.map(lambda x: x.sum(0), preprocess(updates))
    release = small_release()
    released, state, diagnostics = release(params, state, summed, key)
    np.testing.assert_allclose(released["w"], [0.6 + 0.3, 0.8 + 0.4], rtol=1e-6)
    assert float(diagnostics["clipped_count"]) == 1.0
    assert float(diagnostics["past_horizon"]) == 0.0
    for _ in range(2):
        _, state, diagnostics = release(params, state, summed, key)
    assert float(diagnostics["past_horizon"]) == 1.0


def test_one_compile_serves_every_noise_multiplier():
    template = {"w": jnp.zeros(2), "b": jnp.zeros(1)}
    summed = ClippedContribution(template, jnp.float32(0.0))
    state = SMALL.init(PARAMS, template)
    release = small_release()
    for z in (0.5, 1.0, 4.0):
        _, state, _ = release(PARAMS._replace(noise_multiplier=z), state, summed,
                              jax.random.key(1))  # fmt: skip
    assert release._cache_size() == 1


# -------------------------------------------------------------------------- sensitivities


def brute_force_sensitivity(gram: np.ndarray, allowed) -> float:
    """max over every participation set p that ``allowed(p)`` admits of sum_{i,j in p} |X_ij|."""
    rounds, best = len(gram), 0.0
    absolute = np.abs(gram)
    for size in range(1, rounds + 1):
        for chosen in itertools.combinations(range(rounds), size):
            if allowed(chosen):
                best = max(best, absolute[np.ix_(chosen, chosen)].sum())
    return math.sqrt(best)


def min_separated(b: int, k: int):
    return lambda p: len(p) <= k and all(j - i >= b for i, j in itertools.pairwise(p))


def one_per_epoch(epoch: int):
    return lambda p: len({i // epoch for i in p}) == len(p)


@pytest.mark.parametrize(
    ("noise", "b", "k"),
    [(BLT, 3, 4), (BLT, 1, 3), (BANDED, 4, 3), (BANDED, 2, 5), (IndependentNoise(), 2, 3)],
)
def test_toeplitz_sensitivity_is_exact_under_min_separation(noise, b, k):
    rounds = 10
    participation = Participation(rounds, k, b)
    exact = brute_force_sensitivity(noise.gram(rounds), min_separated(b, k))
    assert noise.sensitivity(participation) == pytest.approx(exact, rel=1e-9)
    with jax.enable_x64():  # jax-privacy's upper bound, on the dense strategy matrix
        dense = float(sensitivity.get_min_sep_sensitivity_upper_bound(
            jnp.asarray(noise.strategy_matrix(rounds)), b, k))  # fmt: skip
    assert noise.sensitivity(participation) <= dense + 1e-9


def test_banded_sensitivity_matches_jax_privacy_when_bands_fit_the_separation():
    participation = Participation(16, 3, 4)
    with jax.enable_x64():
        expected = sensitivity.get_sensitivity_banded(
            jnp.asarray(banded_matrix(BANDED, 16)), min_sep=4, max_participations=3
        )
    assert BANDED.sensitivity(participation) == pytest.approx(float(expected), rel=1e-9)


def test_blt_single_participation_sensitivity_matches_the_closed_form():
    """jax-privacy's closed form (arXiv:2404.16706, Lemma 5.3) against jfed's route."""
    with jax.enable_x64():
        closed = float(buffered_toeplitz.sensitivity_squared(BLT.as_jax_privacy(), 500))
    assert BLT.sensitivity(Participation(500, 1, 500)) ** 2 == pytest.approx(closed, rel=1e-9)


@pytest.mark.parametrize("per_tree", [4, 8, 5])
def test_tree_sensitivity_bounds_every_pattern(per_tree):
    rounds, gram = 10, TreeNoise(per_tree).gram(10)
    for b, k in [(1, 3), (3, 4), (4, 3), (10, 1)]:
        bound = TreeNoise(per_tree).sensitivity(Participation(rounds, k, b))
        assert bound >= brute_force_sensitivity(gram, min_separated(b, k)) - 1e-9


def test_tree_once_per_tree_is_k_times_the_depth():
    """A client once per tree: sens^2 = k (floor(log2 T) + 1) (Kairouz et al. 2021, App. D),
    from the dense bound and from the closed form used beyond DENSE_LIMIT rounds."""
    cyclic = Participation(64, 4, 16, period=16)
    assert TreeNoise(16).sensitivity(cyclic) ** 2 == pytest.approx(4 * 5)
    long = Participation(8192, 8, 1024, period=1024)
    assert TreeNoise(1024).sensitivity(long) ** 2 == pytest.approx(8 * 11)
    with pytest.raises(UsageError, match="one participation per tree"):
        TreeNoise(1024).sensitivity(Participation(8192, 16, 512))


def test_epoch_and_period_bounds_hold_and_tighten():
    rounds = 12
    for noise in (BLT, TreeNoise(6), BANDED):
        gram = noise.gram(rounds)
        epochs = Participation(rounds, 3, 1, epoch_length=4)
        exact = brute_force_sensitivity(gram, one_per_epoch(4))
        assert exact - 1e-9 <= gram_sensitivity(gram, epochs)
        assert gram_sensitivity(gram, epochs) <= gram_sensitivity(gram, Participation(12, 3, 1))
        assert noise.sensitivity(epochs) <= gram_sensitivity(gram, epochs) + 1e-9
        cyclic = Participation(rounds, 3, 4, period=4)
        exact = brute_force_sensitivity(gram, lambda p: len({i % 4 for i in p}) == 1)
        assert gram_sensitivity(gram, cyclic) == pytest.approx(exact, rel=1e-9)


def test_participation_rejects_bad_patterns():
    with pytest.raises(UsageError, match="min_separation >= period"):
        Participation(10, 2, 2, period=5)
    with pytest.raises(UsageError, match="max_participations"):
        Participation(10, 0, 1)
    assert Participation(10, 9, 4).participations == 3
    assert Participation(10, 9, 1, epoch_length=5).participations == 2
    with pytest.raises(UsageError, match="spectral radius"):
        BltNoise(buf_decay=(1.5,), output_scale=(0.1,))
    with pytest.raises(UsageError, match="coefficients"):
        BandedNoise((0.0, 1.0))


# ------------------------------------------------------------------------------ accounting


@pytest.mark.parametrize("accountant", [Pld(discretization=1e-3), Rdp()], ids=["pld", "rdp"])
def test_certified_epsilon_matches_dp_accounting(accountant):
    """The run composed from its R per-release shares, certified by jfed, against
    dp-accounting's own accountant on one Gaussian of the sensitivity computed here (brute
    force over every min-separated pattern) and the noise the aggregator draws."""
    rounds, b, k, delta = 10, 3, 4, 1e-6
    participation = Participation(rounds, k, b)
    aggregator = CorrelatedGaussianSum(BLT, participation)
    params = CorrelatedGaussianSumParams(clip_norm=2.0, noise_multiplier=0.8)
    strategy = blt_matrix(BLT, rounds)
    reference_sensitivity = brute_force_sensitivity(strategy.T @ strategy, min_separated(b, k))
    multiplier = aggregator.noise_std(params) / (params.clip_norm * reference_sensitivity)
    if isinstance(accountant, Pld):
        independent = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
    else:
        independent = dp_accounting.rdp.RdpAccountant()
    expected = independent.compose(dp_accounting.GaussianDpEvent(multiplier)).get_epsilon(delta)
    shares = dp_accounting.ComposedDpEvent([aggregator.event(params)] * rounds)
    guarantee = certify(shares, delta, accountant=accountant, notion="central (eps, delta)-DP",
                        protected="one client's updates in every round it takes part in",
                        trust_model="trusted server adds the correlated noise")  # fmt: skip
    assert guarantee.epsilon == pytest.approx(expected, rel=2e-3)
    assert spent(aggregator.run_event(params), delta, accountant=accountant) == pytest.approx(
        expected, rel=2e-3
    )


def test_tree_epsilon_matches_dp_accountings_tree_event_and_the_papers_table():
    """Kairouz et al. 2021's StackOverflow setting (T = 1600 rounds, one participation, node
    noise multiplier 1.13 and 8.83, delta = 1e-6): dp-accounting's tree-aggregation RDP and the
    paper's eps (below 19.74 and 2.04), against jfed's tree at the equivalent noise."""
    orders = [1 + x / 10 for x in range(1, 100)] + list(range(12, 64))
    aggregator = CorrelatedGaussianSum(TreeNoise(1600), Participation(1600, 1, 1600))
    assert aggregator.sensitivity**2 == pytest.approx(11.0)  # ceil(log2(1601))
    for node_multiplier, paper_epsilon in [(1.13, 19.74), (8.83, 2.04)]:
        params = CorrelatedGaussianSumParams(1.0, node_multiplier / aggregator.sensitivity)
        assert aggregator.noise_std(params) == pytest.approx(node_multiplier)
        reference = dp_accounting.rdp.RdpAccountant(
            orders, dp_accounting.NeighboringRelation.REPLACE_SPECIAL
        )
        reference.compose(dp_accounting.SingleEpochTreeAggregationDpEvent(node_multiplier, 1600))
        jfed_rdp = dp_accounting.rdp.RdpAccountant(orders).compose(aggregator.run_event(params))
        assert jfed_rdp.get_epsilon(1e-6) == pytest.approx(reference.get_epsilon(1e-6), rel=1e-9)
        assert jfed_rdp.get_epsilon(1e-6) < paper_epsilon


def test_banded_epsilon_matches_jax_privacys_bandmf_event():
    """Unit-norm banded coefficients under cyclic participation (b bands, b groups): jax-privacy's
    BandMF event without amplification (sampling probability 1) at its noise multiplier."""
    rounds, bands, delta = 48, 4, 1e-6
    coefficients = np.asarray(toeplitz.optimal_max_error_strategy_coefs(bands), np.float64)
    noise = BandedNoise(tuple(coefficients / np.linalg.norm(coefficients)))
    participation = Participation(rounds, rounds // bands, bands, period=bands)
    aggregator = CorrelatedGaussianSum(noise, participation)
    params = CorrelatedGaussianSumParams(1.0, 0.7)
    jax_privacy_multiplier = aggregator.noise_std(params)  # max column norm 1
    event = jp_accounting.amplified_bandmf_event(
        jax_privacy_multiplier, rounds, num_bands=bands, sampling_prob=1.0
    )
    expected = (
        dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
        .compose(event)
        .get_epsilon(delta)
    )
    assert spent(aggregator.run_event(params), delta) == pytest.approx(expected, rel=2e-3)


def test_calibration_meets_the_target():
    aggregator = CorrelatedGaussianSum(BLT, PARTICIPATION)
    params = aggregator.calibrate(epsilon=2.0, delta=1e-6, clip_norm=0.5)
    assert params.clip_norm == 0.5
    epsilon = spent(aggregator.run_event(params), 1e-6)
    assert 2.0 - 1e-3 < epsilon <= 2.0 + 1e-9
    guarantee = aggregator.guarantee(params, 1e-6)
    assert guarantee.epsilon == pytest.approx(epsilon)
    assert "add-or-remove" in guarantee.notion and guarantee.accountant == "pld"
    assert "4 participations, 4 or more rounds apart" in guarantee.protected
    independent = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    z = params.noise_multiplier
    assert independent.compose(dp_accounting.GaussianDpEvent(z)).get_epsilon(1e-6) <= 2.0 + 1e-3


def test_independent_releases_compose_over_the_participations_only():
    participation = Participation(rounds=100, max_participations=10, min_separation=10)
    event = participation.independent_releases_event(dp_accounting.GaussianDpEvent(3.0))
    expected = spent(dp_accounting.GaussianDpEvent(3.0 / math.sqrt(10)), 1e-6, accountant=Rdp())
    assert spent(event, 1e-6, accountant=Rdp()) == pytest.approx(expected, rel=1e-9)
    # the correlated aggregator with independent noise is the same mechanism
    aggregator = CorrelatedGaussianSum(IndependentNoise(), participation)
    params = CorrelatedGaussianSumParams(1.0, 3.0 / math.sqrt(10))
    assert aggregator.noise_std(params) == pytest.approx(3.0)
    assert spent(aggregator.run_event(params), 1e-6, accountant=Rdp()) == pytest.approx(
        expected, rel=1e-9
    )


def test_noise_per_round_is_reported_from_the_matrices():
    aggregator = CorrelatedGaussianSum(TreeNoise(8), Participation(8, 1, 8))
    params = CorrelatedGaussianSumParams(1.0, 1.0)
    prefix = aggregator.prefix_noise_std(params)
    _, decoder = tree_reference(8, 8, honaker=True)
    sigma = aggregator.noise_std(params)
    np.testing.assert_allclose(prefix, sigma * np.linalg.norm(decoder, axis=1), rtol=1e-9)
    assert aggregator.increment_noise_std(params)[0] == pytest.approx(sigma)


@pytest.mark.slow
def test_optimized_strategies_from_jax_privacy():
    """jax-privacy's optimized BLT and banded strategies for a (R, b, k) pattern (host
    optimization, seconds): better than independent noise on the last prefix, and the BLT's
    sensitivity is jax-privacy's own for its coefficients."""
    participation = Participation(16, 4, 4)
    blt = BltNoise.optimized(participation, max_buffers=2, max_optimizer_steps=100)
    banded = BandedNoise.optimized(participation, steps=30)
    assert banded.bands == 4
    with jax.enable_x64():
        blt_squared = toeplitz.minsep_sensitivity_squared(
            jnp.asarray(blt.toeplitz_coefficients(16)), 4, 4
        )
    assert blt.sensitivity(participation) ** 2 == pytest.approx(float(blt_squared), rel=1e-9)
    params = CorrelatedGaussianSumParams(1.0, 1.0)
    independent = CorrelatedGaussianSum(IndependentNoise(), participation)
    for noise in (blt, banded):
        aggregator = CorrelatedGaussianSum(noise, participation)
        assert aggregator.prefix_noise_std(params)[-1] < independent.prefix_noise_std(params)[-1]
