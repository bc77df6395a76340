"""Accountants and calibration against independent references (closed forms, dp-accounting)."""

import math

import dp_accounting
import numpy as np
import pytest

from jfed import privacy
from jfed.privacy import calibration, last_iterate, shuffle


def test_zcdp_accountant_matches_closed_form_and_bounds_rdp():
    acc = privacy.ZcdpAccountant().compose(dp_accounting.GaussianDpEvent(3.0), 20)
    rho = 20 / (2 * 9.0)
    assert acc.rho == pytest.approx(rho)
    assert acc.get_epsilon(1e-6) == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1e6)))
    assert acc.get_delta(acc.get_epsilon(1e-6)) == pytest.approx(1e-6, rel=1e-9)
    # dp-accounting's RDP converts the same Renyi curve more tightly: never above zCDP's eps
    rdp = privacy.Rdp().make().compose(dp_accounting.GaussianDpEvent(3.0), 20)
    assert rdp.get_epsilon(1e-6) <= acc.get_epsilon(1e-6)
    assert rdp.get_epsilon(1e-6) > 0.8 * acc.get_epsilon(1e-6)


def test_pld_of_one_gaussian_matches_the_analytic_gaussian():
    for sigma in (0.7, 1.5, 4.0):
        exact = float(privacy.analytic_gaussian_epsilon(1.0, sigma, 1e-6))
        pld = privacy.Pld().make().compose(dp_accounting.GaussianDpEvent(sigma))
        # the PLD accountant is pessimistic by at most its discretization (1e-4 per loss unit)
        assert exact <= pld.get_epsilon(1e-6) <= exact + 2e-3


def test_advanced_composition_closed_form_and_basic_cap():
    k, eps0 = 50, 0.1
    acc = privacy.Advanced().make().compose(dp_accounting.LaplaceDpEvent(1 / eps0), k)
    expected = eps0 * math.sqrt(2 * k * math.log(1 / 1e-6)) + k * eps0 * math.expm1(eps0)
    assert acc.get_epsilon(1e-6) == pytest.approx(min(expected, k * eps0))
    few = privacy.Advanced().make().compose(dp_accounting.LaplaceDpEvent(1.0), 2)
    assert few.get_epsilon(1e-6) == pytest.approx(2.0)  # basic composition wins for 2 releases
    mixed = privacy.Advanced().make().compose(privacy.ApproximateDpEvent(0.05, 1e-9), 200)
    with pytest.raises(ValueError, match="sum of the composed deltas"):
        mixed.get_epsilon(1e-7)
    assert mixed.get_epsilon(2e-6) < 200 * 0.05  # the advanced bound wins for many releases
    assert mixed.get_delta(mixed.get_epsilon(2e-6)) == pytest.approx(2e-6, rel=1e-6)


def test_parallel_composition_is_the_maximum():
    branches = [privacy.Zcdp().make().compose(dp_accounting.GaussianDpEvent(s)) for s in (1, 2, 4)]
    parallel = privacy.ParallelComposition(branches)
    assert parallel.get_epsilon(1e-5) == pytest.approx(branches[0].get_epsilon(1e-5))
    sequential = privacy.Zcdp().make()
    for s in (1, 2, 4):
        sequential.compose(dp_accounting.GaussianDpEvent(s))
    assert parallel.get_epsilon(1e-5) < sequential.get_epsilon(1e-5)


# PLD's search takes seconds a point: one Poisson-sampled and the unsampled setting run by default,
# the other two sampled ones (the same code path at other rates and lengths) with -m slow
SLOW_PLD = pytest.mark.slow


