"""Every delta term from the object that causes it (docs/concepts/guarantee.md):

- the certified eps, delta terms, noise multiplier and every privacy field of one setting each of
  DP-FedAvg (float; discrete; float with adaptive clipping under a uniform cohort), DP-SCAFFOLD,
  DP-Ditto and DP-FTRL, pinned (rel 1e-9) before their calibrations moved onto the base
  experiment's one path;
- a plug-in with a padded Poisson cohort and float Gaussian noise, written with no ``calibrate``
  of its own, gets DP-FedAvg's certified eps and every delta term of the same events (rel
  1e-9), and the float noise's label; negative control: the same plug-in on a float sum that
  states no reach loses the reach term and the label, and its eps moves.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from experiments import calibrated

from jfed import privacy
from jfed.data.population import ArrayClients
from jfed.engine import Poisson
from jfed.methods import (
    EPSILON,
    OPEN_UNIT,
    Config,
    Experiment,
    Metrics,
    Output,
    build_experiment,
    declared,
    integers,
    param,
    register_method,
)
from jfed.methods.dp_fedavg import CALIBRATION_DISCRETIZATION, CALIBRATION_TOLERANCE, IDEAL

DIGITS = dict(dataset="digits-dirichlet", clients=30, dirichlet=0.1, batch=10)
SMALL = dict(DIGITS, rounds=5, cohort_size=6, epsilon=4.0, delta=1e-4)
SETTINGS = {
    "dp-fedavg-float": ("DPFedAvg", dict(noise="float")),
    "dp-fedavg-discrete": ("DPFedAvg", {}),
    "dp-fedavg-float-adaptive-uniform": (
        "DPFedAvg", dict(noise="float", adaptive_clip=True, count_noise=20.0, cohort="uniform"),
    ),
    "dp-scaffold": ("DPScaffold", {}),
    "dp-ditto-float": ("DPDitto", dict(noise="float")),
    "dp-ftrl": ("DPFTRL", {}),
}  # fmt: skip
"""One setting of each built-in method on a sampled cohort or schedule (tiny: 30 clients)."""

PINNED = {'dp-ditto-float': {'accountant': 'pld',
                    'adjacency': 'add-or-remove',
                    'delta': 0.0001,
                    'delta_accountant': 9.986637348120815e-05,
                    'delta_overflow': 3.362651879184628e-08,
                    'delta_sampler': 2.0539125955565396e-15,
                    'epsilon_certified': 3.999356672664832,
                    'mechanism_model': 'ideal real-valued mechanism; floating-point sampling not '
                                       'modelled',
                    'noise_multiplier': 0.8707077526606313,
                    'notion': 'central (eps, delta)-DP, user-level, add-or-remove adjacency (ideal '
                              'real-valued mechanism; floating-point sampling not modelled)',
                    'overflow_probability_per_round': 1.2096272545687292e-10,
                    'protected': "one client's whole data (all its records)",
                    'sampling_rate': 0.2,
                    'sigma': 0.8707077526606313,
                    'trust_model': 'a trusted server clips, sums and adds the noise'},
 'dp-fedavg-discrete': {'accountant': 'pld',
                        'adjacency': 'add-or-remove',
                        'count_noise_std': 0.0,
                        'delta': 0.0001,
                        'delta_accountant': 9.996637348120816e-05,
                        'delta_coupling': 2.5369304342503073e-72,
                        'delta_overflow': 3.362651879184628e-08,
                        'delta_sampler': 0.0,
                        'epsilon_certified': 3.999356291242328,
                        'grid_norm': 4096,
                        'mechanism_model': 'exact: updates rounded to an integer grid (conditional '
                                           'randomized rounding), an integer sum, discrete '
                                           'Gaussian noise sampled exactly in integer arithmetic',
                        'noise_inflation': 1.0001273074176509,
                        'noise_multiplier': 0.8706566095352173,
                        'notion': 'central (eps, delta)-DP, user-level, add-or-remove adjacency',
                        'overflow_probability_per_round': 1.2096272545687292e-10,
                        'protected': "one client's whole data (all its records)",
                        'sampling_rate': 0.2,
                        'sigma': 0.8708046745682984,
                        'trust_model': 'a trusted server clips, sums and adds the noise',
                        'update_noise_multiplier': 0.8706566095352173},
 'dp-fedavg-float': {'accountant': 'pld',
                     'adjacency': 'add-or-remove',
                     'count_noise_std': 0.0,
                     'delta': 0.0001,
                     'delta_accountant': 9.986637348120815e-05,
                     'delta_overflow': 3.362651879184628e-08,
                     'delta_sampler': 2.0539125955565396e-15,
                     'epsilon_certified': 3.999356672664832,
                     'mechanism_model': 'ideal real-valued mechanism; floating-point sampling not '
                                        'modelled',
                     'noise_multiplier': 0.8707077503204346,
                     'notion': 'central (eps, delta)-DP, user-level, add-or-remove adjacency '
                               '(ideal real-valued mechanism; floating-point sampling not '
                               'modelled)',
                     'overflow_probability_per_round': 1.2096272545687292e-10,
                     'protected': "one client's whole data (all its records)",
                     'sampling_rate': 0.2,
                     'sigma': 0.8707077503204346,
                     'trust_model': 'a trusted server clips, sums and adds the noise',
                     'update_noise_multiplier': 0.8707077503204346},
 'dp-fedavg-float-adaptive-uniform': {'accountant': 'rdp',
                                      'adjacency': 'replace-one',
                                      'count_noise_std': 20.0,
                                      'delta': 0.0001,
                                      'delta_accountant': 9.99e-05,
                                      'delta_overflow': 0.0,
                                      'delta_sampler': 1.6653345369377348e-16,
                                      'epsilon_certified': 3.9999827202694522,
                                      'mechanism_model': 'ideal real-valued mechanism; '
                                                         'floating-point sampling not modelled',
                                      'noise_multiplier': 2.33419676194212,
                                      'notion': 'central (eps, delta)-DP, user-level, replace-one '
                                                'adjacency (ideal real-valued mechanism; '
                                                'floating-point sampling not modelled)',
                                      'overflow_probability_per_round': 0.0,
                                      'protected': "one client's whole data (all its records)",
                                      'sampling_rate': None,
                                      'sigma': 2.338181257247925,
                                      'trust_model': 'a trusted server clips, sums and adds the '
                                                     'noise',
                                      'update_noise_multiplier': 2.338181257247925},
 'dp-ftrl': {'accountant': 'pld',
             'adjacency': 'add-or-remove',
             'delta': 0.0001,
             'delta_accountant': 0.0001,
             'delta_coupling': 4.0590886948004907e-72,
             'delta_overflow': 0.0,
             'delta_sampler': 0.0,
             'epsilon_certified': 3.9999248076140157,
             'grid_norm': 4096,
             'mean_increment_noise_std': 0.28649800423363,
             'mechanism_model': 'exact: updates rounded to an integer grid (conditional randomized '
                                'rounding), an integer sum, discrete Gaussian noise sampled '
                                'exactly in integer arithmetic',
             'min_separation': 5,
             'noise_inflation': 1.0001273074176509,
             'noise_multiplier': 0.9587319346857883,
             'noise_strategy': 'tree',
             'notion': 'central (eps, delta)-DP, user-level, add-or-remove adjacency',
             'overflow_probability_per_round': 0.0,
             'participations': 1,
             'prefix_noise_std_final': 0.3469899396656431,
             'protected': "one client's whole data (all its records, over all its participations "
                          'in the schedule; no amplification by sampling assumed)',
             'sampling_rate': None,
             'sensitivity': 1.7320508075688772,
             'sigma': 1.6608132890996508,
             'trust_model': 'a trusted server clips, sums and adds correlated Gaussian noise'},
 'dp-scaffold': {'accountant': 'pld',
                 'adjacency': 'add-or-remove',
                 'delta': 0.0001,
                 'delta_accountant': 9.996637348120816e-05,
                 'delta_coupling': 5.073860868500615e-72,
                 'delta_overflow': 3.362651879184628e-08,
                 'delta_sampler': 0.0,
                 'epsilon_certified': 3.9999855004710017,
                 'grid_norm': 4096,
                 'mechanism_model': 'exact: updates rounded to an integer grid (conditional '
                                    'randomized rounding), an integer sum, discrete Gaussian noise '
                                    'sampled exactly in integer arithmetic',
                 'noise_inflation': 1.0001273074176509,
                 'noise_multiplier': 1.23119007073031,
                 'notion': 'central (eps, delta)-DP, user-level, add-or-remove adjacency',
                 'overflow_probability_per_round': 1.2096272545687292e-10,
                 'protected': "one client's whole data (all its records)",
                 'sampling_rate': 0.2,
                 'sigma': 1.2314046539927483,
                 'trust_model': 'a trusted server clips, sums and adds the noise'}}  # fmt: skip
"""Their privacy fields as the methods' own ``calibrate`` overrides computed them (recorded
before the overrides were removed)."""


@functools.cache
def fields_of(name: str) -> dict:
    """The privacy fields of setting ``name`` (:data:`SETTINGS`), calibrated once per module."""
    cls, changes = SETTINGS[name]
    return calibrated(getattr(declared, cls)(**SMALL, **changes))[2]


def same_fields(found: dict, pinned: dict) -> list[str]:
    """The fields where ``found`` differs from ``pinned``: a number by more than rel 1e-9, any
    other value at all, a field missing or added."""
    differ = sorted(set(found) ^ set(pinned))
    for name in sorted(set(found) & set(pinned)):
        a, b = found[name], pinned[name]
        numbers = isinstance(a, (int, float)) and isinstance(b, (int, float))
        if numbers and not isinstance(a, bool):
            if a != pytest.approx(b, rel=1e-9, abs=0.0):
                differ.append(name)
        elif a != b:
            differ.append(name)
    return differ


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_every_built_in_methods_certified_privacy_is_unchanged(name):
    assert same_fields(fields_of(name), PINNED[name]) == []


def test_the_pin_sees_a_moved_eps():
    """Negative control: a certified eps 1e-8 relative off, a delta term dropped."""
    pinned = PINNED["dp-fedavg-float"]
    moved = dict(pinned, epsilon_certified=pinned["epsilon_certified"] * (1 + 1e-8))
    assert same_fields(moved, pinned) == ["epsilon_certified"]
    dropped = {k: v for k, v in pinned.items() if k != "delta_overflow"}
    assert same_fields(dropped, pinned) == ["delta_overflow"]


@dataclass(frozen=True)
class PoissonConfig(Config):
    epsilon: float = param(4.0, "eps of the run", range=EPSILON, group="privacy")
    delta: float = param(1e-4, "delta of the run", range=OPEN_UNIT, group="privacy")
    rounds: int = param(5, "rounds", range=integers(1, 100), group="run")
    clients: int = param(30, "clients N", range=integers(2, 1000))
    cohort_size: int = param(6, "expected cohort K", range=integers(1, 1000))
    stated: bool = param(True, "the float sum states its reach (False: the negative control)")


@dataclass(frozen=True)
class SilentSum(privacy.GaussianSum):
    """Negative control: a float Gaussian sum that states no bounded reach."""

    reach_shifts = None


@dataclass(frozen=True)
class PoissonMean:
    """A plug-in's round: the mean update of a padded Poisson cohort through a float sum."""

    cohort: Poisson
    aggregator: privacy.GaussianSum

    def init(self, h, key):
        return jnp.zeros(2)

    def round(self, w, h, key, clients):
        def client(w, record, key):
            x, _ = record
            return x - w

        cohort = clients.sample(self.cohort)
        total, _, info = cohort.aggregate(self.aggregator, h["privacy"], (), client, w, key)
        return w + total / clients.n_clients, {"clipped": info["clipped_count"]}


