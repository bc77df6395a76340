"""Privatizers over pytrees and the one accountant interface, against independent references.

Clipping bounds the norm (and the unclipped trees would break the bound); noise is exactly linear
in its scale and has the stated standard deviation (and 1.5 times the scale is rejected);
certify equals dp-accounting composed by hand; calibrate round-trips (and 0.9 times its noise
overspends); the Gaussian sum query runs under jit and vmap and states its event.
"""

import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting.privacy_accountant import NeighboringRelation

from jfed import privacy
from jfed.privacy import gaussian, zcdp
from jfed.privacy.accounting import (
    Pld,
    Rdp,
    Zcdp,
    calibrate,
    certify,
    fixed_cohort_rounds_event,
    poisson_rounds_event,
)
from jfed.privacy.aggregators import GaussianSum, GaussianSumParams
from jfed.privacy.privatizers import (
    LocalRandomizer,
    clip_tree,
    clip_tree_per_layer,
    gaussian_noise_tree,
    tree_norm,
)

LABELS = {"notion": "central (eps, delta)-DP", "protected": "one client", "trust_model": "server"}
DELTA = 1e-5


def _random_tree(rng: np.random.Generator) -> dict:
    """1 to 4 leaves of random shapes (scalars included) and scales from 1e-3 to 1e2."""
    leaves = [  # few distinct shapes, so eager JAX compiles its small kernels a few times only
        (rng.standard_normal(tuple(rng.integers(1, 4, size=rng.integers(0, 3))))
         * 10.0 ** rng.uniform(-3, 2)).astype(np.float32)
        for _ in range(rng.integers(1, 5))
    ]  # fmt: skip
    return {"first": leaves[0], "rest": [{"w": leaf} for leaf in leaves[1:]]}


def _norm(x) -> float:
    return float(np.sqrt(np.sum(np.square(np.asarray(x, np.float64)))))


def _flat_norm(tree) -> float:
    return _norm(np.concatenate([np.ravel(leaf) for leaf in jax.tree.leaves(tree)]))


@pytest.mark.parametrize("per_layer", [False, True])
def test_clipping_bounds_the_norm_over_random_trees(per_layer):
    clip = clip_tree_per_layer if per_layer else clip_tree
    rng = np.random.default_rng(0)
    exceeded = 0
    for _ in range(30):
        tree = _random_tree(rng)
        clip_norm = float(rng.uniform(0.1, 10.0))
        leaves = jax.tree.leaves(tree)
        radius = clip_norm / math.sqrt(len(leaves)) if per_layer else clip_norm
        out, clipped = clip(tree, clip_norm)
        assert jax.tree.structure(out) == jax.tree.structure(tree)
        assert float(tree_norm(tree)) == pytest.approx(_flat_norm(tree), rel=1e-5)
        assert float(tree_norm(out)) <= clip_norm * (1 + 1e-5)
        if per_layer:
            assert all(_norm(leaf) <= radius * (1 + 1e-5) for leaf in jax.tree.leaves(out))
            norms_before = [_norm(leaf) for leaf in leaves]
        else:
            norms_before = [_flat_norm(tree)]
        assert float(clipped) == float(max(norms_before) > radius)
        if float(clipped) == 0.0:  # nothing clipped: returned as it was
            jax.tree.map(np.testing.assert_array_equal, out, tree)
        # negative control: the unclipped tree breaks the bound the test checks
        exceeded += max(norms_before) > radius * (1 + 1e-5)
    assert 5 <= exceeded <= 25  # both branches exercised


def test_per_layer_clipping_bounds_each_layer_and_flat_clipping_does_not():
    tree = {"big": jnp.full((4,), 10.0), "small": jnp.full((2,), 1e-3)}
    flat, _ = clip_tree(tree, 1.0)
    layered, clipped = clip_tree_per_layer(tree, 1.0)
    radius = 1.0 / math.sqrt(2)
    assert _norm(layered["big"]) == pytest.approx(radius, rel=1e-6) and float(clipped) == 1.0
    np.testing.assert_array_equal(layered["small"], tree["small"])  # a small layer is left alone
    # negative control: flat clipping leaves the big layer above the per-layer radius
    assert _norm(flat["big"]) > 1.3 * radius