@pytest.mark.parametrize(
    "accountant, noise, rate, steps",
    [
        *[("rdp", *point) for point in [(0.8, 0.01, 100), (1.1, 0.01, 1000), (2.0, 0.1, 50),
                                         (1.5, 1.0, 10)]],
        pytest.param("pld", 0.8, 0.01, 100, marks=SLOW_PLD),
        pytest.param("pld", 1.1, 0.01, 1000, marks=SLOW_PLD),
        ("pld", 2.0, 0.1, 50),
        ("pld", 1.5, 1.0, 10),
    ],
)  # fmt: skip
def test_calibration_inverts_dp_accounting(accountant, noise, rate, steps):
    """On a grid: eps from dp-accounting directly, then our calibration must return the noise."""
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(noise))
        if rate < 1
        else dp_accounting.GaussianDpEvent(noise),
        steps,
    )
    direct = (
        dp_accounting.rdp.RdpAccountant()
        if accountant == "rdp"
        else dp_accounting.pld.PLDAccountant()
    )
    epsilon = direct.compose(event).get_epsilon(1e-5)
    # == on host floats: the wrapper composes this event in the same dp-accounting accountant,
    # in this process, so the same bits (the claim: it adds nothing to the accountant's answer)
    assert calibration.epsilon_for_noise(noise, 1e-5, rate, steps, accountant) == epsilon
    calibrated = calibration.calibrate_noise_multiplier(epsilon, 1e-5, rate, steps, accountant)
    assert calibrated == pytest.approx(noise, rel=1e-4)


def test_grid_calibration_matches_individual_calibration():
    targets = np.array([0.5, 1.0, 2.0, 4.0, 8.0])
    grid, info = calibration.calibrate_noise_multipliers(targets, 1e-5, 0.02, 200, "rdp")
    individual = [
        calibration.calibrate_noise_multiplier(e, 1e-5, 0.02, 200, "rdp") for e in targets
    ]
    np.testing.assert_allclose(grid, individual, rtol=2e-3)
    assert np.all(grid >= np.array(individual) * (1 - 1e-9))  # conservative
    spent = [calibration.epsilon_for_noise(g, 1e-5, 0.02, 200, "rdp") for g in grid]
    assert np.all(np.array(spent) <= targets * (1 + 1e-9))
    assert info["evaluations"] < 150


def test_closed_form_grid_calibrations():
    eps = np.logspace(-1, 1, 100)
    zcdp_grid, _ = calibration.calibrate_noise_multipliers(eps, 1e-5, steps=10, accountant="zcdp")
    np.testing.assert_allclose(zcdp_grid, privacy.calibrate_gaussian(1.0, eps, 1e-5, 10))
    analytic, _ = calibration.calibrate_noise_multipliers(eps, 1e-5, accountant="analytic")
    np.testing.assert_allclose(
        analytic, [dp_accounting.get_sigma_gaussian(e, 1e-5) for e in eps], rtol=1e-8
    )


@pytest.mark.parametrize("accountant", ["zcdp", "pld", "classic"])
def test_rounds_calibration_spends_at_most_the_target(accountant):
    def rounds_plan(name, epsilon):
        return privacy.rounds_plan(2.0, epsilon, 1e-5, 10,
                                   accountant=privacy.accountant_named(name))  # fmt: skip

    epsilon = 0.9 if accountant == "classic" else 3.0
    plan = rounds_plan(accountant, epsilon)
    # what the plan's noise spends: its event certified by the same accountant
    guarantee = privacy.certify(plan.event, 1e-5, accountant=privacy.accountant_named(accountant),
                                adjacency="bounded", notion="local", protected="x",
                                trust_model="t")  # fmt: skip
    noise, spent, label = plan.noise_std, guarantee.epsilon, guarantee.accountant
    assert spent <= epsilon * (1 + 1e-9) and spent > 0.99 * epsilon
    assert label.startswith(accountant)
    zcdp_noise = rounds_plan("zcdp", epsilon).noise_std
    if accountant == "pld":
        assert noise < zcdp_noise  # the exact composition needs less noise
    # the analytic accountant composes the 10 releases exactly (it refused them before 0.3.0):
    # PLD, numerically tight, certifies the same eps for its noise
    analytic = rounds_plan("analytic", 1.0)
    pld_epsilon = privacy.certify(analytic.event, 1e-5, accountant=privacy.Pld(),
                                  notion="n", protected="p", trust_model="t").epsilon  # fmt: skip
    assert pld_epsilon == pytest.approx(1.0, rel=2e-3)


