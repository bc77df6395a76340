"""Every delta term from the object that causes it (docs/guarantee.md):

- the certified eps, delta terms, noise multiplier and every privacy field of one setting each of
  DP-FedAvg (float; discrete; float with adaptive clipping under a uniform cohort), DP-SCAFFOLD,
  DP-Ditto and DP-FTRL, pinned (rel 1e-9) before their calibrations moved onto the base
  experiment's one path;
"""

from __future__ import annotations

import functools

import pytest
from experiments import calibrated

from jfed.methods import declared

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
