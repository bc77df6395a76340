"""Privacy layer: aggregators, mechanisms, calibration and accounting, host-side float64.

Knows nothing about clients or models. Privacy is a piece of the computation: an aggregator
clips, sums and noises and states the event of its release from its own parameters; a run's
guarantee is the composition of those events, certified through ONE accountant system.

- :mod:`~jfed.privacy.aggregators`: ``GaussianSum``, ``QuantileAdaptiveGaussianSum``,
  ``FixedDenominatorMean``, ``PlainSum``, ``CohortMean``, ``LocalRandomizerSum`` (the DPQuery
  shape: ``init``, ``preprocess``, ``release``, ``event``); ``NOT_PRIVATE``, the diagnostics
  outside the guarantee.
- :mod:`~jfed.privacy.discrete_aggregators` (``DiscreteGaussianSum``, ``DiscreteLaplaceSum``,
  ``DiscreteQuantileAdaptiveSum``: central releases on an integer grid with exact discrete
  noise, :mod:`~jfed.privacy.discrete`)
  and :mod:`~jfed.privacy.distributed_dp` (``DistributedDiscreteGaussianSum``, ``SkellamSum``:
  secure aggregation, no trusted server); their events and RDP accountant in
  :mod:`~jfed.privacy.discrete_accounting` (``DiscreteRdp()``); :mod:`~jfed.privacy.exact_release`
  checks a release's stated guarantee on its exact output laws.
- :mod:`~jfed.privacy.accounting`: the accountant specs (``Pld()``, ``Rdp()``, ``Zcdp()``,
  ``Analytic()``, ``Classic()``, ``Basic()``, ``Advanced()``, ``OptimalPure()``,
  ``DiscreteRdp()``) in one table,
  :data:`ACCOUNTANTS`, each making a ``dp_accounting.PrivacyAccountant``; ``Adjacency``;
  ``certify`` turns the event a run emitted into its guarantee, ``calibrate`` /
  ``calibrate_grid`` find the noise for a target through the same accountant.
- :mod:`~jfed.privacy.accountants`: jfed's own accountants (zCDP, the analytic and classic
  Gaussian, basic, advanced and optimal composition, parallel composition) and the events
  dp-accounting lacks.
- :mod:`~jfed.privacy.zcdp`, :mod:`~jfed.privacy.gaussian` (classic and exact analytic),
  :mod:`~jfed.privacy.laplace`, :mod:`~jfed.privacy.anisotropic`, :mod:`~jfed.privacy.two_point`:
  closed forms, both ways; :mod:`~jfed.privacy.two_point` and
  :mod:`~jfed.privacy.randomized_response` sample exactly at every eps (64-bit thresholds).
- :mod:`~jfed.privacy.mechanisms`: mechanism objects that sample (jittable) and describe
  themselves (``dp_event``).
- :mod:`~jfed.privacy.privatizers`: clipping and noise over pytrees, the ``NoiseRandomizer``
  protocol; :mod:`~jfed.privacy.plan`: ``PrivacyPlan`` of the local randomizers.
- :mod:`~jfed.privacy.calibration`: subsampled Gaussian steps (``jfed account``).
- :mod:`~jfed.privacy.correlated`: DP-FTRL's correlated Gaussian noise (``TreeNoise``,
  ``BandedNoise``, ``BltNoise``, ``IndependentNoise``) in ``CorrelatedGaussianSum``;
  :mod:`~jfed.privacy.discrete_tree`: the tree on an integer grid with exact discrete Gaussian
  node noise (``DiscreteTreeSum``);
  :mod:`~jfed.privacy.participation`: ``Participation`` patterns and the sensitivity of a
  linear mechanism under them.
- :mod:`~jfed.privacy.shuffle`, :mod:`~jfed.privacy.last_iterate`: amplification by shuffling
  (closed form, and the numerical "clones" bound composed over many shuffles) and the
  last-iterate accountant of projected noisy SGD.
- :mod:`~jfed.privacy.audit`, :mod:`~jfed.privacy.canaries`: empirical lower bounds on eps.
"""

