"""The discrete mechanisms' guarantees against independent computations and closed forms.

Every check has a counterpart that must fail: the exact delta against a PLD of another noise
level, the subsampled bound against the unsampled curve it must improve on, and so on.
"""

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

from jfed.privacy import discrete_accounting as da
from jfed.privacy.gaussian import analytic_gaussian_delta

ORDERS = np.arange(2, 129)


@pytest.mark.parametrize("sigma_squared, sensitivity", [(4.0, 1), (30.0, 2), (300.0, 5)])
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.0])
def test_exact_delta_matches_dp_accountings_discrete_gaussian_pld(
    sigma_squared, sensitivity, epsilon
):
    exact = da.discrete_gaussian_delta(epsilon, sigma_squared, sensitivity)
    reference = pld.from_discrete_gaussian_mechanism(
        math.sqrt(sigma_squared), sensitivity, value_discretization_interval=1e-5
    ).get_delta_for_epsilon(epsilon)
    # dp-accounting's PLD is pessimistic (rounds losses up): never below, and close
    assert exact <= reference + 1e-15
    assert reference - exact <= 1e-4 * reference + 1e-12
    other = pld.from_discrete_gaussian_mechanism(
        math.sqrt(sigma_squared * 1.2), sensitivity, value_discretization_interval=1e-5
    ).get_delta_for_epsilon(epsilon)
    assert abs(other - exact) > 1e-3 * exact  # the comparison sees a 20% change of variance


def test_exact_delta_approaches_the_continuous_gaussians_and_epsilon_inverts_it():
    # sigma = 200 grid units, sensitivity 200: the discretisation is invisible at this scale
    discrete = da.discrete_gaussian_delta(1.0, 200.0**2, 200)
    continuous = float(analytic_gaussian_delta(1.0, 1.0, 1.0))
    assert discrete == pytest.approx(continuous, rel=2e-3)
    epsilon = da.discrete_gaussian_epsilon(1e-5, 40.0, 3)
    assert da.discrete_gaussian_delta(epsilon, 40.0, 3) <= 1e-5
    assert da.discrete_gaussian_delta(epsilon * 0.999, 40.0, 3) > 1e-5


def test_central_discrete_gaussian_rdp_is_the_gaussians():
    event = da.DiscreteGaussianDpEvent(1.3, 4096.0, 4096.0 * 30, 900)
    gaussian = rdp_lib._compute_rdp_poisson_subsampled_gaussian(1.0, 1.3, ORDERS)
    np.testing.assert_allclose(da.rdp_curve(event, ORDERS), gaussian, rtol=1e-12)
    assert da.zcdp_event(event) == dp_accounting.ZCDpEvent(rho=1 / (2 * 1.3**2))


def test_distributed_bound_reduces_to_the_central_one_and_grows_with_thin_shares():
    central = da.DiscreteGaussianDpEvent(1.0, 1000.0, 30_000.0, 1000, shares=1)
    wide = da.DiscreteGaussianDpEvent(1.0, 1000.0, 30_000.0, 1000, shares=100)  # share sd 100
    np.testing.assert_allclose(da.rdp_curve(wide, ORDERS), da.rdp_curve(central, ORDERS),
                               rtol=1e-12)  # fmt: skip
    assert da.distributed_tau(100.0**2, 100) < 1e-300
    # shares of sd 0.5 are far from one discrete Gaussian: tau = 10 sum exp(-pi^2 k / (2(k+1)))
    thin = da.DiscreteGaussianDpEvent(1.0, 5.0, 25.0, 50, shares=100)
    tau = da.distributed_tau(0.25, 100)
    expected = 10 * sum(math.exp(-2 * math.pi**2 * 0.25 * k / (k + 1)) for k in range(1, 100))
    assert tau == pytest.approx(expected, rel=1e-12)
    curve = da.rdp_curve(thin, ORDERS)
    assert np.all(curve > da.rdp_curve(central, ORDERS))
    l2, l1 = 1.0, 25.0 / 5.0
    by_hand = [min(a / 2 * l2**2 + tau * 50, a / 2 * (l2**2 + 2 * l1 * tau + tau**2 * 50),
                   a / 2 * (l2 + math.sqrt(50) * tau) ** 2) for a in ORDERS]  # fmt: skip
    np.testing.assert_allclose(curve, by_hand, rtol=1e-12)


