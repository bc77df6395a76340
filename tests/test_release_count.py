"""Every release counted as often as it RUNS: a plug-in whose round releases inside lax.scan,
fori_loop or nested scans certifies the eps of the releases that ran (dp-accounting's for that
many releases); while_loop, cond and vmap are refused before any work; the program's own count
is checked after every run, and a ledger that miscounts (the negative control) loses its
certificate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jfed
from jfed import privacy
from jfed.data.population import ArrayClients
from jfed.engine import ReleaseCountError, trace_releases
from jfed.engine import release_count as release_count_module
from jfed.methods import (
    EPSILON,
    OPEN_UNIT,
    Config,
    Experiment,
    Metrics,
    Output,
    integers,
    param,
    register_method,
)
from jfed.methods import experiment as experiment_module
from jfed.sweep import runner

LOOPS = ("scan", "fori", "nested", "while", "cond", "vmap", "weak")
DELTA = 1e-5
ROUNDS = 2


@dataclass(frozen=True)
class LoopConfig(Config):
    epsilon: float = param(2.0, "eps of the run", range=EPSILON, group="privacy")
    delta: float = param(DELTA, "delta of the run", range=OPEN_UNIT, group="privacy")
    releases: int = param(1, "releases a round (the loop's length)", range=integers(1, 16))
    loop: str = param("scan", "the construct the releases run in", choices=LOOPS)
    rounds: int = param(ROUNDS, "rounds", range=integers(1, 10), group="run")


@dataclass(frozen=True)
class Looped:
    """A round of ``releases`` Gaussian sums, each over every client, made inside ``loop``."""

    releases: int
    loop: str
    aggregator: ClassVar = privacy.GaussianSum()

    def init(self, h, key):
        return jnp.zeros(2)

    def round(self, w, h, key, clients):
        def client(w, record, key):
            x, _ = record
            return x - w

        def release(w, step):
            total, _, _ = clients.aggregate(self.aggregator, h["privacy"], (), client, w,
                                            jax.random.fold_in(key, step))  # fmt: skip
            return w + 0.1 * total / clients.n_clients, None

        steps = jnp.arange(self.releases)
        if self.loop == "scan":  # the length read from the scanned array
            w, _ = lax.scan(release, w, steps)
        elif self.loop == "weak":  # a weakly typed carry: the body is traced twice
            count, _ = lax.scan(lambda c, s: (c + release(w, s)[0].sum(), None), 0, steps)
            w = w + count
        elif self.loop == "fori":
            w = lax.fori_loop(0, self.releases, lambda i, w: release(w, i)[0], w)
        elif self.loop == "nested":  # releases x 2
            w, _ = lax.scan(lambda w, s: lax.scan(release, w, jnp.arange(2) + 2 * s), w, steps)
        elif self.loop == "while":
            w, _ = lax.while_loop(lambda c: c[1] < self.releases,
                                  lambda c: (release(c[0], c[1])[0], c[1] + 1), (w, 0))  # fmt: skip
        elif self.loop == "cond":
            w = lax.cond(w.sum() >= 0.0, lambda w: release(w, 0)[0], lambda w: w, w)
        elif self.loop == "vmap":
            w = jax.vmap(lambda s: release(w, s)[0])(steps).mean(axis=0)
        return w, {"norm": jnp.linalg.norm(w)}


@pytest.fixture(scope="module")
def looped_method():
    """The plug-in, registered for this module (and forgotten after it)."""
    from jfed.methods import METHODS

    @register_method(
        "test-looped-releases", config=LoopConfig, summary="releases inside a loop",
        notion="central (eps, delta)-DP", protected="one client's record",
        trust_model="trusted server adds the noise",
        metrics=Metrics(selection="norm", maximize=False, report="norm"),
    )  # fmt: skip
    class LoopedExperiment(Experiment):
        outputs = (Output("w", "state"), Output("norm", "infos.norm", reduce="last"))
        default_accountant = privacy.Rdp()

        def __init__(self, config):
            super().__init__(config)
            rng = np.random.default_rng(0)
            self.population = ArrayClients.from_numpy(rng.normal(size=(6, 2)), np.zeros(6))
            self.algorithm = Looped(config.releases, config.loop)

        def hyperparams(self, config, noise_multiplier):
            z = jnp.float32(noise_multiplier)
            return {"privacy": privacy.GaussianSumParams(jnp.float32(1.0), z)}

        def evaluate(self, outputs, config):
            return {"norm": float(outputs["norm"])}

    yield LoopConfig
    METHODS.remove("test-looped-releases")


def rdp_epsilon(z: float, releases: int, delta: float = DELTA) -> float:
    """dp-accounting's eps at ``delta`` of ``releases`` Gaussian releases of multiplier ``z``."""
    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z),
                                                         releases))  # fmt: skip
    return accountant.get_epsilon(delta)