# Each public name and the module that defines it. They load on first use (PEP 562), so
# importing one light part of the layer (a closed form, the guarantee record) does not pay for
# dp-accounting, scipy.signal or JAX.
_EXPORTS = {
    "DiscreteRdp": "jfed.privacy.accounting",
    "DiscreteRdpAccountant": "jfed.privacy.discrete_accounting",
    "DiscreteGaussianDpEvent": "jfed.privacy.discrete_accounting",
    "SkellamDpEvent": "jfed.privacy.discrete_accounting",
    "discrete_gaussian_delta": "jfed.privacy.discrete_accounting",
    "discrete_gaussian_epsilon": "jfed.privacy.discrete_accounting",
    "DiscreteGaussianSum": "jfed.privacy.discrete_aggregators",
    "DiscreteGaussianSumParams": "jfed.privacy.discrete_aggregators",
    "DiscreteLaplaceSum": "jfed.privacy.discrete_aggregators",
    "DiscreteLaplaceSumParams": "jfed.privacy.discrete_aggregators",
    "DiscreteQuantileAdaptiveSum": "jfed.privacy.discrete_aggregators",
    "DiscreteTreeSum": "jfed.privacy.discrete_tree",
    "largest_tree_grid_norm": "jfed.privacy.discrete_tree",
    "DistributedDiscreteGaussianSum": "jfed.privacy.distributed_dp",
    "DistributedSumParams": "jfed.privacy.distributed_dp",
    "SkellamSum": "jfed.privacy.distributed_dp",
    "NOT_PRIVATE": "jfed.privacy.aggregators",
    "reach_delta": "jfed.privacy.accounting",
    "Basic": "jfed.privacy.accounting",
    "Classic": "jfed.privacy.accounting",
    "ParallelDpEvent": "jfed.privacy.accountants",
    "PrivacyPlan": "jfed.privacy.plan",
    "accountant_named": "jfed.privacy.accounting",
    "rounds_plan": "jfed.privacy.plan",
    "GaussianNoise": "jfed.privacy.privatizers",
    "NoiseRandomizer": "jfed.privacy.privatizers",
    "Analytic": "jfed.privacy.accounting",
    "AdvancedComposition": "jfed.privacy.accountants",
    "Advanced": "jfed.privacy.accounting",
    "ACCOUNTANTS": "jfed.privacy.accounting",
    "Adjacency": "jfed.privacy.guarantee",
    "AdaptiveClipParams": "jfed.privacy.aggregators",
    "Aggregator": "jfed.privacy.aggregators",
    "AnalyticGaussian": "jfed.privacy.accountants",
    "BasicComposition": "jfed.privacy.accountants",
    "ClassicGaussian": "jfed.privacy.accountants",
    "CohortMean": "jfed.privacy.aggregators",
    "FixedDenominatorMean": "jfed.privacy.aggregators",
    "GaussianSum": "jfed.privacy.aggregators",
    "GaussianSumParams": "jfed.privacy.aggregators",
    "LocalNoiseParams": "jfed.privacy.aggregators",
    "LocalRandomizerSum": "jfed.privacy.aggregators",
    "NoParams": "jfed.privacy.aggregators",
    "PlainSum": "jfed.privacy.aggregators",
    "QuantileAdaptiveGaussianSum": "jfed.privacy.aggregators",
    "as_accountant": "jfed.privacy.accounting",
    "calibrate_cached": "jfed.privacy.accounting",
    "calibrate_grid": "jfed.privacy.accounting",
    "combined_noise_multiplier": "jfed.privacy.aggregators",
    "poisson_sampled": "jfed.privacy.accounting",
    "rounds_of": "jfed.privacy.accounting",
    "sampled_without_replacement": "jfed.privacy.accounting",
    "update_noise_multiplier": "jfed.privacy.aggregators",
    "AnisotropicGaussianMechanism": "jfed.privacy.mechanisms",
    "ApproximateDpEvent": "jfed.privacy.accountants",
    "AuditResult": "jfed.privacy.audit",
    "OptimalPure": "jfed.privacy.accounting",
    "OptimalPureComposition": "jfed.privacy.accountants",
    "RandomizedResponseMechanism": "jfed.privacy.mechanisms",
    "RandomizerAudit": "jfed.privacy.audit",
    "audit_gaussian": "jfed.privacy.audit",
    "audit_randomized_response": "jfed.privacy.audit",
    "audit_two_point": "jfed.privacy.audit",
    "clones_delta": "jfed.privacy.shuffle",
    "clones_epsilon": "jfed.privacy.shuffle",
    "randomized_response_composition_delta": "jfed.privacy.accountants",
    "randomized_response_composition_epsilon": "jfed.privacy.accountants",
    "split_and_shuffle": "jfed.privacy.shuffle",
    "GaussianMechanism": "jfed.privacy.mechanisms",
    "LaplaceMechanism": "jfed.privacy.mechanisms",
    "LastIterateSetting": "jfed.privacy.last_iterate",
    "LocalRandomizer": "jfed.privacy.privatizers",
    "ParallelComposition": "jfed.privacy.accountants",
    "Pld": "jfed.privacy.accounting",
    "PrivacyGuarantee": "jfed.privacy.guarantee",
    "Rdp": "jfed.privacy.accounting",
    "TwoPointMechanism": "jfed.privacy.mechanisms",
    "Zcdp": "jfed.privacy.accounting",
    "ZcdpAccountant": "jfed.privacy.accountants",
    "analytic_gaussian_delta": "jfed.privacy.gaussian",
    "analytic_gaussian_epsilon": "jfed.privacy.gaussian",
    "analytic_gaussian_noise": "jfed.privacy.gaussian",
    "audit_threshold": "jfed.privacy.audit",
    "calibrate": "jfed.privacy.accounting",
    "calibrate_gaussian": "jfed.privacy.zcdp",
    "calibrate_noise_multiplier": "jfed.privacy.calibration",
    "least_within_reach": "jfed.privacy.calibration",
    "SAMPLER_SHARE": "jfed.privacy.calibration",
    "IDEAL_MECHANISM": "jfed.privacy.guarantee",
    "calibrate_noise_multipliers": "jfed.privacy.calibration",
    "certify": "jfed.privacy.accounting",
    "classic_gaussian_epsilon": "jfed.privacy.gaussian",
    "classic_gaussian_noise": "jfed.privacy.gaussian",
    "clip_per_example": "jfed.privacy.clipping",
    "clip_to_ball": "jfed.privacy.clipping",
    "clip_tree": "jfed.privacy.privatizers",
    "clip_tree_per_layer": "jfed.privacy.privatizers",
    "epsilon_for_noise": "jfed.privacy.calibration",
    "epsilon_from_rho": "jfed.privacy.zcdp",
    "epsilon_of_gaussian": "jfed.privacy.zcdp",
    "fixed_cohort_rounds_event": "jfed.privacy.accounting",
    "gaussian_noise_for_rho": "jfed.privacy.zcdp",
    "gaussian_noise_tree": "jfed.privacy.privatizers",
    "gaussian_rounds_event": "jfed.privacy.accounting",
    "gaussian_rho": "jfed.privacy.zcdp",
    "hockey_stick": "jfed.privacy.gaussian",
    "last_iterate_delta": "jfed.privacy.last_iterate",
    "last_iterate_epsilon": "jfed.privacy.last_iterate",
    "poisson_rounds_event": "jfed.privacy.accounting",
    "rho_from_epsilon": "jfed.privacy.zcdp",
    "shuffle_epsilon": "jfed.privacy.shuffle",
    "spent": "jfed.privacy.accounting",
    "subsampled_gaussian_event": "jfed.privacy.accountants",
    "tree_norm": "jfed.privacy.privatizers",
    "BandedNoise": "jfed.privacy.correlated",
    "BltNoise": "jfed.privacy.correlated",
    "CorrelatedGaussianSum": "jfed.privacy.correlated",
    "CorrelatedGaussianSumParams": "jfed.privacy.correlated",
    "IndependentNoise": "jfed.privacy.correlated",
    "TreeNoise": "jfed.privacy.correlated",
    "noise_matrix": "jfed.privacy.correlated",
    "Participation": "jfed.privacy.participation",
    "gram_sensitivity": "jfed.privacy.participation",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
