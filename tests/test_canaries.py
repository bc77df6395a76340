"""Canary clients and the audits built on them (jfed.privacy.canaries, jfed.privacy.canary_audit).

The mechanism audited is one Gaussian release of a sum over clients, simulated in d = 10,000
dimensions: M canaries, each sending ``C u_i`` when included, a fixed background (the real
clients' clipped sum) and N(0, (z C)^2 I) noise. One canary's add-or-remove changes the sum by
at most C, so the release is (eps(z), delta)-DP for every canary, eps(z) the analytic Gaussian
eps (dp-accounting's ``get_epsilon_gaussian``, an independent reference). The broken mechanism
adds z / 10 of noise while claiming eps(z). Seeds are fixed.
"""

from __future__ import annotations

import functools
import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, special, stats

from jfed import random as jfed_random
from jfed._validation import UsageError
from jfed.privacy import canaries, canary_audit
from jfed.privacy.privatizers import tree_norm

TEMPLATE = {
    "w": jax.ShapeDtypeStruct((100, 80), jnp.float32),
    "b": jax.ShapeDtypeStruct((2000,), jnp.float32),
}
DIMENSION = 10_000
CLIP = 1.0
DELTA = 1e-5
NOISE = 2.0  # z: claimed eps(2.0) = 1.99 at delta 1e-5
REAL_CLIENTS = 100  # the background: as many real clients' clipped updates (norm C each)


def claimed_epsilon(noise_multiplier: float = NOISE) -> float:
    return dp_accounting.get_epsilon_gaussian(noise_multiplier, DELTA)


@functools.partial(jax.jit, static_argnames=("count",))
def gaussian_release(key, count, noise_multiplier, included):
    """One release: sum of the included canaries' updates, the real clients' sum, Gaussian noise
    of std ``noise_multiplier * C`` (flat ``f32[d]``, leaves joined in order)."""
    audit_key, noise_key, real_key = jax.random.split(key, 3)
    updates = jax.vmap(lambda i: canaries.canary_update(audit_key, i, TEMPLATE, CLIP))(
        jnp.arange(count)
    )
    weights = included.astype(jnp.float32)
    summed = jax.tree.map(lambda leaf: jnp.tensordot(weights, leaf, 1), updates)
    flat = jnp.concatenate([jnp.ravel(leaf) for leaf in jax.tree_util.tree_leaves(summed)])
    real = jfed_random.normal(real_key, (DIMENSION,))
    real = real / jnp.linalg.norm(real) * math.sqrt(REAL_CLIENTS) * CLIP
    noise = noise_multiplier * CLIP * jfed_random.normal(noise_key, (DIMENSION,))
    return flat + real + noise, audit_key


def as_tree(flat):
    return canaries._unflatten(flat, TEMPLATE)


# ------------------------------------------------------------------------------- canaries


def test_direction_is_unit_fixed_by_key_and_id_and_update_has_the_clip_norm():
    key = jax.random.key(3)
    first = jax.jit(lambda i: canaries.canary_direction(key, i, TEMPLATE))(7)
    assert jax.tree.map(jnp.shape, first) == {"w": (100, 80), "b": (2000,)}
    np.testing.assert_allclose(float(tree_norm(first)), 1.0, rtol=1e-6)
    batched = jax.jit(jax.vmap(lambda i: canaries.canary_direction(key, i, TEMPLATE)))(
        jnp.arange(9)
    )
    for leaf, rows in zip(*map(jax.tree_util.tree_leaves, (first, batched)), strict=True):
        np.testing.assert_allclose(leaf, rows[7], rtol=1e-6, atol=1e-9)  # same draws
    # two directions in d = 10^4 are nearly orthogonal: cosine sd 0.01, 5 sd
    flat = jax.vmap(canaries._flatten)(batched)
    assert abs(float(jnp.vdot(flat[7], flat[8]))) < 0.05
    update = jax.jit(lambda c: canaries.canary_update(key, 7, TEMPLATE, c))(jnp.float32(2.5))
    np.testing.assert_allclose(float(tree_norm(update)), 2.5, rtol=1e-6)