def test_shuffle_closed_form_and_validity():
    eps0, n, delta = 1.0, 10_000, 1e-6
    e0 = math.exp(eps0)
    expected = math.log1p(
        (e0 - 1) / (e0 + 1) * (8 * math.sqrt(e0 * math.log(4 / delta)) / math.sqrt(n) + 8 * e0 / n)
    )
    epsilon, delta_total = shuffle.shuffle_epsilon(eps0, n, delta)
    assert epsilon == pytest.approx(expected) and delta_total == delta
    assert epsilon < eps0
    assert shuffle.shuffle_epsilon(eps0, 100 * n, delta)[0] < epsilon  # more clones, more privacy
    _, with_delta0 = shuffle.shuffle_epsilon(eps0, n, delta, delta0=1e-10)
    assert with_delta0 == pytest.approx(
        delta + (math.exp(epsilon) + 1) * (1 + math.exp(-eps0) / 2) * n * 1e-10
    )
    limit = math.log(n / (16 * math.log(2 / delta)))
    with pytest.raises(ValueError, match="epsilon0 <= ln"):
        shuffle.shuffle_epsilon(limit + 0.01, n, delta)


def test_last_iterate_formula_on_the_seed_figure2_setting():
    setting = last_iterate.LastIterateSetting(0.5, 1.0, 1.0, 1.5, 100, 0.1)
    m, T = 10, 10
    a = 2 * 1.0 / (math.sqrt(m) * 1.5)
    b = 2 * 1.0 * math.sqrt(m) / (0.5 * 1.5)
    assert (setting.first_ratio, setting.contraction_ratio) == pytest.approx((a, b))
    eps = 1.0
    direct = (
        0.1
        * privacy.hockey_stick(eps, a)
        * sum(privacy.hockey_stick(eps, b) ** (T - t) for t in range(1, T + 1))
    )
    assert float(last_iterate.last_iterate_delta(setting, eps)) == pytest.approx(float(direct))
    # the seed's printed typo theta(2 L sqrt(m) / sigma) would give a different (larger) delta
    typo = 0.1 * privacy.hockey_stick(eps, 2 * math.sqrt(m) / 1.5) * T
    assert float(typo) > 10 * float(direct)
    # Figure 2: delta falls as q grows, at every eps
    result = last_iterate.figure2(np.array([0.5, 1.0, 2.0]))
    d = [result["last_iterate"][q] for q in (0.1, 0.2, 0.3)]
    assert np.all(d[0] > d[1]) and np.all(d[1] > d[2])
    eps_back = last_iterate.last_iterate_epsilon(setting, float(direct))
    assert eps_back == pytest.approx(eps, rel=1e-6)


def _hockey_stick_by_cdf(eps, ratio):
    """theta_eps(r) of two Gaussians at distance r (unit noise), from scipy's normal CDF."""
    from scipy.stats import norm

    return norm.cdf(-eps / ratio + ratio / 2) - math.exp(eps) * norm.cdf(-eps / ratio - ratio / 2)


def test_last_iterate_m_equals_one_warm_up_and_comparison():
    """m = 1 against the formula evaluated independently (scipy's normal CDF); negative control:
    the seed's printed first ratio gives another delta."""
    single = last_iterate.LastIterateSetting(0.5, 1.0, 1.0, 3.0, 20, 0.05)
    assert single.batch_size == 1 and single.iterations == 20
    assert 0 < float(last_iterate.last_iterate_delta(single, 1.0)) < 1
    a, b = 2 * 1.0 / 3.0, 2 * 1.0 / (0.5 * 3.0)
    expected = (
        0.05
        * _hockey_stick_by_cdf(1.0, a)
        * sum(_hockey_stick_by_cdf(1.0, b) ** (20 - t) for t in range(1, 21))
    )
    assert float(last_iterate.last_iterate_delta(single, 1.0)) == pytest.approx(expected, rel=1e-9)
    typo = 0.05 * _hockey_stick_by_cdf(1.0, 2 * 1.0 * 1 / 3.0 * 3) * 20  # theta(2 L sqrt(m)/sigma)
    assert abs(typo - expected) > 0.1 * expected
    figure = last_iterate.LastIterateSetting(0.5, 1.0, 1.0, 1.5, 100, 0.3)
    assert last_iterate.standard_composition_epsilon(figure, 1e-5) > 0