@pytest.fixture(scope="module")
def plugin():
    """A plug-in with a Poisson cohort (capacity sized as DP-FedAvg sizes it) and float noise,
    and no calibration of its own: ``hyperparams`` only (and DP-FedAvg's search settings, so
    that the same z is found). Registered for this module."""
    from jfed.methods import METHODS

    @register_method(
        "test-poisson-float", config=PoissonConfig, summary="Poisson cohort, float noise",
        notion="central (eps, delta)-DP, user-level", protected="one client's whole data",
        trust_model="trusted server adds the noise",
        metrics=Metrics(selection="clipped", maximize=False, report="clipped"),
    )  # fmt: skip
    class PoissonFloat(Experiment):
        outputs = (Output("w", "state"), Output("clipped", "infos.clipped", reduce="mean"))
        search_discretization = CALIBRATION_DISCRETIZATION
        calibration_tolerance = CALIBRATION_TOLERANCE

        def __init__(self, config):
            super().__init__(config)
            rng = np.random.default_rng(0)
            x = rng.normal(size=(config.clients, 2))
            self.population = ArrayClients.from_numpy(x, np.zeros(config.clients))
            rate = config.cohort_size / config.clients
            cohort = Poisson.for_privacy(rate, config.clients, config.rounds, config.epsilon,
                                         config.delta)  # fmt: skip
            noise = privacy.GaussianSum() if config.stated else SilentSum()
            self.algorithm = PoissonMean(cohort, noise)

        def hyperparams(self, config, noise_multiplier):
            z = 0.0 if noise_multiplier is None else noise_multiplier
            return {"privacy": jax.tree.map(jnp.float32, privacy.GaussianSumParams(1.0, z))}

        def evaluate(self, outputs, config):
            return {"clipped": float(outputs["clipped"])}

    yield PoissonConfig
    METHODS.remove("test-poisson-float")


