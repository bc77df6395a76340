"""Ditto (Li, Hu, Beirami, Smith 2021): a global model trained as by FedAvg, and a personal model
per client, kept as per-client state by the engine.

One round, cohort S:

1. each member trains the global model w as DP-FedAvg's client does and reports its update;
2. it also takes ``personal_epochs`` epochs of SGD on its personal objective
   ``F_i(v) + lambda / 2 ||v - w||^2`` from its personal model ``v_i`` (its state; every
   ``v_i`` starts at the initial global model ``w_0``), and keeps the result;
3. the server releases the average update through its aggregator (FedAvg's plain mean, or
   DP-FedAvg's clipped, noised, fixed-denominator mean) and steps its optimizer.

Only the global updates leave a client: the personal models are never released, so a private
run's guarantee is DP-FedAvg's for the global model (user-level, the cohort's sampling). A
client not drawn keeps its personal model as it was.

References: Li, Hu, Beirami, Smith, "Ditto: Fair and Robust Federated Learning Through
Personalization", ICML 2021 (Algorithm 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jfed.algorithms.local_training import LocalTraining, server_step, server_transform
from jfed.privacy.privatizers import tree_norm

PyTree = Any


class Hyperparams(NamedTuple):
    """The traced numbers of one run (``f32[]`` each; ``privacy`` the aggregator's parameters,
    read unchanged).

    Attributes:
      client_learning_rate: eta_l of both local trainings.
      server_learning_rate: eta_s.
      server_momentum: the server optimizer's momentum.
      personal_weight: lambda, how strongly a personal model is pulled to the global one.
      privacy: the aggregator's parameters.
    """

    client_learning_rate: jax.Array
    server_learning_rate: jax.Array
    server_momentum: jax.Array
    personal_weight: jax.Array
    privacy: Any


class ServerState(NamedTuple):
    """The global model, the server optimizer's state and the aggregator's."""

    params: PyTree
    optimizer: PyTree
    aggregator: PyTree


class PersonalState(NamedTuple):
    """One client's state: its personal model ``v_i`` and how many rounds it took part in."""

    params: PyTree
    visits: jax.Array


@dataclass(frozen=True)
class Ditto:
    """Ditto, or DP-Ditto with a private aggregator (see the module docstring).

    Attributes (static):
      model: the :class:`~jfed.models.Model` (global and personal).
      training: the global model's local training.
      personal_training: the personal model's local training (its epochs).
      cohort: the round's cohort kind.
      aggregator: releases the average update.
      optimizer: the server optimizer's name.
    """

    model: Any
    training: LocalTraining
    personal_training: LocalTraining
    cohort: Any
    aggregator: Any
    optimizer: str = "sgd"

    def init(self, hyper: Hyperparams, key: jax.Array) -> ServerState:
        params = self.model.init(key)
        return ServerState(
            params,
            server_transform(self.optimizer, hyper).init(params),
            self.aggregator.init(hyper.privacy, params),
        )

    def client_state(self, hyper: Hyperparams, key: jax.Array) -> PersonalState:
        """``v_i = w_0`` (``key`` is the run's init key: the same initial model), no visits."""
        del hyper
        return PersonalState(self.model.init(key), jnp.int32(0))

    def client(
        self, broadcast: tuple, records: Any, key: jax.Array, personal: PersonalState
    ) -> tuple[PyTree, PersonalState]:
        """ONE client: its global update, and its personal model after its epochs."""
        params, learning_rate, weight = broadcast
        global_key, personal_key = jax.random.split(key)
        local = self.training.run(self.model.loss, params, records, global_key, learning_rate)
        update = jax.tree.map(jnp.subtract, local, params)

        def objective(v, X, labels, weights, step_key):
            pull = sum(jnp.sum((a - b) ** 2) for a, b in zip(jax.tree.leaves(v),
                                                               jax.tree.leaves(params),
                                                               strict=True))  # fmt: skip
            return self.model.loss(v, X, labels, weights, step_key) + 0.5 * weight * pull

        tuned = self.personal_training.run(
            objective, personal.params, records, personal_key, learning_rate
        )
        return update, PersonalState(tuned, personal.visits + 1)

    def round(
        self, state: ServerState, hyper: Hyperparams, key: jax.Array, clients: Any
    ) -> tuple[ServerState, dict]:
        cohort = clients.sample(self.cohort)
        average, aggregator_state, diagnostics = cohort.aggregate(
            self.aggregator,
            hyper.privacy,
            state.aggregator,
            self.client,
            (state.params, hyper.client_learning_rate, hyper.personal_weight),
            key,
            client_state=True,
        )
        params, opt_state = server_step(
            self.optimizer, hyper, state.params, state.optimizer, average
        )
        size = jnp.maximum(cohort.info.size.astype(jnp.float32), 1.0)
        infos = {
            "clip": diagnostics["clip"],
            "clipped_fraction": diagnostics["clipped_count"] / size,
            "mean_update_norm": diagnostics["norm_sum"] / size,
            "cohort_size": cohort.info.size,
            "overflow": cohort.info.overflow,
            "server_update_norm": tree_norm(average),
        }
        if "rounding_fallbacks" in diagnostics:  # the integer grid's
            infos["rounding_fallbacks"] = diagnostics["rounding_fallbacks"]
        return ServerState(params, opt_state, aggregator_state), infos