def test_every_iterate_baselines_against_dp_accounting():
    """The partition's every-iterate bound is ONE Gaussian release (ratio a), the comparators are
    what dp-accounting computes for their events; negative control: the partition bound is not
    the Poisson-sampled one."""
    import dp_accounting
    from dp_accounting.privacy_accountant import NeighboringRelation

    for q in (0.1, 0.2, 0.3):
        setting = last_iterate.LastIterateSetting(0.5, 1.0, 1.0, 1.5, 100, q)
        m, T, a = setting.batch_size, setting.iterations, setting.first_ratio
        single = dp_accounting.pld.PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE, 1e-5)
        single.compose(dp_accounting.GaussianDpEvent(1.0 / a))
        assert last_iterate.partition_epsilon(setting, 1e-5) == pytest.approx(
            single.get_epsilon(1e-5), rel=1e-3
        )
        assert float(last_iterate.partition_delta(setting, 1.0)) == pytest.approx(
            _hockey_stick_by_cdf(1.0, a), rel=1e-9
        )
        rdp = dp_accounting.rdp.RdpAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)
        step = dp_accounting.SampledWithoutReplacementDpEvent(
            100, m, dp_accounting.GaussianDpEvent(1 / a)
        )
        rdp.compose(dp_accounting.SelfComposedDpEvent(step, T))
        assert last_iterate.standard_composition_epsilon(setting, 1e-5) == pytest.approx(
            rdp.get_epsilon(1e-5), rel=1e-9
        )
        poisson = last_iterate.poisson_epsilon(setting, 1e-5)
        assert abs(poisson - last_iterate.partition_epsilon(setting, 1e-5)) > 0.05


def test_when_the_last_iterate_bound_wins():
    """Figure 2 (rho = 1): the contraction factor theta(b) is close to 1 and the last-iterate bound
    is no better than releasing every iterate of the partition (ties at q = 0.1, 0.2; at q = 0.3
    slightly worse: T = ceil(100 / 30) = 4 counts a partial batch). With a small projection radius
    the later steps contract and the last iterate wins by about the factor q."""
    for q, relation in ((0.1, "tie"), (0.2, "tie"), (0.3, "worse")):
        setting = last_iterate.LastIterateSetting(0.5, 1.0, 1.0, 1.5, 100, q)
        last = last_iterate.last_iterate_epsilon(setting, 1e-5)
        partition = last_iterate.partition_epsilon(setting, 1e-5)
        if relation == "tie":
            assert last == pytest.approx(partition, rel=1e-4)
        else:
            assert last > partition * 1.01
    small = last_iterate.LastIterateSetting(0.5, 1.0, 0.01, 1.5, 100, 0.1)
    ratio = float(last_iterate.last_iterate_delta(small, 1.0)) / float(
        last_iterate.partition_delta(small, 1.0)
    )
    assert 0.09 < ratio < 0.12  # ~ q: the release is hidden among the T batches
    assert last_iterate.last_iterate_epsilon(small, 1e-5) < last_iterate.partition_epsilon(
        small, 1e-5
    )


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: privacy.subsampled_gaussian_event(1.0, 1.5), "sampling_rate in \\(0, 1\\]"),
        (lambda: privacy.subsampled_gaussian_event(1.0, 0.0), "sampling_rate in \\(0, 1\\]"),
        (lambda: privacy.subsampled_gaussian_event(-1.0, 0.5), "noise_multiplier > 0"),
        (lambda: privacy.subsampled_gaussian_event(1.0, 0.5, 0), "steps >= 1"),
        (lambda: calibration.calibrate_noise_multiplier(0.0, 1e-5), "epsilon > 0"),
        (lambda: calibration.calibrate_noise_multiplier(1.0, 2.0), "delta in \\(0, 1\\)"),
        (lambda: calibration.calibrate_noise_multiplier(1.0, 1e-5, 0.1, 10, "zcdp"),
         "no subsampling"),
        (lambda: privacy.accountant_named("moments"), "unknown accountant"),
        (lambda: privacy.spent(privacy.subsampled_gaussian_event(1.0, 0.1), 1e-5,
                               accountant=privacy.Zcdp()), "cannot compose"),
        (lambda: privacy.Zcdp().make().get_epsilon(0.0), "delta in \\(0, 1\\)"),
        (lambda: last_iterate.LastIterateSetting(0.5, 1, 1, -1.5, 100, 0.1), "sigma > 0"),
        (lambda: shuffle.shuffle_epsilon(-1.0, 100, 1e-6), "epsilon0 > 0"),
    ],
)  # fmt: skip
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_every_accountant_name_constructs():
    """Every key of the one table makes a ``dp_accounting.PrivacyAccountant``."""
    assert set(privacy.ACCOUNTANTS) >= {"pld", "rdp", "zcdp", "analytic", "classic"}
    for name in privacy.ACCOUNTANTS:
        spec = privacy.accountant_named(name)
        assert spec.key == name
        assert isinstance(spec.make(), dp_accounting.PrivacyAccountant)


