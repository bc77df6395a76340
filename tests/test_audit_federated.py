"""An empirical audit inside a DP-FedAvg run (``--audit-canaries M``): canary clients go through
the same clipping, sampling and noise as the real ones, and the one-run lower bound of Steinke,
Nasr and Jagielski (2023) from their scores is reported beside the certified eps.

At a fixed seed the correct run's lower bound stays below its certified eps (at the bound's 95%
confidence), and the same run with its noise divided by 10 - a deliberately broken release, not
a user option: the noise drawn inside the aggregator is scaled down while the record still
certifies the calibrated noise - gives a lower bound ABOVE the eps it claims. The real clients'
draws do not change with the audit (checked on the first round's clipping statistics, before
the canaries have moved the model).
"""

from __future__ import annotations

import pytest
from compiled import fresh_programs

import jfed
from jfed.methods import declared
from jfed.privacy import aggregators
from jfed.privacy.discrete_aggregators import DiscreteGaussianSum
from jfed.sweep import runner

AUDITED = dict(clients=1000, rounds=12, cohort_size=100, hidden=32, epsilon=1.0, delta=1e-5)


@pytest.fixture
def broken_noise(monkeypatch):
    """Every aggregator's Gaussian noise (float or on the integer grid) drawn at a tenth of its
    scale (the record still states the calibrated one): the bug an audit must catch."""
    original = aggregators.gaussian_noise_tree
    monkeypatch.setattr(aggregators, "gaussian_noise_tree",
                        lambda key, tree, stddev: original(key, tree, 0.1 * stddev))  # fmt: skip
    # DP-FedAvg's default noise, the discrete Gaussian on the integer grid: its variance drawn
    # for a tenth of the noise multiplier (the event still states the calibrated one)
    grid_noise = DiscreteGaussianSum.noise_parameters
    monkeypatch.setattr(DiscreteGaussianSum, "noise_parameters", lambda self, params: grid_noise(
        self, params._replace(noise_multiplier=0.1 * params.noise_multiplier)))  # fmt: skip
    # the sweep runner's programs are traced afresh, through the patched code; JAX's own caches
    # hold no program of the noise (were one stale, the run would audit as the correct one and
    # fail the test), and every compiled program is forgotten after the test
    for cached in (runner._unit_function, runner._program, runner._compiled):
        cached.cache_clear()
    yield
    fresh_programs()


@pytest.fixture(scope="module")
def audited():
    """The correct run, audited (one run shared by the tests that read it)."""
    return jfed.run(declared.DPFedAvg(**AUDITED, audit_canaries=400))


def test_a_correct_run_audits_below_its_certified_epsilon(audited):
    record = audited
    assert record["audit_canary_count"] == 400
    assert record["audit_confidence"] == 0.95 and record["audit_estimator"].startswith("one-run")
    assert record["audit_epsilon_lower"] <= record["epsilon_certified"] <= 1.0
    assert record["audit_delta"] == pytest.approx(record["delta"], rel=1e-6)


def test_the_summary_line_shows_the_audits_bound(audited, monkeypatch, capsys):
    """``jfed run``'s line ends with the audit's bound (the run itself is the fixture's: the
    command's run is replaced by it); a run without canaries shows none (the negative control:
    the same line without the audit fields)."""
    from jfed.cli import main as cli

    sizes = "--clients 1000 --rounds 12 --cohort-size 100 --hidden 32 --epsilon 1 --delta 1e-5"
    argv = ["run", "dp-fedavg", *sizes.split(), "--audit-canaries", "400"]
    monkeypatch.setattr(cli, "_run", lambda args, config: audited)
    assert jfed.main(argv) == 0
    line = capsys.readouterr().out.strip()
    bound = f"audit eps >= {audited['audit_epsilon_lower']:.3g} (95% one-run bound, 400 canaries)"
    assert line.endswith(f"| {bound}") and "privacy: " in line
    plain = {k: v for k, v in audited.items() if not k.startswith("audit_")}
    monkeypatch.setattr(cli, "_run", lambda args, config: plain)
    assert jfed.main(argv[:-2]) == 0
    assert "audit" not in capsys.readouterr().out


def test_without_canaries_nothing_is_audited_and_the_real_clients_train_alike(audited):
    plain = jfed.run(declared.DPFedAvg(**AUDITED))
    assert not any(name.startswith("audit_epsilon") for name in plain)
    # the real clients draw from their own keys, whatever the canaries: in the first round
    # (the same model) their updates, hence their clipping statistics, are the same; later
    # rounds start from a model the canaries moved
    assert audited["clipped_fraction_per_round"][0] == plain["clipped_fraction_per_round"][0]
    assert audited["clipped_fraction_per_round"][1:] != plain["clipped_fraction_per_round"][1:]


# the broken runs come last: they forget every compiled program after them
# (compiled.fresh_programs), which a test after them would compile again
# measured at these seeds: float 2.44, discrete 2.07 (the default, certified through its
# coupled Gaussian by PLD: the float's z; 1.46 under the discrete RDP accountant's larger z);
# float runs with -m slow
FLOAT = pytest.param("float", 1.5, marks=pytest.mark.slow)


@pytest.mark.parametrize(("noise", "margin"), [FLOAT, ("discrete", 1.5)])
def test_a_run_with_a_tenth_of_its_noise_audits_above_what_it_claims(broken_noise, noise, margin):
    record = jfed.run(declared.DPFedAvg(**AUDITED, audit_canaries=400, noise=noise))
    claimed = record["epsilon_certified"]
    assert claimed == pytest.approx(1.0, rel=1e-4)  # the broken run still claims eps 1
    assert record["audit_epsilon_lower"] > margin * claimed
