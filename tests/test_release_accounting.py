"""A run's guarantee is what dp-accounting certifies for the releases its aggregators made.

For every built-in private method written on aggregators, the events its round emitted (traced
from the program: :func:`jfed.engine.trace_releases`) are composed over the rounds HERE, with
dp-accounting's own accountants, and the record's certified eps must equal that value (rel 1e-9).
Negative controls: an event that does not match the release (the noise multiplier doubled, the
cohort's sampling dropped) gives another eps, so the comparison would catch a method whose
certificate drifted from its program; and an aggregator whose parameters are computed in the
round (not read from the hyper-parameters) is refused when its releases are traced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import attr
import dp_accounting
import jax
import jax.numpy as jnp
import pytest
from dp_accounting import dp_event as events

from jfed import privacy
from jfed.engine import All, Poisson, Uniform, trace_releases
from jfed.methods import build_experiment, declared

SMALL = dict(clients=300, records=16, rounds=5, cohort_size=30, batch=8)


def _dp_accounting(name: str, adjacency: str) -> dp_accounting.PrivacyAccountant:
    """dp-accounting's accountant named by a record (PLD at jfed's certifying discretization)."""
    relation = {
        "add-or-remove": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        "replace-one": dp_accounting.NeighboringRelation.REPLACE_ONE,
    }[adjacency]
    if name == "pld":
        return dp_accounting.pld.PLDAccountant(relation, value_discretization_interval=1e-4)
    assert name == "rdp", name
    return dp_accounting.rdp.RdpAccountant(neighboring_relation=relation)


def _emitted(experiment, hyper) -> list:
    """The events one round of the experiment's program emits, traced (not restated)."""
    ledger = experiment.ledger()
    return [release.event(hyper) for release in ledger.releases]


FLOAT = dict(SMALL, noise="float")
CASES = [
    declared.DPFedAvg(**FLOAT, epsilon=3.0, delta=1e-4),
    declared.DPFedAvg(**FLOAT, epsilon=3.0, delta=1e-4, cohort="uniform"),
    declared.DPFedAvg(**FLOAT, epsilon=3.0, delta=1e-4, adaptive_clip=True),
    declared.DPFedAvg(**FLOAT, epsilon=3.0, delta=1e-4, clipping="per-layer", hidden=4),
]


@pytest.mark.parametrize("config", CASES, ids=["poisson", "uniform", "adaptive", "per-layer"])
def test_certified_epsilon_is_dp_accountings_for_the_emitted_events(config):
    experiment = build_experiment(config)
    experiment.prepare([config])
    hyper, fields = experiment.calibrated(config)
    emitted = _emitted(experiment, hyper)
    assert len(emitted) == 1  # one release a round: the noised average
    one_round = emitted[0]
    accountant = _dp_accounting(fields["accountant"], fields["adjacency"])
    accountant.compose(one_round, config.rounds)
    independent = accountant.get_epsilon(fields["delta_accountant"])
    assert fields["epsilon_certified"] == pytest.approx(independent, rel=1e-9)
    assert fields["epsilon_certified"] <= config.epsilon
    # the emitted event is the cohort's sampling of one Gaussian of the multiplier that ran
    gaussian = one_round.event
    assert isinstance(gaussian, events.GaussianDpEvent)
    if config.cohort == "uniform":
        assert isinstance(one_round, events.SampledWithoutReplacementDpEvent)
        assert gaussian.noise_multiplier == pytest.approx(fields["noise_multiplier"] / 2, 1e-12)
    else:
        assert isinstance(one_round, events.PoissonSampledDpEvent)
        assert one_round.sampling_probability == config.cohort_size / config.clients
        assert gaussian.noise_multiplier == pytest.approx(fields["noise_multiplier"], 1e-12)
    # negative controls: events that do not match the release give another eps
    wrong_noise = dp_accounting.GaussianDpEvent(2.0 * gaussian.noise_multiplier)
    resampled = attr.evolve(one_round, event=wrong_noise)  # the sampling kept, z doubled
    for event in (resampled, gaussian):  # and the cohort's sampling left out
        other = _dp_accounting(fields["accountant"], fields["adjacency"])
        other.compose(event, config.rounds)
        assert abs(other.get_epsilon(fields["delta_accountant"]) / independent - 1) > 0.05