def test_calibration_takes_accountant_objects_and_keys_alike():
    """``calibrate_noise_multiplier(..., accountant=Classic())`` calibrates as ``"classic"``
    does (an accountant object was refused as "unknown accountant"), and the answer's eps meets
    the target under that accountant."""
    by_object = calibration.calibrate_noise_multiplier(0.5, 1e-5, accountant=privacy.Classic())
    by_key = calibration.calibrate_noise_multiplier(0.5, 1e-5, accountant="classic")
    assert by_object == by_key
    event = privacy.gaussian_rounds_event(by_object)
    spent = privacy.spent(event, 1e-5, accountant=privacy.Classic(), adjacency="bounded")
    assert spent <= 0.5 + 1e-9


# ------------------------------------------------------------------ the discrete mechanisms


def test_discrete_laplace_is_pure_in_every_pure_accountant():
    """A discrete Laplace release of parameter a and L1 sensitivity s spends eps = a s
    (discrete_accounting's closed form) wherever pure releases compose: basic, advanced and
    optimal composition, and zCDP (eps^2 / 2)."""
    from jfed.privacy.accountants import pure_epsilon
    from jfed.privacy.discrete_accounting import discrete_laplace_epsilon

    event = dp_accounting.dp_event.DiscreteLaplaceDpEvent(0.25, 3)
    assert pure_epsilon(event) == discrete_laplace_epsilon(event) == 0.75
    basic = privacy.Basic().make().compose(event, 4)
    assert basic.get_epsilon(1e-6) == pytest.approx(4 * 0.75)
    assert privacy.spent(event, 0.0, accountant=privacy.Basic()) == pytest.approx(0.75)
    optimal = privacy.OptimalPure().make().compose(event, 4)
    assert optimal.get_epsilon(1e-6) <= 3.0
    zcdp = privacy.Zcdp().make().compose(event, 4)
    assert zcdp.rho == pytest.approx(4 * 0.75**2 / 2)
    # the PLD accountant of dp-accounting (add-or-remove) agrees on one release: pure 0.75
    pld = privacy.Pld().make().compose(event)
    assert pld.get_delta(0.75 + 1e-3) == pytest.approx(0.0, abs=1e-12)
    assert pld.get_delta(0.7) > 0.0