@pytest.mark.parametrize("clip", [clip_tree, clip_tree_per_layer])
def test_clipping_a_zero_tree_is_finite_and_not_counted(clip):
    out, clipped = jax.jit(clip)({"w": jnp.zeros((3, 2)), "b": jnp.zeros(2)}, 1.0)
    assert float(clipped) == 0.0
    assert all(np.all(np.asarray(leaf) == 0.0) for leaf in jax.tree.leaves(out))


def test_noise_is_exactly_linear_in_its_scale():
    """Same key: stddev s gives exactly s times the stddev-1 noise (the scale is traced)."""
    tree = {"w": jnp.zeros((3, 4)), "b": jnp.zeros(4), "h": [jnp.zeros(4)]}
    noise = jax.jit(gaussian_noise_tree)
    key = jax.random.key(0)
    unit = noise(key, tree, 1.0)
    for scale in (0.37, 2.5, 1e3):
        scaled = noise(key, tree, jnp.float32(scale))
        jax.tree.map(
            lambda a, b, s=scale: np.testing.assert_array_equal(a, np.float32(s) * b), scaled, unit
        )
    # one key per leaf: leaves of the same shape get different noise
    assert not np.allclose(unit["b"], unit["h"][0])
    # negative control: another key gives other noise, which the exact check would reject
    other = noise(jax.random.key(1), tree, 1.0)
    assert not np.allclose(other["w"], unit["w"])


def _std_test(draws: np.ndarray, stddev: float) -> tuple[float, float]:
    """The sample std of ``draws`` and a 5-sigma tolerance for it.

    For n normal draws, (n - 1) s^2 / sigma^2 is chi-squared with n - 1 degrees of freedom, so
    Var(s^2) = 2 sigma^4 / (n - 1), and by the delta method Var(s) = sigma^2 / (2 (n - 1)).
    """
    n = draws.size
    return float(np.std(draws, ddof=1)), 5.0 * stddev / math.sqrt(2.0 * (n - 1))


def test_noise_has_the_stated_standard_deviation():
    stddev = 0.7
    tree = {"a": jnp.zeros((400, 500)), "b": jnp.zeros(100_000)}
    key = jax.random.key(42)
    noise = jax.jit(gaussian_noise_tree)
    for leaf in jax.tree.leaves(noise(key, tree, stddev)):  # every leaf on its own
        draws = np.asarray(leaf, np.float64).ravel()
        sample_std, tolerance = _std_test(draws, stddev)
        assert abs(sample_std - stddev) < tolerance
        assert abs(np.mean(draws)) < 5.0 * stddev / math.sqrt(draws.size)
    # negative controls: noise drawn at 1.5x (and 1/1.5x) the scale fails the same test
    for wrong in (1.5 * stddev, stddev / 1.5):
        draws = np.concatenate(
            [np.ravel(leaf) for leaf in jax.tree.leaves(noise(key, tree, wrong))]
        ).astype(np.float64)
        sample_std, tolerance = _std_test(draws, stddev)
        assert abs(sample_std - stddev) > tolerance