@pytest.mark.parametrize("noise", ["discrete", "ddgauss"])
def test_the_grid_noises_certify_the_discrete_event_that_ran(noise):
    """The exact noise under --accountant discrete-rdp and the secure sum: the emitted event is
    the Poisson sampling of the discrete Gaussian the aggregator states at the multiplier that
    ran (the secure sum's with its shares), and the record's eps is that event's composition
    over the rounds under the discrete RDP accountant; the event with the noise doubled
    certifies another eps. (The exact noise's default, PLD through the coupled Gaussian:
    tests/test_grid_coupled.py.)"""
    config = declared.DPFedAvg(**SMALL, epsilon=3.0, delta=1e-4, noise=noise,
                               accountant="discrete-rdp")  # fmt: skip
    experiment = build_experiment(config)
    experiment.prepare([config])
    hyper, fields = experiment.calibrated(config)
    (one_round,) = _emitted(experiment, hyper)
    assert isinstance(one_round, events.PoissonSampledDpEvent)
    inner = one_round.event
    assert isinstance(inner, privacy.DiscreteGaussianDpEvent)
    assert inner.noise_multiplier == pytest.approx(fields["noise_multiplier"], rel=1e-12)
    assert inner.shares == (fields["min_clients"] if noise == "ddgauss" else 1)
    assert fields["adjacency"] == ("zero-out" if noise == "ddgauss" else "add-or-remove")
    composed = privacy.DiscreteRdpAccountant().compose(one_round, config.rounds)
    independent = composed.get_epsilon(fields["delta_accountant"])
    assert fields["epsilon_certified"] == pytest.approx(independent, rel=1e-9)
    louder = attr.evolve(
        one_round, event=attr.evolve(inner, noise_multiplier=2 * inner.noise_multiplier)
    )
    other = privacy.DiscreteRdpAccountant().compose(louder, config.rounds)
    assert other.get_epsilon(fields["delta_accountant"]) < 0.7 * independent


@dataclass(frozen=True)
class _Computed:
    """A round whose aggregator reads a noise multiplier it computed (doubled) from the
    hyper-parameters: what the accountant would not see."""

    aggregator: ClassVar = privacy.GaussianSum()

    def init(self, hyper, key):
        return jnp.zeros(2)

    def round(self, state, hyper, key, clients):
        params = privacy.GaussianSumParams(hyper.clip_norm, 2.0 * hyper.noise_multiplier)

        def client(broadcast, record, key):
            x, _ = record
            return x[:2]

        total, _, _ = clients.aggregate(self.aggregator, params, (), client, None, key)
        return total, {}


@dataclass(frozen=True)
class _Read(_Computed):
    def round(self, state, hyper, key, clients):
        def client(broadcast, record, key):
            x, _ = record
            return x[:2]

        view = clients.sample(Poisson(0.1))
        total, _, _ = view.aggregate(self.aggregator, hyper, (), client, None, key)
        return total, {}


def test_parameters_computed_in_the_round_are_refused_and_read_ones_are_traced():
    from jfed.data import SyntheticLinear

    population = SyntheticLinear.create(jax.random.key(0), 200, 3)
    hyper = jax.tree.map(jnp.float32, privacy.GaussianSumParams(1.0, 1.5))
    with pytest.raises(ValueError, match="read from the round's hyper-parameters unchanged"):
        trace_releases(_Computed(), population, hyper)
    ledger = trace_releases(_Read(), population, hyper)
    (release,) = ledger.releases
    assert release.cohort == Poisson(0.1) and release.n_clients == 200
    assert ledger.adjacency is privacy.Adjacency.ADD_OR_REMOVE
    event = ledger.event(hyper, rounds=3)
    expected = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(1.5)), 3
    )
    assert event == expected
    assert isinstance(All().sampled_event(event, 200), events.SelfComposedDpEvent)
    assert Uniform(10).adjacency is privacy.Adjacency.REPLACE_ONE