def expected_epsilon(record: dict, releases: int) -> float:
    """dp-accounting's eps of ``releases`` releases at the record's noise, at the delta its
    accountant was given (the run's, less the terms stated beside it where there are)."""
    delta = record.get("delta_accountant", record["delta"])
    return rdp_epsilon(record["noise_multiplier"], releases, delta)


def test_the_ledger_counts_each_construct(looped_method):
    ledger = {loop: trace_releases(Looped(3, loop), ArrayClients.from_numpy(np.ones((4, 2)),
                                                                           np.zeros(4)),
                                   {"privacy": privacy.GaussianSumParams(1.0, 1.0)})
              for loop in ("scan", "weak", "fori", "nested")}  # fmt: skip
    assert [len(ledger[loop].releases) for loop in ledger] == [1, 1, 1, 1]
    assert {loop: ledger[loop].releases_per_round for loop in ledger} == {
        "scan": 3, "weak": 3, "fori": 3, "nested": 6}  # fmt: skip
    assert ledger["fori"].releases[0].where == "inside lax.fori_loop of length 3"
    where = "inside lax.scan of length 2 inside lax.scan of length 3"
    assert ledger["nested"].releases[0].where == where


def certified(config: LoopConfig) -> dict:
    """The privacy fields a run of ``config`` is certified with (host side: nothing runs)."""
    return jfed.methods.build_experiment(config).calibrated(config)[1]


@pytest.mark.parametrize("releases", [1, 2, 4])
def test_releases_in_a_scan_certify_the_eps_of_those_that_ran(looped_method, releases):
    fields = certified(looped_method(releases=releases))
    assert fields["epsilon_certified"] == pytest.approx(expected_epsilon(fields,
                                                                         releases * ROUNDS),
                                                        rel=1e-9)  # fmt: skip
    assert fields["epsilon_certified"] <= 2.0
    # RDP's eps is a function of R / z^2: the noise grows as sqrt(R) (was the same for every R)
    z_one = certified(looped_method(releases=1))["noise_multiplier"]
    assert fields["noise_multiplier"] / z_one == pytest.approx(releases**0.5, rel=1e-4)


@pytest.mark.parametrize(("loop", "runs"), [("fori", 3), ("nested", 6), ("weak", 3)])
def test_fori_loop_and_nested_scans_certify_every_release(looped_method, loop, runs):
    fields = certified(looped_method(releases=3, loop=loop))
    assert fields["epsilon_certified"] == pytest.approx(expected_epsilon(fields, runs * ROUNDS),
                                                        rel=1e-9)  # fmt: skip


@pytest.mark.parametrize(("loop", "releases"), [("scan", 4), ("nested", 3)])
def test_the_runs_count_what_the_ledger_composed(looped_method, loop, releases):
    config = looped_method(releases=releases, loop=loop)
    record = jfed.run(config)
    assert "certificate_refused" not in record
    assert record["epsilon_certified"] == certified(config)["epsilon_certified"]


def test_vmapped_runs_count_their_own_releases(looped_method):
    # the accelerators' path: runs vmapped together, each with its own count
    from jfed.methods import build_experiment
    from jfed.sweep.runner import configurations, run_sweep

    base = looped_method(releases=2, loop="nested")
    rows = run_sweep(build_experiment(base), configurations(base, [1.0, 2.0]), None,
                     vector_width=2, slice_size=2, progress=False)  # fmt: skip
    assert [row["slice_size"] for row in rows] == [2, 2]
    assert all("certificate_refused" not in row for row in rows)
    assert [row["epsilon_certified"] for row in rows] == pytest.approx([1.0, 2.0], rel=1e-5)


@pytest.mark.parametrize(("loop", "construct"), [("while", "lax.while_loop"),
                                                 ("cond", "lax.cond"),
                                                 ("vmap", "jax.vmap")])  # fmt: skip
