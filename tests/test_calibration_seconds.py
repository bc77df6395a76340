"""Calibration is visible and done once: every record states ``calibration_seconds`` (the host
time spent calibrating the noise to the target eps and certifying it), the summary line shows
it beside the run and compile times, and the seeds of a sweep share one search and one
certificate (:func:`jfed.privacy.accounting.certify` composes an event once per process)."""

from __future__ import annotations

import pytest

from jfed.methods import build_experiment, declared
from jfed.methods import experiment as experiment_module
from jfed.privacy import accounting
from jfed.sweep import configurations, run_sweep

TINY = dict(clients=60, records=8, rounds=3, cohort_size=10, batch=4, noise="float",
            accountant="rdp")  # fmt: skip
"""A DP-FedAvg run of seconds (float noise, the RDP accountant: its certificates are quick)."""


@pytest.fixture(scope="module")
def sweep():
    """``(rows, counts)`` of a sweep of 2 eps x 2 seeds from empty caches: ``counts`` the noise
    searches (:func:`accounting.calibrate`) and the events composed for a certificate."""
    counts = {"searches": 0, "certificates": 0}
    search, certified = accounting.calibrate, accounting._certified

    def counting_search(*args, **kwargs):
        counts["searches"] += 1
        return search(*args, **kwargs)

    def counting_certified(event, delta, accountant, adjacency):
        if (repr(event), float(delta), repr(accountant), adjacency) not in accounting._CERTIFIED:
            counts["certificates"] += 1
        return certified(event, delta, accountant, adjacency)

    base = declared.DPFedAvg(**TINY, delta=1e-4)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(experiment_module, "_CALIBRATIONS", {})
        patch.setattr(accounting, "_CERTIFIED", {})
        patch.setattr(accounting, "calibrate", counting_search)
        patch.setattr(accounting, "_certified", counting_certified)
        rows = run_sweep(build_experiment(base), configurations(base, [3.0, 5.0], 2), None,
                         progress=False)  # fmt: skip
    return rows, counts


def test_record_states_calibration_seconds(sweep):
    rows, _ = sweep
    for record in rows:
        assert isinstance(record["calibration_seconds"], float)
        assert 0.0 <= record["calibration_seconds"] < 120.0
        names = list(record)  # beside the other timings of the run section
        assert names.index("calibration_seconds") == names.index("run_seconds") + 1


def test_summary_shows_calibration(sweep):
    record = sweep[0][0]
    line = build_experiment(declared.DPFedAvg(**TINY)).summary(record)
    assert f"{record['calibration_seconds']:.2f} s calibration" in line
    assert line.index("s compile") < line.index("s calibration")


def test_seeds_of_a_sweep_calibrate_once(sweep):
    """Each eps is searched and certified once, whatever its seeds; the two eps are counted
    apart (the counts can see more than one: a negative control)."""
    rows, counts = sweep
    assert sorted((row["epsilon"], row["seed"]) for row in rows) == [
        (3.0, 0), (3.0, 1), (5.0, 0), (5.0, 1)]  # fmt: skip
    assert counts == {"searches": 2, "certificates": 2}
    by_eps = {}
    for row in rows:
        by_eps.setdefault(row["epsilon"], set()).add(row["epsilon_certified"])
    assert all(len(certified) == 1 for certified in by_eps.values())


def test_certify_composes_an_event_once(monkeypatch):
    monkeypatch.setattr(accounting, "_CERTIFIED", {})
    calls = []
    compose = accounting._composed
    monkeypatch.setattr(accounting, "_composed", lambda *a: calls.append(a) or compose(*a))
    event = accounting.poisson_rounds_event(1.1, 0.01, 100)
    stated = dict(notion="central (eps, delta)-DP", protected="one client's data",
                  trust_model="trusted server")  # fmt: skip
    first = accounting.certify(event, 1e-5, accountant=accounting.Rdp(), **stated)
    again = accounting.certify(event, 1e-5, accountant=accounting.Rdp(), **stated)
    assert first == again and len(calls) == 1
    accounting.certify(event, 1e-6, accountant=accounting.Rdp(), **stated)  # another delta
    assert len(calls) == 2
