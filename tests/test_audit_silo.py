"""The silo methods' audit (``--audit-canaries M`` on noisy-mbsgd): canary RECORDS in the
smallest silo, Poisson-sampled at the silo's rate, clipped and noised with its own records.

Checked here: a correct run's one-run lower bound stays below its certified eps; the certificate
and the calibrated noise do not change with the audit; the flag's misuses are
refused in one line. What is not shown: at the silo data sets' dimensions (d = 20 to 64) the
canaries' cosines with a silo's release are dominated by the real records' gradients, so a run
with a tenth of its noise also audits at 0 (measured on digits-evenodd, 200 and 1,000 canaries):
the silo audit has no power there (see the silo guide).
"""

from __future__ import annotations

import pytest

import jfed
from jfed._validation import UsageError
from jfed.methods import declared

AUDITED = dict(sampling="poisson", rounds=10)


@pytest.fixture(scope="module")
def runs():
    plain = jfed.run(declared.NoisyMBSGD(**AUDITED))
    audited = jfed.run(declared.NoisyMBSGD(**AUDITED, audit_canaries=200))
    return plain, audited


def test_a_correct_silo_run_audits_below_its_certified_epsilon(runs):
    _, record = runs
    assert record["audit_canary_count"] == 200
    assert record["audit_estimator"].startswith("one-run") and record["audit_confidence"] == 0.95
    assert 0.0 <= record["audit_epsilon_lower"] <= record["epsilon_certified"] <= 1.0 + 1e-9
    assert record["audit_delta"] == pytest.approx(record["delta"], rel=1e-12)
    assert "one canary record of one silo" in record["audit_notion"]
    assert record["audit_silo"] in range(record["n_silos"])


def test_the_audit_leaves_the_certificate_and_the_real_records_draws(runs):
    plain, audited = runs
    assert not any(name.startswith("audit_epsilon") for name in plain)
    assert audited["epsilon_certified"] == plain["epsilon_certified"]
    assert audited["sigma_per_silo"] == plain["sigma_per_silo"]  # the same calibrated noise


@pytest.mark.parametrize(("changes", "message"), [
    (dict(audit_canaries=1), "at least 2"),
    (dict(audit_canaries=10, sampling="with-replacement"), "--sampling poisson"),
])  # fmt: skip
def test_an_audit_the_silo_method_cannot_run_is_refused(changes, message):
    with pytest.raises(UsageError, match=message):
        jfed.run(declared.NoisyMBSGD(**{**AUDITED, **changes}))