TERMS = ("epsilon_certified", "delta", "delta_accountant", "delta_overflow", "delta_sampler",
         "overflow_probability_per_round", "noise_multiplier", "sampling_rate", "accountant",
         "notion", "mechanism_model")  # fmt: skip
"""What a plug-in's record states as DP-FedAvg's does for the same events."""


def test_a_plugin_gets_dp_fedavgs_delta_terms_with_no_calibrate_of_its_own(plugin):
    config = plugin()
    experiment = build_experiment(config)
    assert type(experiment).calibrate is Experiment.calibrate  # no override anywhere
    dp_fedavg = fields_of("dp-fedavg-float")
    reference = build_experiment(declared.DPFedAvg(**SMALL, noise="float"))
    reference.prepare([reference.base_config])
    assert experiment.algorithm.cohort.capacity == reference.cohort.capacity  # the same events
    _, fields = experiment.calibrated(config)
    assert same_fields({k: fields[k] for k in TERMS}, {k: dp_fedavg[k] for k in TERMS}) == []
    assert fields["delta_overflow"] > 0 and fields["delta_sampler"] > 0
    assert fields["notion"].endswith(f"({IDEAL})") and fields["mechanism_model"] == IDEAL
    parts = fields["delta_accountant"] + fields["delta_overflow"] + privacy.SAMPLER_SHARE * 1e-4
    assert parts == pytest.approx(fields["delta"], rel=1e-12)


def test_a_float_sum_that_states_no_reach_gets_no_reach_term(plugin):
    """Negative control: the terms come from the objects, so an aggregator that states none
    adds none (and is not labelled), and the plug-in's record no longer matches DP-FedAvg's."""
    config = plugin(stated=False)
    _, fields = build_experiment(config).calibrated(config)
    assert fields["delta_sampler"] == 0.0 and "mechanism_model" not in fields
    assert IDEAL not in fields["notion"]
    assert fields["delta_overflow"] == fields_of("dp-fedavg-float")["delta_overflow"]
    pinned = fields_of("dp-fedavg-float")
    keys = ("epsilon_certified", "delta_accountant")
    moved = same_fields({k: fields[k] for k in keys}, {k: pinned[k] for k in keys})
    assert moved == ["delta_accountant", "epsilon_certified"]
