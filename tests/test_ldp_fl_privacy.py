"""LDP-FL's client-level guarantee, derived independently of the code that computes it.

A client's transcript is P two-point reports per round over R rounds, each pure eps0-LDP with
the likelihood ratio of binary randomized response. Its eps is checked against dp-accounting's
PLD of randomized response self-composed P R times (an independent implementation), and the
shuffled bound against the exact law of shuffled randomized-response bits (brute force).
"""

import contextlib
import io
import json
import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import privacy_loss_distribution
from scipy import optimize, stats

from jfed.cli.main import main
from jfed.methods.ldp_fl import LDPFLExperiment
from jfed.privacy import shuffle
from jfed.privacy.accountants import (
    randomized_response_composition_delta,
    randomized_response_composition_epsilon,
)

SMALL = ["--clients", "10", "--rounds", "2", "--local-epochs", "1", "--model", "logistic"]


def _pld_epsilon(epsilon0: float, count: int, delta: float, interval: float = 1e-4) -> float:
    """dp-accounting: randomized response of ratio e^eps0, self-composed ``count`` times (a
    pessimistic PLD: never below the exact eps; its losses rounded up to multiples of
    ``interval``, which overstates eps by at most ``count * interval``)."""
    flip = 2.0 / (math.exp(epsilon0) + 1.0)
    pld = privacy_loss_distribution.from_randomized_response(
        flip, 2, value_discretization_interval=interval
    )
    return pld.self_compose(count).get_epsilon_for_delta(delta)


@pytest.mark.parametrize("epsilon0, count", [(1.0, 10), (1.0, 100), (0.3, 400), (2.0, 50)])
def test_optimal_composition_matches_dp_accounting(epsilon0, count):
    """The exact optimal composition equals dp-accounting's PLD to its discretisation, never
    above it. Negative control: basic composition, count x eps0, is far off."""
    delta = 1e-5
    ours = randomized_response_composition_epsilon(epsilon0, count, delta)
    reference = _pld_epsilon(epsilon0, count, delta)
    assert ours <= reference + 1e-9
    assert reference - ours < 1e-3 * reference + 1e-3
    assert randomized_response_composition_delta(epsilon0, count, ours) <= delta * (1 + 1e-9)
    if epsilon0 <= 1.0 and count >= 100:  # where composition is far from linear
        assert count * epsilon0 > 1.2 * reference


def _shuffled_bits_delta(epsilon0: float, n: int, epsilon: float) -> float:
    """delta(eps) of the exact shuffled transcript of n randomized-response bits, the protected
    client's bit 0 -> 1, the others' 0: the number of reported ones (all a shuffle leaves)."""
    keep = math.exp(epsilon0) / (math.exp(epsilon0) + 1.0)
    others = stats.binom.pmf(np.arange(n), n - 1, 1.0 - keep)  # the others' reported ones
    p = np.zeros(n + 1)
    q = np.zeros(n + 1)
    p[:-1] += others * (1.0 - keep)
    p[1:] += others * keep  # the client holding 1 reports 1 with probability keep
    q[:-1] += others * keep
    q[1:] += others * (1.0 - keep)
    return float(max(np.sum(np.maximum(p - math.exp(epsilon) * q, 0.0)),
                     np.sum(np.maximum(q - math.exp(epsilon) * p, 0.0))))  # fmt: skip


@pytest.mark.parametrize("epsilon0, n", [(1.0, 5), (2.0, 20), (0.5, 50)])
def test_the_clones_pair_dominates_shuffled_randomized_response(epsilon0, n):
    """The numerical shuffling bound is never below the exact delta of shuffled bits (it
    dominates every eps0-LDP randomizer), and it amplifies: below the local eps0's delta.
    Negative control: the local report alone (n = 1) has a larger delta at eps0 / 2."""
    for epsilon in (0.0, epsilon0 / 4, epsilon0 / 2):
        exact = _shuffled_bits_delta(epsilon0, n, epsilon)
        assert shuffle.clones_delta(epsilon0, n, epsilon) >= exact - 1e-12
    assert shuffle.clones_delta(epsilon0, n, epsilon0 / 2) < _shuffled_bits_delta(
        epsilon0, 1, epsilon0 / 2
    )


def test_shuffled_eps_composes_below_the_local_transcript():
    """Composed shuffles: the PLD path (up to CLONES_PLD_MAX_COUNT) and the Renyi path beyond
    agree in order (Renyi is the looser) and both stay below the local transcript's eps."""
    count = shuffle.CLONES_PLD_MAX_COUNT
    pld = shuffle.clones_epsilon(1.0, 100, 1e-5, count)
    renyi = shuffle.clones_epsilon(1.0, 100, 1e-5, count + 1)
    local = randomized_response_composition_epsilon(1.0, count, 1e-5)
    assert pld < renyi < 2 * pld and renyi < local
    # a million shuffles answer at once and stay an upper bound of the same order
    huge = shuffle.clones_epsilon(1.0, 10, 1e-5, 10**6)
    assert huge < randomized_response_composition_epsilon(1.0, 10**6, 1e-5)