def test_inclusion_is_a_fair_coin_of_its_own_key():
    key = jax.random.key(0)
    count = 20_000
    bits = np.asarray(canaries.canaries_included(key, count))
    # binomial(20,000, 1/2): sd of the fraction 0.0035; 4 sd
    assert abs(bits.mean() - 0.5) < 4 * 0.5 / math.sqrt(count)
    assert bool(canaries.canary_included(key, 123)) == bits[123]
    # the bits are not a function of the directions' stream (a shared key would correlate them)
    signs = np.asarray(
        jax.jit(jax.vmap(lambda i: canaries._flat_direction(key, i, 4)[0] > 0))(jnp.arange(count))
    )
    assert abs(np.corrcoef(bits, signs)[0, 1]) < 4 / math.sqrt(count)


def test_scores_do_not_depend_on_batching_and_unseen_cosines_follow_the_null_law():
    key = jax.random.key(5)
    released = as_tree(jax.random.normal(jax.random.key(9), (DIMENSION,)))
    ids = jnp.arange(1000)  # as many as the audits below score: their programs compile once
    products = canaries.inner_products(key, ids, released)
    one_by_one = jax.jit(jax.vmap(
        lambda i: jnp.vdot(canaries._flat_direction(key, i, DIMENSION), canaries._flatten(released))
    ))(ids[:40])  # fmt: skip
    np.testing.assert_allclose(products[:40], one_by_one, rtol=1e-5, atol=1e-6)
    cosine = np.asarray(canaries.cosines(key, ids, released), np.float64)
    np.testing.assert_allclose(cosine, products / float(tree_norm(released)), rtol=1e-5)
    # directions independent of the release: cosines ~ N(0, 1/d); mean se 1/sqrt(d k), std se
    # about std / sqrt(2 k); 4 se each
    null_std = canary_audit.null_cosine_std(DIMENSION)
    assert abs(cosine.mean()) < 4 * null_std / math.sqrt(ids.size)
    assert abs(cosine.std(ddof=1) / null_std - 1) < 4 / math.sqrt(2 * ids.size)
    zero = jax.tree.map(jnp.zeros_like, released)
    assert not np.any(np.asarray(canaries.cosines(key, ids, zero)))


def test_scores_over_rounds_sum_inner_products_and_keep_the_largest_cosine():
    key = jax.random.key(2)
    ids = jnp.arange(1000)
    rounds = [as_tree(jax.random.normal(jax.random.key(t), (DIMENSION,))) for t in range(3)]
    scores = canaries.init_scores(ids.size)
    for released in rounds:
        scores = canaries.update_scores(scores, key, ids, released)
    total = jax.tree.map(lambda *leaves: sum(leaves), *rounds)
    np.testing.assert_allclose(
        scores.inner_product_sum, canaries.inner_products(key, ids, total), rtol=1e-4, atol=1e-4
    )
    per_round = np.stack([canaries.cosines(key, ids, r) for r in rounds])
    np.testing.assert_allclose(scores.max_cosine, per_round.max(0), rtol=1e-5, atol=1e-8)
    assert int(scores.rounds) == 3


def test_template_must_hold_float_leaves():
    with pytest.raises(ValueError, match="float leaves"):
        canaries.canary_direction(jax.random.key(0), 0, {"n": jnp.zeros(3, jnp.int32)})
    with pytest.raises(ValueError, match="at least one"):
        canaries.parameter_count({})


# ------------------------------------------------------------------------------ estimators