def test_uncountable_releases_are_refused_before_any_work(
    looped_method, monkeypatch, loop, construct
):
    def never(*args):
        raise AssertionError("compiled a program whose releases cannot be counted")

    monkeypatch.setattr(runner, "_compiled", never)
    with pytest.raises(ReleaseCountError, match=rf"^a release \(GaussianSum\) inside {construct}"):
        jfed.run(looped_method(releases=2, loop=loop))


def test_the_command_line_refuses_in_one_line(looped_method, capsys):
    assert jfed.main(["run", "test-looped-releases", "--releases", "2", "--loop", "while"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0
    assert "lax.while_loop" in error and "use lax.scan" in error


def test_a_ledger_that_misses_the_loop_loses_its_certificate(looped_method, monkeypatch):
    # negative control: the trace-time count disabled, every release counted once a round
    original = release_count_module.runs_here

    def once(*args, **kwargs):
        site = original(*args, **kwargs)
        return release_count_module.Site(1, site.where, site.origin)

    z_one = certified(looped_method(releases=1, epsilon=2.5))["noise_multiplier"]
    monkeypatch.setattr(experiment_module, "_CALIBRATIONS", {})  # forget the wrong z after
    monkeypatch.setattr("jfed.engine.clients.runs_here", once)
    config = looped_method(releases=4, epsilon=2.5)
    # the miscounted ledger calibrates the noise of R = 1 and certifies its eps
    fields = certified(config)
    assert fields["noise_multiplier"] == pytest.approx(z_one, rel=1e-6)
    assert fields["epsilon_certified"] <= 2.5
    assert expected_epsilon(fields, 4 * ROUNDS) > 4.0  # what the program it certifies releases

    record = jfed.run(config)  # the runner's count catches it: no eps
    assert record["epsilon_certified"] is None
    assert "made 8 private releases" in record["certificate_refused"]
    assert "ledger composed 2" in record["certificate_refused"]
    line = Experiment.summary(record)
    assert "no certificate" in line and "eps=" not in line


def test_dp_fedavg_is_unchanged():
    # its one release a round, composed as before (the runs of its own tests are checked
    # against the program's count by the runner, as every run is)
    from jfed.methods import build_experiment, declared

    config = declared.DPFedAvg(dataset="digits-dirichlet", clients=40, rounds=2, cohort_size=10,
                               batch=4, noise="float")  # fmt: skip
    experiment = build_experiment(config)
    experiment.prepare([config])
    ledger = experiment.ledger()
    assert [(r.runs_per_round, r.where) for r in ledger.releases] == [(1, "in the round's body")]
    assert experiment.releases_per_round() == 1
    hyper = experiment.hyperparams(config, 1.3)
    (release,) = ledger.releases
    one = release.cohort.sampled_event(release.aggregator.event(release.params(hyper)),
                                       release.n_clients)  # fmt: skip
    assert ledger.event(hyper, 2) == dp_accounting.SelfComposedDpEvent(one, 2)


def test_families_that_account_one_release_a_round_refuse_a_looped_one():
    """Silo, regression and estimation experiments compose one release a round: a ledger whose
    release runs 3 times a round (or that holds two) is refused in one line naming the loop,
    not accounted once. Negative controls: the same release at one run, or in a loop whose
    steps take each client once (``disjoint_steps``), is returned."""
    import dataclasses

    from jfed.engine.clients import Ledger
    from jfed.methods import build_experiment, declared

    experiment = build_experiment(declared.NoisyMBSGD(dataset="digits-bylabel", seed=0))
    (release,) = experiment.ledger().releases
    assert Ledger([release]).only_release("a silo round") is release
    looped = dataclasses.replace(release, runs_per_round=3, where="inside lax.scan of length 3")
    with pytest.raises(ValueError, match=r"runs 3 times a round \(inside lax.scan of length 3\)"):
        Ledger([looped]).only_release("a silo round")
    with pytest.raises(ValueError, match="this round recorded 2"):
        Ledger([release, release]).only_release("a silo round")
    disjoint = dataclasses.replace(looped, disjoint_steps=True)
    assert Ledger([disjoint]).only_release("a silo round") is disjoint
    # the silo family's accounting reads the ledger through it
    experiment.ledger = lambda: Ledger([looped])
    with pytest.raises(ValueError, match="a silo round accounts its release once a round"):
        experiment.composed_event(None)