@pytest.mark.parametrize("per_layer", [False, True])
def test_gaussian_sum_aggregator_under_jit_and_vmap(per_layer):
    """The aggregator clips each client as a float64 computation by hand does, releases the sum
    plus exactly ``z C`` times its key's noise, compiles once for every traced clip and z, and
    states ``GaussianDpEvent(z)`` from the parameters it ran with."""
    aggregator = GaussianSum(per_layer=per_layer)
    traces = []

    def aggregate(aggregator, key, updates, clip_norm, noise_multiplier):
        traces.append(None)
        params = GaussianSumParams(clip_norm, noise_multiplier)
        records = jax.vmap(lambda u: aggregator.preprocess(params, (), u, key))(updates)
        summed = jax.tree.map(lambda x: x.sum(0), records)
        released, _, diagnostics = aggregator.release(params, (), summed, key)
        return released, summed["value"], records["clipped"], diagnostics

    aggregate = jax.jit(aggregate, static_argnums=0)
    rng = np.random.default_rng(1)
    n = 16
    scales = np.geomspace(0.05, 5.0, n).astype(np.float32)  # some clients above the clip
    updates = {
        "w": rng.standard_normal((n, 3, 4)).astype(np.float32) * scales[:, None, None] / 3,
        "b": rng.standard_normal((n, 4)).astype(np.float32) * scales[:, None] / 2,
    }
    key = jax.random.key(3)
    clip_norm = 1.0

    # by hand, client by client, in float64
    expected_sum = {"w": np.zeros((3, 4)), "b": np.zeros(4)}
    expected_flags = []
    for i in range(n):
        client = {name: updates[name][i].astype(np.float64) for name in updates}
        if per_layer:
            scale = {k: min(1.0, clip_norm / math.sqrt(2) / _norm(v)) for k, v in client.items()}
        else:
            flat = min(1.0, clip_norm / _flat_norm(client))
            scale = dict.fromkeys(client, flat)
        expected_flags.append(float(min(scale.values()) < 1.0))
        for name in client:
            expected_sum[name] += scale[name] * client[name]

    released, summed, flags, diagnostics = aggregate(aggregator, key, updates, clip_norm, 0.0)
    np.testing.assert_array_equal(flags, expected_flags)
    assert 0 < sum(expected_flags) < n
    assert float(diagnostics["clipped_count"]) == sum(expected_flags)
    for name in expected_sum:
        np.testing.assert_allclose(summed[name], expected_sum[name], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(released[name], summed[name])  # z = 0: no noise

    noisy, summed, _, _ = aggregate(aggregator, key, updates, clip_norm, 1.3)
    value_key, _ = jax.random.split(key)  # a release's value noise: the first half of its key
    noise = jax.jit(gaussian_noise_tree)(value_key, summed, 1.3 * clip_norm)
    for name in expected_sum:
        np.testing.assert_allclose(noisy[name], summed[name] + noise[name], rtol=1e-6, atol=1e-6)
        assert not np.allclose(noisy[name], summed[name])
    aggregate(aggregator, key, updates, 2.0, 0.5)  # other traced scalars: no retrace
    assert len(traces) == 1

    event = aggregator.event(GaussianSumParams(1.0, 1.3))
    assert event == dp_accounting.GaussianDpEvent(1.3)
    assert hash(aggregator) == hash(GaussianSum(per_layer=per_layer))
    with pytest.raises(ValueError, match="noise_multiplier >= 0"):
        aggregator.event(GaussianSumParams(1.0, -1.0))


def test_the_mechanisms_are_local_randomizers():
    mechanisms = [
        privacy.GaussianMechanism(1.0, 2.0),
        privacy.LaplaceMechanism(1.0, 0.5),
        privacy.TwoPointMechanism(0.0, 1.0, 1.0),
        privacy.AnisotropicGaussianMechanism((1.0, 2.0, 0.5), (1.0, 1.0, 1.0)),
    ]
    x = jnp.array([0.1, -0.2, 0.3])
    for mechanism in mechanisms:
        assert isinstance(mechanism, LocalRandomizer)
        assert jax.jit(mechanism.randomize)(jax.random.key(0), x).shape == x.shape
        assert isinstance(mechanism.dp_event(), dp_accounting.DpEvent)
    # negative control: a sum aggregator states an event but randomizes nothing on its own
    assert not isinstance(GaussianSum(), LocalRandomizer)


@pytest.mark.parametrize("accountant", [Pld(1e-3), Rdp()], ids=["pld", "rdp"])
def test_certify_a_poisson_run_equals_dp_accounting_by_hand(accountant):
    z, q, rounds = 1.1, 0.05, 50
    step = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))
    event = poisson_rounds_event(z, q, rounds)
    assert event == dp_accounting.SelfComposedDpEvent(step, rounds)
    if isinstance(accountant, Pld):
        by_hand = dp_accounting.pld.PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE, 1e-3)
    else:
        by_hand = dp_accounting.rdp.RdpAccountant()
    expected = by_hand.compose(step, rounds).get_epsilon(DELTA)

    guarantee = certify(event, DELTA, accountant=accountant, **LABELS)
    assert guarantee.epsilon == pytest.approx(expected, rel=1e-12)
    assert guarantee.delta == DELTA and guarantee.accountant == accountant.name
    assert guarantee.notion == "central (eps, delta)-DP, add-or-remove adjacency"
    assert guarantee.rho is None
    # negative control: one round more is a different (larger) eps, which the check would catch
    more = certify(poisson_rounds_event(z, q, rounds + 1), DELTA, accountant=accountant, **LABELS)
    assert more.epsilon > expected * (1 + 1e-3)


