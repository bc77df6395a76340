"""Audits of the local randomizers as the methods run them, and ``jfed audit``.

Each honest randomizer stays below its claimed eps (the bound holds with probability 0.95 per
audit, and the seeds are fixed); each under-noised variant is caught: its lower bound exceeds the
claim. Sample sizes: with N samples per input no bound much exceeds ln(N / 6), so the negative
controls run the randomizer at an eps (or noise) whose true eps is far above the claim.
"""

import json

import jax
import numpy as np
import pytest

from jfed.algorithms import modulated
from jfed.cli.main import main
from jfed.privacy import audit

SAMPLES = 40_000


@pytest.mark.parametrize(
    "run, kwargs, control",
    [
        (audit.audit_two_point, {}, {"run_epsilon": 3.0}),
        (audit.audit_randomized_response, {}, {"run_epsilon": 3.0}),
        (audit.audit_gaussian, {"delta": 1e-5}, {"noise_scale": 0.2}),
    ],
    ids=["two-point", "randomized-response", "gaussian"],
)
def test_honest_randomizers_pass_and_under_noised_ones_are_caught(run, kwargs, control):
    key = jax.random.key(3)
    honest = run(key, 1.0, samples=SAMPLES, **kwargs)
    assert not honest.caught and honest.result.epsilon_lower_bound <= 1.0
    if run is audit.audit_gaussian:
        # at delta = 1e-5 the bound rests on a tail of ~1e-2 of 40,000 samples: it spreads from 0
        # to 0.65 across keys (sd about 0.14), so its tightness is the mean over 8 keys (sd 0.05)
        bounds = [run(jax.random.key(s), 1.0, samples=SAMPLES, **kwargs).result for s in range(8)]
        assert np.mean([b.epsilon_lower_bound for b in bounds]) > 0.25
    else:
        assert honest.result.epsilon_lower_bound > 0.5  # the canaries are the worst case: tight
    under_noised = run(key, 1.0, samples=SAMPLES, **kwargs, **control)
    assert under_noised.caught, under_noised.record()
    assert under_noised.verdict == "VIOLATED"


def test_the_modulated_message_passes_and_an_under_noised_one_is_caught():
    key = jax.random.key(4)
    honest = modulated.audit_report(key, 2.0, 1e-5, samples=SAMPLES)
    assert not honest.caught
    under_noised = modulated.audit_report(key, 2.0, 1e-5, samples=SAMPLES, noise_scale=0.1)
    assert under_noised.caught, under_noised.record()


def test_a_claim_beyond_what_the_samples_detect_is_never_consistent():
    """Randomized response run at eps 50 answers truthfully in float32 every time (eps =
    infinity). Claimed at 20, its lower bound (about 9.9 from 20,000 evaluation samples) stays
    below the claim, yet the claim is not "consistent": no sample could have refuted it."""
    key = jax.random.key(11)
    infinite = audit.audit_randomized_response(key, 20.0, samples=SAMPLES, run_epsilon=50.0)
    assert not infinite.caught and infinite.result.epsilon_lower_bound < 20.0
    assert infinite.detectable_epsilon < 20.0
    assert infinite.verdict == "inconclusive" and infinite.record()["verdict"] == "inconclusive"
    # the same randomizer claimed below the samples' reach is caught
    assert audit.audit_randomized_response(key, 5.0, samples=SAMPLES, run_epsilon=50.0).caught
    # and an honest claim below the reach is consistent
    honest = audit.audit_randomized_response(key, 2.0, samples=SAMPLES)
    assert honest.verdict == "consistent" and 2.0 < honest.detectable_epsilon


def test_jfed_audit_prints_a_table_and_writes_the_record(capsys):
    argv = ["audit", "two-point", "--epsilon", "0.5,1", "--samples", "20000"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "pure eps-LDP" in out and "any two inputs" in out and "consistent" in out
    assert "VIOLATED" not in out.splitlines()[1] + out.splitlines()[2]  # the two rows
    assert main([*argv, "--json", "-"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert [a["claimed_epsilon"] for a in record["audits"]] == [0.5, 1.0]
    assert all(a["epsilon_lower_bound"] <= a["claimed_epsilon"] for a in record["audits"])
    assert all(a["largest_detectable_epsilon"] > 7 for a in record["audits"])  # 10,000 each
    assert main(["audit", "two-point", "--epsilon", "20", "--samples", "20000"]) == 0
    out = capsys.readouterr().out
    assert "detectable up to" in out and "inconclusive" in out.splitlines()[1]
    assert main(["audit", "ldp-fl", "--epsilon", "1", "--samples", "20000", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["audits"][0]["randomizer"] == "two-point"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["audit", "two-point", "--epsilon", "0"], "expected --epsilon > 0"),
        (["audit", "gaussian", "--epsilon", "1", "--delta", "2"], "expected --delta in (0, 1)"),
        (["audit", "two-point", "--epsilon", "1", "--samples", "5"], "expected --samples in"),
        (["audit", "laplace", "--epsilon", "1"], "invalid choice: 'laplace'"),
    ],
)
def test_bad_audit_input_is_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("jfed: error:") and message in err and "\n" not in err, err