@pytest.mark.parametrize("noise_multiplier", [0.5, 1.0, 3.0])
def test_two_gaussians_epsilon_equal_stds_is_the_gaussian_mechanisms(noise_multiplier):
    expected = dp_accounting.get_epsilon_gaussian(noise_multiplier, DELTA)
    found = canary_audit.two_gaussians_epsilon(0.0, noise_multiplier, 1.0, noise_multiplier, DELTA)
    np.testing.assert_allclose(found, expected, rtol=1e-9)
    # the unequal-variance branch, a hair away, agrees (it never calls the closed form)
    near = canary_audit.two_gaussians_epsilon(
        0.0, noise_multiplier, 1.0, noise_multiplier * (1 + 1e-9), DELTA
    )
    np.testing.assert_allclose(near, expected, rtol=1e-6)


def _quadrature_delta(epsilon, first, second):
    """max over both orders of the integral of (p - e^eps q)^+ (scipy quad, the reference)."""
    low = min(m - 40 * s for m, s in (first, second))
    high = max(m + 40 * s for m, s in (first, second))
    points = np.linspace(low, high, 50)

    def one(p, q):
        def excess(y):
            return max(0.0, stats.norm.pdf(y, *p) - math.exp(epsilon) * stats.norm.pdf(y, *q))

        return integrate.quad(excess, low, high, points=points, limit=500, epsabs=1e-15)[0]

    return max(one(first, second), one(second, first))


@pytest.mark.parametrize(("seed", "delta"), [(0, 1e-2), (1, 1e-5), (2, 1e-2)])
def test_two_gaussians_epsilon_unequal_stds_against_quadrature(seed, delta):
    rng = np.random.default_rng(seed)
    mean_0, std_0, mean_1, std_1 = rng.uniform(0.0, 3.0, 4) + np.array([0.0, 0.3, 0.0, 0.3])
    epsilon = canary_audit.two_gaussians_epsilon(mean_0, std_0, mean_1, std_1, delta)
    found = _quadrature_delta(epsilon, (mean_0, std_0), (mean_1, std_1))
    np.testing.assert_allclose(found, delta, rtol=1e-6)
    # negative control: 1% less eps leaves more than delta
    assert _quadrature_delta(0.99 * epsilon, (mean_0, std_0), (mean_1, std_1)) > 1.001 * delta


def test_guess_numbers_are_a_fixed_geometric_grid():
    numbers = canary_audit.guess_numbers(1000)
    assert numbers[0] == 1 and numbers[-1] == 1000 and numbers.size == 20
    assert np.all(np.diff(numbers) > 0)


ONE_RUN_CANARIES = 1000


def _one_run(noise_multiplier, seed=0):
    key = jax.random.key(seed)
    inclusion_key, release_key = jax.random.split(key)
    included = canaries.canaries_included(inclusion_key, ONE_RUN_CANARIES)
    released, audit_key = gaussian_release(
        release_key, ONE_RUN_CANARIES, noise_multiplier, included
    )
    scores = canaries.inner_products(audit_key, jnp.arange(ONE_RUN_CANARIES), as_tree(released))
    return canary_audit.one_run_lower_bound(scores, included, DELTA, confidence=0.95)


def test_one_run_bound_stays_below_a_correct_release_and_refutes_a_broken_one():
    """The correct release (z = 2) is (1.99, 1e-5)-DP per canary: Steinke et al.'s theorem puts
    the bound below 1.99 with probability 0.95 whatever the seed. The broken one (z = 0.2,
    true eps 33) separates the included canaries' scores (1 + N(0, 0.2^2 + 0.06)) from the
    excluded ones' (N(0, ...)) by 3.6 sd: nearly every top guess is right, which refutes eps up
    to 3.9 with 1,000 canaries, twice the claim."""
    claim = claimed_epsilon()
    correct = _one_run(NOISE)
    assert correct.confidence == 0.95 and correct.canaries == ONE_RUN_CANARIES
    assert 0.0 <= correct.epsilon < claim
    broken = _one_run(NOISE / 10)
    assert broken.epsilon > claim
    assert broken.to_fields()["audit_epsilon_lower"] == broken.epsilon