def test_certify_under_replace_one_differs_and_says_so():
    event = poisson_rounds_event(1.1, 0.05, 50)
    add_remove = certify(event, DELTA, accountant=Pld(1e-3), **LABELS)
    replace = certify(event, DELTA, accountant=Pld(1e-3), adjacency="replace-one", **LABELS)
    by_hand = dp_accounting.pld.PLDAccountant(NeighboringRelation.REPLACE_ONE, 1e-3)
    assert replace.epsilon == pytest.approx(by_hand.compose(event).get_epsilon(DELTA), rel=1e-12)
    assert replace.epsilon > add_remove.epsilon
    assert replace.notion.endswith(", replace-one adjacency")


def test_certify_a_fixed_cohort_equals_rdp_by_hand():
    z, population, cohort, rounds = 1.2, 1000, 20, 30
    event = fixed_cohort_rounds_event(z, population, cohort, rounds)
    # dp-accounting's RDP under replace-one reads z as std / the distance between neighbouring
    # outputs, which is 2 clip_norm for a clipped sum: hence z / 2
    step = dp_accounting.SampledWithoutReplacementDpEvent(
        population, cohort, dp_accounting.GaussianDpEvent(z / 2)
    )
    by_hand = dp_accounting.rdp.RdpAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)
    expected = by_hand.compose(step, rounds).get_epsilon(DELTA)
    guarantee = certify(event, DELTA, accountant=Rdp(), adjacency="replace-one", **LABELS)
    assert guarantee.epsilon == pytest.approx(expected, rel=1e-12)
    assert guarantee.notion.endswith(", replace-one adjacency")


def test_the_fixed_cohort_event_charges_twice_the_clip_norm():
    """Everyone, one round: swapping a client moves the sum by up to 2C, so the exact eps of a
    Gaussian with sensitivity 2 and std z is a lower bound every valid accountant must meet."""
    z = 2.0
    exact = float(gaussian.analytic_gaussian_epsilon(2.0, z, DELTA))
    certified = certify(
        fixed_cohort_rounds_event(z, 100, 100, 1), DELTA, accountant=Rdp(),
        adjacency="replace-one", **LABELS,
    ).epsilon  # fmt: skip
    assert exact <= certified < 1.3 * exact
    # PLD under replace-one doubles the sensitivity itself: the query's own event is exact there
    pld = certify(
        GaussianSum().event(GaussianSumParams(1.0, z)),
        DELTA,
        accountant=Pld(),
        adjacency="replace-one",
        **LABELS,
    ).epsilon
    assert exact <= pld <= exact + 2e-3
    # negative control: without the halving, RDP would claim less than the exact privacy loss
    unhalved = (
        dp_accounting.rdp.RdpAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)
        .compose(
            dp_accounting.SampledWithoutReplacementDpEvent(
                100, 100, dp_accounting.GaussianDpEvent(z)
            )
        )
        .get_epsilon(DELTA)
    )
    assert unhalved < 0.8 * exact


def test_certify_refuses_what_would_misread_the_sensitivity():
    cohort = fixed_cohort_rounds_event(1.0, 100, 10, 5)
    bare = poisson_rounds_event(1.0, 1.0, 5)
    with pytest.raises(ValueError, match="composed only by Rdp"):
        certify(cohort, DELTA, accountant=Pld(), adjacency="replace-one", **LABELS)
    with pytest.raises(ValueError, match="composed only by Rdp"):
        certify(cohort, DELTA, accountant=Rdp(), **LABELS)
    with pytest.raises(ValueError, match="Pld\\(\\), which doubles the sensitivity"):
        certify(bare, DELTA, accountant=Rdp(), adjacency="replace-one", **LABELS)
    with pytest.raises(ValueError, match="add-or-remove adjacency; got adjacency='replace-one'"):
        certify(bare, DELTA, accountant=Zcdp(), adjacency="replace-one", **LABELS)
    with pytest.raises(ValueError, match="unknown adjacency 'swap'"):
        certify(bare, DELTA, adjacency="swap", **LABELS)
    with pytest.raises(ValueError, match="delta in \\(0, 1\\)"):
        certify(bare, 1.0, **LABELS)
    with pytest.raises(ValueError, match="discretization > 0"):
        Pld(0.0)
    # the same events pass where they are read correctly
    assert certify(bare, DELTA, accountant=Rdp(), **LABELS).epsilon > 0