def test_zcdp_takes_the_discrete_events_with_their_own_rho():
    from jfed.privacy.discrete_accounting import zcdp_event

    central = privacy.DiscreteGaussianDpEvent(1.5, 64.0, 64.0, 10)
    acc = privacy.Zcdp().make().compose(central, 7)
    assert acc.rho == pytest.approx(7 / (2 * 1.5**2))  # the continuous Gaussian's rho
    # small shares (variance 0.75 each): the sum is measurably off a discrete Gaussian (tau)
    shared = privacy.DiscreteGaussianDpEvent(1.5, 1.0, 1.0, 10, shares=3)
    acc = privacy.Zcdp().make().compose(shared)
    assert acc.rho == pytest.approx(zcdp_event(shared).rho) and acc.rho > 1 / (2 * 1.5**2)
    # Skellam: rho = Delta^2 / (2 mu) + Delta^2 / (2 mu^2) when xi = 0 (6 Delta_1 <= Delta^2)
    skellam = privacy.SkellamDpEvent(2.0, 10.0, 10.0, 4)
    mu = (2.0 * 10.0) ** 2
    acc = privacy.Zcdp().make().compose(skellam)
    assert acc.rho == pytest.approx(100 / (2 * mu) + 100 / (2 * mu**2))
    # negative control: an approximate-zCDP Skellam (xi > 0) is refused, not understated
    loose = privacy.SkellamDpEvent(2.0, 1.0, 100.0, 4)
    assert zcdp_event(loose).xi > 0
    assert not privacy.Zcdp().make().supports(loose)
    with pytest.raises(ValueError, match="approximate zCDP"):
        privacy.spent(loose, 1e-6, accountant=privacy.Zcdp())


def test_discrete_rdp_spec_composes_as_dp_accountings_rdp_on_the_gaussian_curve():
    """The central discrete Gaussian has the continuous Gaussian's Renyi curve (CKS Thm 14): the
    spec's accountant over its orders equals dp-accounting's RDP accountant of GaussianDpEvent(z)
    over the same orders; zero-out reads as add-or-remove; replace-one is refused."""
    from jfed.privacy.discrete_accounting import ORDERS

    z, rounds = 1.3, 25
    event = privacy.DiscreteGaussianDpEvent(z, 4096.0, 4096.0, 100)
    ours = privacy.DiscreteRdp().make().compose(event, rounds)
    assert isinstance(ours, privacy.DiscreteRdpAccountant)
    reference = dp_accounting.rdp.RdpAccountant(orders=list(ORDERS))
    reference.compose(dp_accounting.GaussianDpEvent(z), rounds)
    assert ours.get_epsilon(1e-6) == pytest.approx(reference.get_epsilon(1e-6), rel=1e-12)
    assert ours.get_delta(2.0) == pytest.approx(reference.get_delta(2.0), rel=1e-12)
    zero_out = privacy.spent(event, 1e-6, accountant=privacy.DiscreteRdp(), adjacency="zero-out")
    assert zero_out == pytest.approx(privacy.DiscreteRdp().make().compose(event).get_epsilon(1e-6))
    with pytest.raises(ValueError, match="replace-one"):
        privacy.DiscreteRdp().make("replace-one")
    # non-private and no-op events walk as in every jfed accountant
    silent = privacy.DiscreteRdp().make().compose(dp_accounting.NoOpDpEvent())
    assert silent.get_epsilon(1e-6) == 0.0
    broken = privacy.DiscreteRdp().make().compose(dp_accounting.NonPrivateDpEvent())
    assert broken.get_epsilon(1e-6) == math.inf and broken.get_delta(5.0) == 1.0
    assert not privacy.DiscreteRdp().make().supports(dp_accounting.LaplaceDpEvent(1.0))


def test_zero_out_adjacency_is_stated_and_composes_as_add_or_remove():
    from dp_accounting import NeighboringRelation

    from jfed.privacy.accountants import NEIGHBORING

    assert NEIGHBORING[privacy.Adjacency.ZERO_OUT] == NeighboringRelation.ADD_OR_REMOVE_ONE
    assert privacy.Adjacency.of("zero-out").states("central DP") == (
        "central DP, zero-out adjacency"
    )
    event = privacy.DiscreteGaussianDpEvent(1.0, 8.0, 8.0, 1, shares=4)
    guarantee = privacy.certify(
        event, 1e-5, accountant=privacy.DiscreteRdp(), adjacency="zero-out",
        notion="distributed (eps, delta)-DP", protected="one client's update",
        trust_model="secure sum",
    )  # fmt: skip
    assert guarantee.adjacency is privacy.Adjacency.ZERO_OUT
    assert guarantee.accountant == "discrete-rdp"
    assert guarantee.notion.endswith("zero-out adjacency")