def test_one_run_bound_holds_at_its_confidence_for_randomized_response():
    """The tightest pure eps-DP release per canary: randomized response (each canary's bit kept
    with probability e^eps / (1 + e^eps)), scored with an independent jitter. Over 100 seeded
    audits of 500 canaries the bound may exceed eps = 1 in at most 5% of them (3 binomial sd
    allowance: 11.5%); it did in 2%. Negative control: the best number of guesses taken at the
    full significance (no Bonferroni share) exceeds eps in 20% of the same audits."""
    from jax_privacy import auditing

    epsilon, count, runs = 1.0, 500, 100
    allowed = 0.05 + 3 * math.sqrt(0.05 * 0.95 / runs)
    rng = np.random.default_rng(0)
    valid, uncorrected = [], []
    for _ in range(runs):
        included = rng.random(count) < 0.5
        truthful = rng.random(count) < special.expit(epsilon)
        scores = np.where(truthful, included, ~included) + 0.5 * rng.random(count)
        valid.append(canary_audit.one_run_lower_bound(scores, included, DELTA, 0.95).epsilon)
        auditor = auditing.CanaryScoreAuditor(scores[included], scores[~included])
        descending = np.sort(scores)[::-1]
        uncorrected.append(max(
            auditor.epsilon_one_run(0.05, DELTA, threshold_strategy=auditing.Explicit(
                float(descending[guesses - 1])))
            for guesses in canary_audit.guess_numbers(count)
        ))  # fmt: skip
    assert np.mean(np.array(valid) > epsilon) <= allowed
    assert np.mean(np.array(uncorrected) > epsilon) > allowed


ONE_SHOT_CANARIES = 1000


def _one_shot(noise_multiplier, seed=1):
    release_key = jax.random.key(seed)
    everyone = jnp.ones(ONE_SHOT_CANARIES, bool)
    released, audit_key = gaussian_release(
        release_key, ONE_SHOT_CANARIES, noise_multiplier, everyone
    )
    observed = canaries.cosines(audit_key, jnp.arange(ONE_SHOT_CANARIES), as_tree(released))
    unobserved = canaries.cosines(  # directions never inserted: ids beyond the canaries'
        audit_key, jnp.arange(ONE_SHOT_CANARIES, 2 * ONE_SHOT_CANARIES), as_tree(released)
    )
    summary = canary_audit.one_shot_estimate(observed, DELTA, dimension=DIMENSION)
    # cosines back in units of C: what the law below speaks of
    inner = np.asarray(observed, np.float64) * float(jnp.linalg.norm(released)) / CLIP
    return summary, observed, unobserved, inner


def _one_shot_band(noise_multiplier, sds=4.0):
    """The estimate's expected value and its range over the box of ``sds`` standard errors of
    the fitted mean and sd (its extremes lie at the box's corners), from the law of
    the cosines: in units of ||release|| / C, an included canary's inner product is 1 + N(0,
    z^2 + (M - 1 + B) / d) (noise, the other canaries, the background of B clients) and the null
    law N(0, 1/d) is N(0, z^2 + (M + B) / d); the fitted mean and sd have standard errors
    sd / sqrt(M) and sd / sqrt(2 M)."""
    spread = math.sqrt(noise_multiplier**2 + (ONE_SHOT_CANARIES - 1 + REAL_CLIENTS) / DIMENSION)
    null = math.sqrt(noise_multiplier**2 + (ONE_SHOT_CANARIES + REAL_CLIENTS) / DIMENSION)
    mean_se, sd_se = (
        spread / math.sqrt(ONE_SHOT_CANARIES),
        spread / math.sqrt(2 * ONE_SHOT_CANARIES),
    )

    def estimate(mean, sd):
        return canary_audit.two_gaussians_epsilon(0.0, null, mean, sd, DELTA)

    corners = [
        estimate(1.0 + i * sds * mean_se, spread + j * sds * sd_se)
        for i in (-1, 0, 1)
        for j in (-1, 0, 1)
    ]
    return estimate(1.0, spread), min(corners), max(corners)