def test_certify_under_zcdp_reports_rho():
    mechanism = privacy.GaussianMechanism(1.0, 3.0)
    event = dp_accounting.SelfComposedDpEvent(mechanism.dp_event(), 20)
    guarantee = certify(event, 1e-6, accountant=Zcdp(), **LABELS)
    assert guarantee.rho == pytest.approx(20 / (2 * 9.0))
    assert guarantee.epsilon == pytest.approx(float(zcdp.epsilon_from_rho(20 / 18.0, 1e-6)))
    assert guarantee.accountant == "zcdp"


@pytest.mark.parametrize(
    "accountant, sampling_rate", [(Pld(1e-3), 0.1), (Rdp(), 1.0)], ids=["pld-poisson", "rdp"]
)
def test_calibrate_round_trips(accountant, sampling_rate):
    def make_event(z):
        return poisson_rounds_event(z, sampling_rate, 10)

    target = 2.0
    z = calibrate(make_event, target, DELTA, accountant=accountant)
    spent = certify(make_event(z), DELTA, accountant=accountant, **LABELS).epsilon
    assert target * (1 - 1e-3) <= spent <= target
    # negative control: 10% less noise overspends
    assert certify(make_event(0.9 * z), DELTA, accountant=accountant, **LABELS).epsilon > target


def test_calibrate_under_zcdp_matches_the_closed_form():
    z = calibrate(lambda z: poisson_rounds_event(z, 1.0, 20), 3.0, DELTA, accountant=Zcdp())
    assert z == pytest.approx(float(zcdp.calibrate_gaussian(1.0, 3.0, DELTA, 20)), abs=2e-6)


@pytest.mark.parametrize(
    "epsilon, delta, match",
    [(0.0, DELTA, "epsilon > 0"), (-1.0, DELTA, "epsilon > 0"), (1.0, 0.0, "delta in \\(0, 1\\)"),
     (1.0, 1.0, "delta in \\(0, 1\\)")],
)  # fmt: skip
def test_calibrate_rejects_bad_targets(epsilon, delta, match):
    with pytest.raises(ValueError, match=match):
        calibrate(lambda z: poisson_rounds_event(z, 0.1, 10), epsilon, delta)


def test_the_new_names_are_exported():
    for name in ("GaussianSum", "LocalRandomizer", "clip_tree", "clip_tree_per_layer",
                 "gaussian_noise_tree", "tree_norm", "Pld", "Rdp", "Zcdp", "certify", "calibrate",
                 "poisson_rounds_event", "fixed_cohort_rounds_event"):  # fmt: skip
        assert getattr(privacy, name) is not None


def test_analytic_accountant_equals_pld_on_gaussian_compositions_and_refuses_sampling():
    """The exact analytic composition of R Gaussian releases against dp-accounting's PLD (an
    independent, numerically tight computation), under both adjacencies; calibration through
    it round-trips. Negative controls: a Poisson-sampled event is refused, and a z off by 5%
    moves eps far outside the tolerance."""
    from jfed import privacy

    for adjacency in ("add-or-remove", "replace-one"):
        for z, rounds in ((1.3, 1), (5.0, 20), (20.0, 400)):
            event = privacy.gaussian_rounds_event(z, rounds)
            exact = privacy.certify(event, 1e-5, accountant=privacy.Analytic(),
                                    adjacency=adjacency, notion="n", protected="p",
                                    trust_model="t").epsilon  # fmt: skip
            pld = privacy.certify(event, 1e-5, accountant=privacy.Pld(), adjacency=adjacency,
                                  notion="n", protected="p", trust_model="t").epsilon  # fmt: skip
            assert exact == pytest.approx(pld, rel=2e-3)
            moved = privacy.certify(privacy.gaussian_rounds_event(z * 1.05, rounds), 1e-5,
                                    accountant=privacy.Analytic(), adjacency=adjacency,
                                    notion="n", protected="p", trust_model="t").epsilon  # fmt: skip
            assert abs(moved - exact) > 1e-2 * exact
        z = privacy.calibrate(lambda z: privacy.gaussian_rounds_event(z, 10), 2.0, 1e-5,
                              accountant=privacy.Analytic(), adjacency=adjacency)  # fmt: skip
        eps = privacy.certify(privacy.gaussian_rounds_event(z, 10), 1e-5, adjacency=adjacency,
                              notion="n", protected="p", trust_model="t").epsilon  # fmt: skip
        assert eps == pytest.approx(2.0, rel=1e-3)
    with pytest.raises(ValueError, match="without sampling only"):
        privacy.certify(privacy.poisson_rounds_event(2.0, 0.1, 10), 1e-5,
                        accountant=privacy.Analytic(), notion="n", protected="p",
                        trust_model="t")  # fmt: skip


