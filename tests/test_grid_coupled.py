"""The exact grid noise certified through the continuous Gaussian it is coupled to (the default
of ``--noise discrete``: PLD; or ``--accountant rdp``) for DP-FedAvg and its family:

- DP-FedAvg's certified eps equals dp-accounting's PLD of the Poisson-sampled Gaussian at the
  coupled multiplier ``z_1 = sqrt(z^2 B - 9) / sqrt(B)`` composed over the rounds (computed here
  from B's closed form, rel 1e-9), ``delta_coupling`` the closed-form total variation of the
  run's d R coordinates times ``(1 + e^eps)``; negative control: without the cohort's sampling
  the same multiplier spends several times more (an accounting that dropped the sampling);
- the exact noise then needs the float Gaussian's z (to 1e-3: the float's reach reserves 0.1% of
  delta), where the discrete RDP accountant asks 5x more at N = 1,000, q = 0.1;
- DP-SCAFFOLD's two releases are both coupled; a secure sum's shares are refused under pld;
- adaptive clipping's count is coupled where its noise exceeds the coupling's 9 grid units
  (else the default is the discrete RDP accountant, and an explicit pld is refused in one
  line).
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from experiments import calibrated, coupling_variation_per_coordinate, squared_bound

from jfed._validation import UsageError
from jfed.methods import declared

SMALL = dict(clients=1000, cohort_size=100, rounds=20, epsilon=1.0, delta=1e-4)


def _pld_epsilon(event, rounds: int, delta: float) -> float:
    accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    return accountant.compose(event, rounds).get_epsilon(delta)


def test_dp_fedavg_certifies_the_coupled_poisson_gaussian():
    config = declared.DPFedAvg(**SMALL)  # the default: exact noise, PLD through the coupling
    experiment, _, fields = calibrated(config)
    assert config.noise == "discrete" and experiment.coupled
    assert fields["accountant"] == "pld" and fields["delta_sampler"] == 0.0
    grid, dimension = fields["grid_norm"], experiment.dimension
    bound = squared_bound(grid, dimension)
    z = float(np.float32(fields["noise_multiplier"]))  # as it ran
    coupled = math.sqrt(z**2 * bound - 9.0) / math.sqrt(bound)
    rate = config.cohort_size / config.clients
    sampled = dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(coupled))
    expected = _pld_epsilon(sampled, config.rounds, fields["delta_accountant"])
    assert fields["epsilon_certified"] == pytest.approx(expected, rel=1e-9)
    assert fields["epsilon_certified"] <= config.epsilon
    variation = dimension * config.rounds * coupling_variation_per_coordinate()
    assert fields["delta_coupling"] == pytest.approx((1 + math.e) * variation, rel=1e-9)
    total = fields["delta_accountant"] + fields["delta_overflow"] + fields["delta_coupling"]
    assert total <= config.delta * (1 + 1e-12)
    # negative control: the same multiplier without the cohort's sampling spends far more
    unsampled = _pld_epsilon(dp_accounting.GaussianDpEvent(coupled), config.rounds, 1e-4)
    assert unsampled > 3 * fields["epsilon_certified"]


def test_the_coupled_exact_noise_needs_the_float_gaussians_multiplier():
    """N = 1,000, K = 100 (q = 0.1), eps 1, 20 rounds: z of the exact noise under PLD through
    the coupling, of the float noise under PLD, and of the exact noise under discrete RDP."""
    multipliers = {}
    for name, changes in [("coupled", dict()), ("float", dict(noise="float")),
                          ("discrete-rdp", dict(accountant="discrete-rdp"))]:  # fmt: skip
        multipliers[name] = calibrated(declared.DPFedAvg(**SMALL, **changes))[2]["noise_multiplier"]
    assert multipliers["coupled"] == pytest.approx(multipliers["float"], rel=1e-3)
    assert multipliers["discrete-rdp"] > 1.5 * multipliers["coupled"]


def test_dp_scaffolds_two_releases_are_both_coupled():
    config = declared.DPScaffold(dataset="digits-dirichlet", clients=30, dirichlet=0.1, batch=10,
                                 rounds=5, cohort_size=6, epsilon=4.0, delta=1e-4)  # fmt: skip
    experiment, _, fields = calibrated(config)
    assert experiment.coupled and fields["accountant"] == "pld"
    assert fields["epsilon_certified"] <= config.epsilon
    # two releases of d coordinates a round
    variation = 2 * experiment.dimension * config.rounds * coupling_variation_per_coordinate()
    assert fields["delta_coupling"] == pytest.approx((1 + math.e**4) * variation, rel=1e-9)


@pytest.mark.parametrize("noise", ["ddgauss", "skellam"])
def test_a_secure_sums_shares_are_not_coupled(noise):
    with pytest.raises(UsageError, match=f"--noise {noise} is accounted with --accountant "
                       "discrete-rdp"):  # fmt: skip
        declared.DPFedAvg(clients=1000, cohort_size=100, noise=noise, accountant="pld").check()


def test_adaptive_clippings_count_is_coupled_where_its_noise_allows():
    """The count's noise N_Z(0, (2 sigma_b)^2) is coupled only above 9 grid units: K = 100
    (sigma_b = 5) runs under PLD, both releases coupled and joined; K = 30 (sigma_b = 1.5) falls
    back to discrete RDP by default and refuses an explicit --accountant pld in one line."""
    big = declared.DPFedAvg(**SMALL, adaptive_clip=True)
    experiment, _, fields = calibrated(big)
    assert experiment.coupled and fields["accountant"] == "pld"
    assert fields["epsilon_certified"] <= big.epsilon
    # the update sum and the count: d + 1 coordinates a round
    variation = (experiment.dimension + 1) * big.rounds * coupling_variation_per_coordinate()
    assert fields["delta_coupling"] == pytest.approx((1 + math.e) * variation, rel=1e-9)
    small = dict(SMALL, cohort_size=30, clients=300, epsilon=4.0)
    fallback = declared.DPFedAvg(**small, adaptive_clip=True)
    assert calibrated(fallback)[2]["accountant"] == "discrete-rdp"
    with pytest.raises(UsageError, match=r"raise --count-noise.*--accountant discrete-rdp"):
        calibrated(declared.DPFedAvg(**small, adaptive_clip=True, accountant="pld"))