def test_one_shot_estimate_finds_a_correct_releases_eps_and_a_broken_ones():
    claim = claimed_epsilon()
    correct, observed, unobserved, inner = _one_shot(NOISE)
    # the fitted law itself, 4 standard errors: mean 1, sd sqrt(z^2 + (M - 1 + B) / d)
    spread = math.sqrt(NOISE**2 + (ONE_SHOT_CANARIES - 1 + REAL_CLIENTS) / DIMENSION)
    assert abs(inner.mean() - 1.0) < 4 * spread / math.sqrt(ONE_SHOT_CANARIES)
    assert abs(inner.std(ddof=1) / spread - 1.0) < 4 / math.sqrt(2 * ONE_SHOT_CANARIES)
    # the estimate: at delta = 1e-5 it is steep in the fitted sd (a variance mismatch makes the
    # privacy loss quadratic), hence a wide band: [1.41, 4.72] around 1.96
    expected, low, high = _one_shot_band(NOISE)
    assert correct.confidence is None and correct.canaries == ONE_SHOT_CANARIES
    assert low <= correct.epsilon <= high
    # the law's expectation sits 2% below the truth (the canaries and background add variance)
    assert abs(expected - claim) < 0.03 * claim
    fields = correct.to_fields()
    assert fields["audit_epsilon_lower"] is None and fields["audit_epsilon_estimate"] > 0
    broken, *_ = _one_shot(NOISE / 10)
    _, low_broken, high_broken = _one_shot_band(NOISE / 10)
    assert low_broken <= broken.epsilon <= high_broken
    assert broken.epsilon > 3 * claim
    # the same cosines against an empirical null (directions never inserted) agree
    empirical = canary_audit.one_shot_estimate(observed, DELTA, unobserved=unobserved)
    assert abs(empirical.epsilon - correct.epsilon) < high - low


def test_estimators_reject_bad_input():
    scores, included = np.arange(4.0), np.array([True, False, True, False])
    with pytest.raises(UsageError, match="included and excluded"):
        canary_audit.one_run_lower_bound(scores, np.ones(4, bool), DELTA)
    with pytest.raises(UsageError, match="shape"):
        canary_audit.one_run_lower_bound(scores, included[:3], DELTA)
    with pytest.raises(UsageError, match="confidence"):
        canary_audit.one_run_lower_bound(scores, included, DELTA, confidence=1.0)
    with pytest.raises(UsageError, match="finite"):
        canary_audit.one_run_lower_bound([0.0, np.nan], [True, False], DELTA)
    with pytest.raises(UsageError, match="exactly one"):
        canary_audit.one_shot_estimate(scores, DELTA)
    with pytest.raises(UsageError, match="dimension >= 1000"):
        canary_audit.one_shot_estimate(scores, DELTA, dimension=500)
    with pytest.raises(UsageError, match="delta"):
        canary_audit.two_gaussians_epsilon(0.0, 1.0, 1.0, 2.0, 0.0)


@pytest.mark.parametrize(("confidence", "brief"), [
    (0.95, "audit eps >= 0.412 (95% one-run bound, 400 canaries)"),
    (None, "audit eps ~ 0.412 (one-run estimate, 400 canaries)"),
])  # fmt: skip
def test_a_records_audit_reads_back_and_reads_briefly(confidence, brief):
    """A record's audit fields give back the audit they were written from, and its part of the
    summary line says bound or estimate; a record without them has no audit."""
    audit = canary_audit.AuditSummary(0.4123, 1e-5, canary_audit.ONE_RUN, 400, confidence)
    assert canary_audit.AuditSummary.from_record(audit.to_fields()) == audit
    assert audit.brief() == brief
    assert canary_audit.AuditSummary.from_record({"epsilon_certified": 1.0}) is None