def _optimal_epsilon(event, delta: float) -> float:
    """eps at ``delta`` of a composition of ONE binary randomized response (``event``: nested
    self-compositions of it), by the optimal composition theorem written out here: the privacy
    loss of ``count`` reports with ``l`` of them flipped is ``(count - 2 l) eps0``, and
    ``delta(eps) = sum_l P(l) (1 - e^(eps - loss_l))_+`` is solved for eps."""
    count = 1
    while isinstance(event, dp_event.SelfComposedDpEvent):
        count, event = count * event.count, event.event
    assert isinstance(event, dp_event.RandomizedResponseDpEvent) and event.num_buckets == 2
    epsilon0 = math.log(2.0 / event.noise_parameter - 1.0)
    flips = np.arange(count + 1)
    p = stats.binom.pmf(flips, count, event.noise_parameter / 2.0)
    loss = (count - 2 * flips) * epsilon0

    def delta_at(epsilon: float) -> float:
        return float(np.sum(p * -np.expm1(np.minimum(epsilon - loss, 0.0))))

    return optimize.brentq(lambda e: delta_at(e) - delta, 0.0, count * epsilon0, xtol=1e-14,
                           rtol=1e-15, maxiter=500)  # fmt: skip


@pytest.fixture(scope="module")
def record():
    """The JSON record of ``jfed run ldp-fl`` on 3 of 10 clients a round, eps 2 per weight."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["run", "ldp-fl", *SMALL, "--fraction", "0.3", "--epsilon", "2", "--json",
                     "-"]) == 0  # fmt: skip
    return json.loads(out.getvalue())


def test_cli_run_selects_a_fraction_and_reports_accuracy(record):
    """3 of 10 clients a round: its accuracy, the noise-free run's, one per round, and the
    accountant that certified it (its eps is checked below)."""
    assert record["selected_per_round"] == 3
    assert 0.0 <= record["test_accuracy"] <= 1.0 and 0 < record["noise_free_test_accuracy"] <= 1
    assert len(record["test_accuracy_per_round"]) == 2
    assert "optimal composition" in record["accountant"]


def test_the_record_certifies_the_client_level_eps(record):
    """``epsilon_certified`` is the client's whole transcript (P weights x R rounds) by optimal
    composition at the record's delta, whatever the fraction selected (any client may take part
    in every round): exactly the optimal composition of the events built here (P two-point
    reports of eps0 per release, R releases; rel 1e-9), and within its discretisation of
    dp-accounting's PLD; the paper's per-weight eps is kept beside it as
    ``per_report_epsilon``; the summary leads with the client-level number. Negative controls:
    the per-weight eps is not what is certified, and the events of one round fewer or one
    weight fewer are told apart."""
    weights = record["weights_per_report"]
    assert weights == 64 * 10 + 10  # logistic regression on 8x8 images
    assert record["delta"] == pytest.approx(10**-1.1)  # N^-1.1, N = 10 clients
    assert record["releases_per_client"] == weights * 2

    def transcript(reports: int, rounds: int):
        report = dp_event.RandomizedResponseDpEvent(2.0 / (math.exp(2.0) + 1.0), 2)
        return dp_event.SelfComposedDpEvent(dp_event.SelfComposedDpEvent(report, reports), rounds)

    exact = _optimal_epsilon(transcript(weights, 2), record["delta"])
    assert record["epsilon_certified"] == pytest.approx(exact, rel=1e-9)
    for wrong in (transcript(weights, 1), transcript(weights - 1, 2)):
        assert record["epsilon_certified"] != pytest.approx(
            _optimal_epsilon(wrong, record["delta"]), rel=1e-9
        )
    # a grid of 1e-3 (the PLD of 1,300 reports at 1e-4 takes seconds): its rounding adds at most
    # 1,300 x 1e-3 = 1.3 to eps, below the tolerance 1e-3 x eps (eps near 2,044)
    reference = _pld_epsilon(2.0, weights * 2, record["delta"], interval=1e-3)
    assert record["epsilon_certified"] <= reference + 1e-9
    assert reference - record["epsilon_certified"] < 1e-3 * reference
    assert record["epsilon_certified"] != record["per_report_epsilon"] == 2.0
    assert record["epsilon_basic_composition"] == pytest.approx(2.0 * weights * 2)
    assert "anonymity" in record["per_report_notion"]
    # a local guarantee: any two datasets of one client (bounded adjacency)
    assert record["protected_unit"] == "client" and record["adjacency"] == "bounded"
    assert record["epsilon_shuffled"] <= record["epsilon_certified"]
    assert record["epsilon_certified"] < record["epsilon_basic_composition"]
    assert 0.0 <= record["test_accuracy"] <= 1.0
    line = LDPFLExperiment.summary(record)  # what `jfed run` prints
    assert line.startswith("ldp-fl (logistic): client-level eps = ")
    assert f"{record['epsilon_certified']:.4g}" in line.split("|")[0]
    assert "eps per weight 2 (the paper's claim" in line
