"""DP-FTRL on the integer grid (``--noise discrete``, its default):

- the run's node noise is exact discrete Gaussian noise on integer block sums
  (:class:`~jfed.privacy.DiscreteTreeSum`), the tree's for ``--noise-strategy tree`` and trees of
  one round for ``independent``; the certified eps equals an independent computation: the
  continuous Gaussian the run's discrete Gaussian is coupled to, ``z_1 = sqrt(z^2 Delta^2 - 9) /
  Delta`` with ``Delta = sens sqrt(B)`` (B from Kairouz, Liu and Steinke's closed form, sens
  from the schedule's participations), accounted by dp-accounting's RDP, rel 1e-9; the
  coupling's share of delta from the total variation's closed form. Negative control: a
  sensitivity of one participation fewer (a ledger that missed one) certifies less;
- the record says what ran (the grid, its inflation, the exact mechanism, no float reach) and
  the float choice draws what it drew before the grid existed (fixed-seed values recorded then).

The audit of the grid tree is in tests/test_audit_client_state.py.
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from experiments import calibrated, coupling_variation_per_coordinate, innermost, squared_bound

import jfed
from jfed.methods import declared
from jfed.methods.dp_fedavg import NOISE_CHOICES
from jfed.privacy import DiscreteTreeSum

FTRL = dict(dataset="digits-dirichlet", clients=40, dirichlet=0.1, batch=10, cohort_size=10,
            rounds=12, epsilon=3.0, delta=1e-4, accountant="rdp")  # fmt: skip
# cyclic groups of 10 out of 40 (b = 4), a tree restarted every pass of 4 rounds: each client
# takes part k = 3 times, once per tree; a leaf lies under 3 drawn nodes (levels of a tree of 4)
STRATEGIES = {
    "tree": (dict(), 3.0, 7),  # (changes, sens, node draws per tree of 4 rounds: 1 + 2 + 1 + 3)
    "tree-no-honaker": (dict(honaker=False), 3.0, 4),  # one entering node a round
    "independent": (dict(noise_strategy="independent"), math.sqrt(3.0), 4),
}


def _rdp_epsilon(z: float, delta: float) -> float:
    accountant = dp_accounting.rdp.RdpAccountant()
    return accountant.compose(dp_accounting.GaussianDpEvent(z)).get_epsilon(delta)


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_a_grid_run_certifies_the_coupled_gaussian_of_its_node_noise(strategy):
    changes, sens, draws_per_tree = STRATEGIES[strategy]
    config = declared.DPFTRL(**FTRL, **changes)
    experiment, _, fields = calibrated(config)
    inner = innermost(experiment.algorithm.aggregator)
    assert isinstance(inner, DiscreteTreeSum)
    assert inner.grid_norm == fields["grid_norm"] == experiment.grid_norm
    assert fields["sensitivity"] == pytest.approx(sens, rel=1e-12)
    assert fields["participations"] == 3 and fields["delta_sampler"] == 0.0

    grid, dimension = fields["grid_norm"], experiment.model.parameter_count()
    bound = squared_bound(grid, dimension)
    assert fields["noise_inflation"] == pytest.approx(math.sqrt(bound) / grid, rel=1e-12)
    l2 = sens * math.sqrt(bound)
    z = float(np.float32(fields["noise_multiplier"]))  # the multiplier as it ran (float32)
    coupled = math.sqrt(z**2 * l2**2 - 9.0) / l2
    expected = _rdp_epsilon(coupled, fields["delta_accountant"])
    assert fields["epsilon_certified"] == pytest.approx(expected, rel=1e-9)
    assert fields["epsilon_certified"] <= config.epsilon

    coordinates = dimension * draws_per_tree * 3
    coupling = (1 + math.exp(config.epsilon)) * coordinates * coupling_variation_per_coordinate()
    assert fields["delta_coupling"] == pytest.approx(coupling, rel=1e-9)
    assert fields["delta_accountant"] + fields["delta_coupling"] <= config.delta * (1 + 1e-12)
    # the node noise drawn is at least the calibrated one (2^k m >= (z Delta)^2 grid units)
    assert fields["sigma"] >= z * config.update_clip * sens * math.sqrt(bound) / grid
    # negative control: one participation fewer (sensitivity sqrt(k - 1) / sqrt(k) of it)
    fewer = coupled * sens / (sens * math.sqrt(2.0 / 3.0))
    assert _rdp_epsilon(fewer, fields["delta_accountant"]) < 0.9 * fields["epsilon_certified"]


def test_a_grid_run_records_the_exact_mechanism_and_the_float_choice_draws_as_before():
    """The default run's record: the exact mechanism, the grid's fallbacks (none), the notion
    without the float label, accounted by PLD (the schedule's) through the coupling. The float
    choice's values at this seed, recorded before the grid was offered: test accuracy
    0.2353253811597824 (tree) and 0.20889969170093536 (independent), sigma 2.9964908082166866
    and 1.7300247747481436. Compared within a tolerance, not bit for bit: sigma (z from a host
    float64 calibration search, times the schedule's sensitivity) to 1e-12 relative, as its last
    digits differ across machines (libm, BLAS, FFT); the accuracy (a float32 mean over the
    device's predictions) to 1e-5, float32's rounding across CPUs' instruction sets. A changed
    draw moves either by far more (the exact run's accuracy, the negative control)."""
    common = dict(clients=200, cohort_size=20, rounds=12, epsilon=3.0, delta=1e-4)
    exact = jfed.run(declared.DPFTRL(**common))
    assert exact["noise"] == "discrete" and exact["accountant"] == "pld"
    assert exact["mechanism_model"] == NOISE_CHOICES["discrete"].model
    assert "not modelled" not in exact["notion"] and exact["rounding_fallbacks"] == 0
    assert exact["epsilon_certified"] <= 3.0 and exact["delta_coupling"] < 1e-60
    for changes, accuracy, sigma in [
        (dict(), 0.2353253811597824, 2.9964908082166866),
        (dict(noise_strategy="independent"), 0.20889969170093536, 1.7300247747481436),
    ]:
        record = jfed.run(declared.DPFTRL(**common, **changes, noise="float"))
        assert record["test_accuracy"] == pytest.approx(accuracy, rel=1e-5)
        assert record["sigma"] == pytest.approx(sigma, rel=1e-12)
        assert "not modelled" in record["notion"] and "grid_norm" not in record
    # the exact draws are not the float ones (changed on purpose, the CHANGELOG says so)
    assert exact["test_accuracy"] != pytest.approx(0.2353253811597824, rel=1e-5)