def test_basic_composition_of_exact_releases():
    """Each release's closed form, checked independently: a Laplace release's pure eps against
    dp-accounting's PLD (which is tight for one Laplace release), randomized response's
    ln(p / (1 - p)), the analytic Gaussian at its share of delta; composition adds eps,
    parallel branches take the worst. Negative control: a parallel event is not a sum."""
    import math

    import dp_accounting

    from jfed import privacy

    def eps(event, delta=1e-6):
        return privacy.spent(event, delta, accountant=privacy.Basic(), adjacency="bounded")

    laplace = dp_accounting.LaplaceDpEvent(0.5)
    pld = dp_accounting.pld.PLDAccountant()
    pld.compose(laplace)
    assert eps(laplace, 0.0) == pytest.approx(2.0, rel=1e-12)
    assert pld.get_epsilon(1e-12) == pytest.approx(2.0, rel=1e-3)
    rr = dp_accounting.RandomizedResponseDpEvent(2 / (1 + math.exp(0.7)), 2)
    assert eps(rr, 0.0) == pytest.approx(0.7, rel=1e-12)
    gaussian = dp_accounting.GaussianDpEvent(3.0)
    both = dp_accounting.ComposedDpEvent([gaussian, gaussian])
    assert eps(both, 2e-6) == pytest.approx(
        2 * float(privacy.analytic_gaussian_epsilon(1.0, 3.0, 1e-6)), rel=1e-12
    )
    parallel = privacy.ParallelDpEvent((laplace, rr))
    assert eps(parallel, 0.0) == pytest.approx(2.0, rel=1e-12)
    assert eps(dp_accounting.ComposedDpEvent([laplace, rr]), 0.0) == pytest.approx(2.7)
    stated = privacy.ApproximateDpEvent(0.3, 0.0)
    assert eps(dp_accounting.ComposedDpEvent([stated, laplace]), 0.0) == pytest.approx(2.3)
    with pytest.raises(ValueError, match="basic composition takes"):
        eps(dp_accounting.PoissonSampledDpEvent(0.1, gaussian))


@pytest.mark.parametrize("name", ["zcdp", "analytic", "classic", "pld"])
def test_a_plan_states_what_its_event_certifies(name):
    """The plan's noise (closed form where the accountant has one, without loading
    dp-accounting) spends the target, neither more nor visibly less, when the event the plan
    says its clients emit is certified; zCDP's rho is the closed form's 6 * (1 / z)^2 / 2."""
    from jfed import privacy

    accountant = privacy.accountant_named(name)
    epsilon = 0.9 if name == "classic" else 2.0
    plan = privacy.rounds_plan(1.5, epsilon, 1e-5, 6, accountant=accountant)
    again = privacy.certify(plan.event, 1e-5, accountant=accountant, adjacency="bounded",
                            notion="local", protected="x", trust_model="t")  # fmt: skip
    tolerance = 1e-6 if name == "pld" else 1e-12  # PLD's calibration is a search
    assert again.epsilon == pytest.approx(epsilon, rel=tolerance)
    assert again.epsilon <= epsilon * (1 + 1e-9)
    if name == "zcdp":
        assert again.rho == pytest.approx(6 / (2 * plan.noise_multiplier**2), rel=1e-12)
    else:
        assert again.rho is None
