"""DP-FTRL in federated learning (Kairouz et al. 2021) with tree aggregation, and its successors
with matrix-factorization noise (BLT: Dvijotham et al. 2024; McKenna 2024): DP-FedAvg's clients
under a participation schedule, their clipped updates summed with correlated Gaussian noise, and
server momentum on the released increments.

One round t, cohort = the schedule's clients of round t (:mod:`jfed.engine.schedules`, no
sampling: every client takes part at most once every b rounds):

1. each member trains the model as DP-FedAvg's client does and reports ``Delta_i``;
2. the aggregator (:class:`~jfed.privacy.correlated.CorrelatedGaussianSum`) clips each update to
   C and releases this round's sum plus this round's increment of the correlated noise, over a
   FIXED denominator (the expected cohort size): the running sum of the releases is the noised
   prefix sum of the mechanism (tree with restarts and Honaker's estimator, BLT, or independent
   noise, the DP-SGD-style baseline);
3. the server takes ``-release`` as its gradient with SGD momentum:
   ``m_t = beta m_{t-1} + release_t``, ``theta_{t+1} = theta_t + eta m_t``. With ``beta = 0``
   this is FTRL on the noised prefix sums, ``theta_{t+1} = theta_0 + eta sum_{s <= t}
   release_s``; the momentum is the papers' DP-FTRLM, heavy-ball momentum on the increments,
   a post-processing of the releases.

Privacy: the whole run is ONE Gaussian mechanism ``GaussianDpEvent(z)`` under add-or-remove
adjacency of one client (all its participations), its sensitivity computed for the schedule's
participation pattern; no amplification by sampling is assumed (the round's release is the
aggregator's share of that event, certified by the ledger as the run event).

References: Kairouz, McMahan, Song, Thakkar, Thakurta, Xu, "Practical and Private (Deep)
Learning without Sampling or Shuffling", ICML 2021; Choquette-Choo, McMahan, Rush, Thakurta,
"Multi-Epoch Matrix Factorization Mechanisms for Private Machine Learning", ICML 2023;
Dvijotham, McMahan, Pillutla, Steinke, Thakurta, "Efficient and Near-Optimal Noise Generation
for Streaming Differential Privacy", FOCS 2024; McKenna, "Scaling up the Banded Matrix
Factorization Mechanism for Differentially Private ML", 2024.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jfed.algorithms.local_training import LocalTraining, server_step, server_transform
from jfed.privacy.aggregators import FixedDenominatorMean
from jfed.privacy.correlated import CorrelatedGaussianSum
from jfed.privacy.privatizers import tree_norm

PyTree = Any


class Hyperparams(NamedTuple):
    """The traced numbers of one run (``f32[]`` each).

    Attributes:
      client_learning_rate: eta_l.
      server_learning_rate: eta.
      server_momentum: beta, heavy-ball momentum on the released increments.
      privacy: :class:`~jfed.privacy.correlated.CorrelatedGaussianSumParams` (clip C, noise
        multiplier z of the whole run), read unchanged.
    """

    client_learning_rate: jax.Array
    server_learning_rate: jax.Array
    server_momentum: jax.Array
    privacy: Any


class ServerState(NamedTuple):
    """The model, the momentum (the optimizer's state) and the noise generator's buffers."""

    params: PyTree
    optimizer: PyTree
    aggregator: PyTree


def ftrl_aggregator(
    noise: Any, participation: Any, denominator: float, wrap: Callable[[Any], Any] | None = None,
    noised_sum: Any = None,
) -> FixedDenominatorMean:  # fmt: skip
    """The clipped sum with correlated noise ``noise`` (a strategy of
    :mod:`jfed.privacy.correlated`) calibrated for ``participation``, over the fixed
    ``denominator``; ``wrap`` puts an aggregator around the sum (e.g. the canary clients of an
    audit, :class:`~jfed.privacy.canary_aggregator.WithCanaries`). ``noised_sum``: the sum
    itself, where it is not the float one (``CorrelatedGaussianSum(noise, participation)``),
    e.g. the tree on an integer grid (:class:`~jfed.privacy.DiscreteTreeSum`)."""
    if noised_sum is None:
        noised_sum = CorrelatedGaussianSum(noise, participation)
    return FixedDenominatorMean(wrap(noised_sum) if wrap else noised_sum, denominator)


@dataclass(frozen=True)
class DPFTRL:
    """DP-FTRL with momentum (see the module docstring).

    Attributes (static):
      model: the :class:`~jfed.models.Model` trained.
      training: the clients' local SGD.
      schedule: the participation schedule (``CyclicGroups``, ``MinSeparation``,
        ``ShuffledEpochs``); its pattern over the run must be the aggregator's.
      aggregator: :func:`ftrl_aggregator`.
    """

    model: Any
    training: LocalTraining
    schedule: Any
    aggregator: Any

    def init(self, hyper: Hyperparams, key: jax.Array) -> ServerState:
        params = self.model.init(key)
        return ServerState(
            params,
            server_transform("sgd", hyper).init(params),
            self.aggregator.init(hyper.privacy, params),
        )

    def client(self, broadcast: tuple, records: Any, key: jax.Array) -> PyTree:
        """One client's update ``Delta_i`` (the aggregator clips it)."""
        params, learning_rate = broadcast
        local = self.training.run(self.model.loss, params, records, key, learning_rate)
        return jax.tree.map(jnp.subtract, local, params)

    def round(
        self, state: ServerState, hyper: Hyperparams, key: jax.Array, clients: Any
    ) -> tuple[ServerState, dict]:
        cohort = clients.sample(self.schedule)
        released, aggregator_state, diagnostics = cohort.aggregate(
            self.aggregator, hyper.privacy, state.aggregator, self.client,
            (state.params, hyper.client_learning_rate), key,
        )  # fmt: skip
        params, opt_state = server_step("sgd", hyper, state.params, state.optimizer, released)
        size = jnp.maximum(cohort.info.size.astype(jnp.float32), 1.0)
        infos = {
            "clip": diagnostics["clip"],
            "clipped_fraction": diagnostics["clipped_count"] / size,
            "noise_std": diagnostics["noise_std"],
            "cohort_size": cohort.info.size,
            "server_update_norm": tree_norm(released),
        }
        if "rounding_fallbacks" in diagnostics:  # the integer grid's
            infos["rounding_fallbacks"] = diagnostics["rounding_fallbacks"]
        return ServerState(params, opt_state, aggregator_state), infos
