"""Private federated mean estimation in the user-level settings that locate the mean first
(local-user-small, local-user-large, central-user): unbiasedness, the central curator's
projection onto the parameter set, and the local search's exact law against its simulation.
Configurations and shared runs as in ``test_estimation.py``: the tests of one setting and
noise run one compiled program (same sites and replications; eps and mu are its numbers)."""

import numpy as np
import pytest
from test_estimation import UNBIASED, check_unbiased, config_of, sweep_rows, unbiased_cases

from jfed.methods import estimation as experiments


@pytest.fixture(scope="module")
def row_of():
    return sweep_rows()


SLOW_USER_LEVEL = {
    "local-user-small-gaussian": "a local Gaussian release: local-item-gaussian "
    "(test_estimation.py); this estimator: local-user-small-laplace",
    "local-user-large-gaussian": "a local Gaussian release: local-item-gaussian "
    "(test_estimation.py); this search: local-user-large-laplace",
}


@pytest.mark.parametrize("setting, mechanism", unbiased_cases(UNBIASED, SLOW_USER_LEVEL))
def test_every_user_level_estimator_is_unbiased(setting, mechanism, row_of):
    """|bias| within 4 standard errors of the replications (fixed seed)."""
    check_unbiased(row_of(config_of(setting, mechanism)))


def test_the_central_user_estimate_is_projected_onto_the_parameter_set(row_of):
    """At eps 0.05 on 256 sites the curator's Gaussian noise (its standard deviation on the
    average about 0.9) often carries the average past +-1 (mu = 0.9): every estimate lies in
    [-1, 1]. Negative control, in the same run: over 10% of the estimates sit exactly at +-1,
    where the noise alone puts almost no mass (the grid's outputs are C / (L S) apart), so
    without the projection those would have left [-1, 1]. (The program of the Gaussian
    unbiasedness check: eps and mu are its numbers.)"""
    config = config_of("central-user", "gaussian", epsilon=0.05, mean=0.9)
    estimates = row_of(config)["errors"] + config.mean
    assert np.all(np.abs(estimates) <= 1.0 + 1e-6)
    assert np.mean(np.isclose(np.abs(estimates), 1.0, atol=1e-6)) > 0.1


def test_the_search_law_matches_the_simulated_local_user_large_mse(row_of):
    """``search_law`` (the local-user-large MSE from the exact law of its votes, its 2^B vote
    outcomes enumerated) against 3,000 simulated replications at S = 100, n = 10^6, eps 1, where
    wrong turns are frequent (about 3 voters a stage): within 4 standard errors. Negative
    control: the law of the same search at eps 0.8 (votes flip more often) is caught. (The
    program of the unbiasedness check, at another eps.)"""
    config = config_of("local-user-large", epsilon=1.0)
    row = row_of(config)
    law = experiments.search_law(config)
    assert abs(row["privacy_mse"] - law["privacy_mse"]) <= 4 * row["mse_se"]
    assert 0.1 < law["miss"] < 0.9  # the regime where the search's law matters
    noisier = experiments.search_law(config.replace(epsilon=0.8))
    assert abs(row["privacy_mse"] - noisier["privacy_mse"]) > 4 * row["mse_se"]
    with pytest.raises(ValueError, match="2\\^B vote outcomes: B = 30 stages"):
        experiments.search_law(config.replace(units=10**9))  # 2^30 paths: refused