def test_skellam_rdp_tends_to_the_gaussians():
    near = da.SkellamDpEvent(1.0, 10_000.0, 10_000.0 * 100, 10_000)  # mu = 1e8
    gaussian = ORDERS / 2.0
    assert np.all(da.rdp_curve(near, ORDERS) >= gaussian)
    np.testing.assert_allclose(da.rdp_curve(near, ORDERS), gaussian, rtol=1e-4)
    coarse = da.SkellamDpEvent(1.0, 3.0, 9.0, 10)  # mu = 9: the surcharge shows
    coarse_curve = da.rdp_curve(coarse, ORDERS)
    assert np.all(coarse_curve > gaussian) and coarse_curve[0] > 1.2 * gaussian[0]
    zcdp = da.zcdp_event(coarse)
    assert np.all(zcdp.xi + zcdp.rho * ORDERS >= da.rdp_curve(coarse, ORDERS) - 1e-12)


def test_the_general_subsampling_bound_sits_between_the_gaussians_and_no_sampling():
    event = da.DiscreteGaussianDpEvent(1.1, 100.0, 3000.0, 900)
    unsampled = da.rdp_curve(event, ORDERS)
    sampled = da.poisson_subsampled_rdp(lambda a: da.rdp_curve(event, a), 0.01, ORDERS)
    exact_gaussian = rdp_lib._compute_rdp_poisson_subsampled_gaussian(0.01, 1.1, ORDERS)
    assert np.all(sampled >= exact_gaussian - 1e-12)  # a valid bound for the Gaussian too
    assert np.all(sampled <= unsampled) and sampled[0] < 0.01 * unsampled[0]  # it amplifies
    np.testing.assert_allclose(
        da.poisson_subsampled_rdp(lambda a: da.rdp_curve(event, a), 1.0, ORDERS), unsampled
    )


def test_accountant_composes_like_dp_accountings_rdp_on_gaussians():
    event = dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(0.02, dp_accounting.GaussianDpEvent(1.2)), 300),
        dp_accounting.GaussianDpEvent(3.0),
        dp_accounting.ZCDpEvent(0.01),
    ])  # fmt: skip
    ours = da.DiscreteRdpAccountant(ORDERS).compose(event)
    reference = dp_accounting.rdp.RdpAccountant(list(ORDERS)).compose(event)
    assert ours.get_epsilon(1e-6) == pytest.approx(reference.get_epsilon(1e-6), rel=1e-9)
    assert ours.get_delta(2.0) == pytest.approx(reference.get_delta(2.0), rel=1e-9)


def test_accountant_takes_the_discrete_events():
    gaussian = da.DiscreteGaussianDpEvent(1.0, 100.0, 3000.0, 900)
    skellam = da.SkellamDpEvent(1.0, 100.0, 3000.0, 900)
    laplace = dp_accounting.dp_event.DiscreteLaplaceDpEvent(0.01, 100)  # pure eps 1
    for event in (gaussian, skellam, laplace):
        accountant = da.DiscreteRdpAccountant()
        assert accountant.supports(dp_accounting.PoissonSampledDpEvent(0.1, event))
        accountant.compose(dp_accounting.SelfComposedDpEvent(event, 10))
        assert 0 < accountant.get_epsilon(1e-5) < math.inf
    laplace_eps = da.DiscreteRdpAccountant().compose(laplace).get_epsilon(1e-5)
    # RDP at order 1024 costs ln(1/delta) / 1023 over the pure eps in the conversion
    assert 1.0 <= laplace_eps <= 1.0 + math.log(1e5) / 1023
    assert da.discrete_laplace_epsilon(laplace) == pytest.approx(1.0)
    assert not da.DiscreteRdpAccountant().supports(dp_accounting.LaplaceDpEvent(1.0))
    assert da.DiscreteRdpAccountant().compose(dp_accounting.NonPrivateDpEvent()).get_epsilon(
        1e-5) == math.inf  # fmt: skip


def test_events_refuse_bad_parameters():
    with pytest.raises(ValueError, match="noise_multiplier"):
        da.rdp_curve(da.DiscreteGaussianDpEvent(0.0, 1.0, 1.0, 1), ORDERS)
    with pytest.raises(ValueError, match="dimension"):
        da.rdp_curve(da.SkellamDpEvent(1.0, 1.0, 1.0, 0), ORDERS)
    with pytest.raises(ValueError, match="sampling_rate"):
        da.poisson_subsampled_rdp(lambda a: a, 1.5, ORDERS)
