"""Ditto (``ditto``) and DP-Ditto (``dp-ditto``) on DP-FedAvg's populations, written on the public
method API as a user's method is; every client's personal model is per-client state kept by the
engine (:mod:`jfed.algorithms.ditto`).

Privacy (DP-Ditto): DP-FedAvg's, for the global model (its aggregator, its cohort, one release a
round; ``--noise discrete``, the default, on the integer grid, or ``--noise float``). The
personal models never leave the clients; the personalised accuracy a record reports is computed
from them, so it is outside the guarantee (as a client's own evaluation is).

Personalised accuracy. Each evaluated client (the first :data:`EVALUATION_CLIENTS` that took
part) is scored on the held-out records reweighted to its own label distribution (the labels of
its training records): ``sum_c p_i(c) acc(c)`` with ``acc(c)`` the model's accuracy on the
held-out records of class c. ``personal_test_accuracy`` scores the client's personal model,
``global_test_accuracy_reweighted`` the global model on the same weights; both are averaged over
the clients. Needs held-out records as arrays (synthetic data, digits); other data sets report
the global model's accuracy only.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jfed import privacy
from jfed.algorithms import ditto
from jfed.algorithms.dp_fedavg import aggregator_of
from jfed.algorithms.local_training import LocalTraining
from jfed.data import FederatedData
from jfed.methods.experiment import Output
from jfed.methods.federated import FederatedExperiment, server_momentum
from jfed.methods.record_fields import RecordFields

EVALUATION_CLIENTS = 500
"""The personalised accuracy is averaged over at most this many clients that took part."""


class DittoExperiment(FederatedExperiment):
    """Ditto or DP-Ditto (the method's privacy decides the aggregator)."""

    record_fields = RecordFields(
        outside=("clients_personalised", "personal_test_accuracy",
                 "global_test_accuracy_reweighted"),
    )  # fmt: skip
    """The personal models are never noised, how many clients hold one is who took part, and
    the reweighting reads each client's own records' classes: outside the guarantee."""

    config: Any  # a Ditto or DP-Ditto configuration
    canary_source = "state.server.aggregator"
    kept = (
        Output("params", "state.server.params"),
        Output("personal", "state.clients.params"),
        Output("visits", "state.clients.visits"),
        Output("clipped_fraction", "infos.clipped_fraction"),
        Output("cohort_size", "infos.cohort_size"),
    )

    @property
    def algorithm(self) -> ditto.Ditto:
        c = self.config
        return ditto.Ditto(
            model=self.model, training=self.training,
            personal_training=LocalTraining(self.n_max, c.batch, c.personal_epochs),
            cohort=self.cohort, aggregator=aggregator_of(
                self.private, self.expected_cohort, canaries=self.canaries,
                participation=min(1.0, self.rate), noise=self.release_noise(),
            ),
            optimizer=c.server_optimizer,
        )  # fmt: skip

    def hyperparams(self, config: Any, noise_multiplier: float | None) -> ditto.Hyperparams:
        if noise_multiplier is None:
            params: Any = privacy.NoParams()
        else:
            params = self.sum_params(config.update_clip, noise_multiplier)
        f32 = jnp.float32
        return ditto.Hyperparams(
            client_learning_rate=f32(config.client_learning_rate),
            server_learning_rate=f32(config.server_learning_rate),
            server_momentum=f32(server_momentum(config)),
            personal_weight=f32(config.personal_weight),
            privacy=jax.tree.map(f32, params),
        )

    def evaluate(self, outputs: dict, config: Any) -> dict:
        metrics = super().evaluate(outputs, config)
        visits = np.asarray(outputs["visits"])
        metrics["clients_personalised"] = int(np.sum(visits > 0))
        if isinstance(self.data.test, FederatedData):
            return metrics
        chosen = np.flatnonzero(visits > 0)[:EVALUATION_CLIENTS]
        if len(chosen) == 0:
            return metrics
        personal = jax.tree.map(lambda t: jnp.asarray(t)[chosen], outputs["personal"])
        X, y = (jnp.asarray(a) for a in self.data.test)
        weights = self.label_weights(jnp.asarray(chosen, jnp.int32), int(np.max(y)) + 1)
        personal_accuracy = _reweighted_accuracy(self.model, personal, X, y, weights, True)
        global_accuracy = _reweighted_accuracy(self.model, outputs["params"], X, y, weights, False)
        metrics["personal_test_accuracy"] = float(jnp.mean(personal_accuracy))
        metrics["global_test_accuracy_reweighted"] = float(jnp.mean(global_accuracy))
        return metrics

    def label_weights(self, ids: jax.Array, classes: int) -> jax.Array:
        """``f32[len(ids), classes]``: each client's share of its training records in each
        class."""
        return _label_weights(self.population, self.n_max, classes, ids)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _label_weights(population: Any, n_max: int, classes: int, ids: jax.Array) -> jax.Array:
    def one(client_id: jax.Array) -> jax.Array:
        record = population.record(client_id)
        _, labels = record.rows(jnp.arange(n_max))
        real = (jnp.arange(n_max) < jnp.minimum(record.count, n_max)).astype(jnp.float32)
        counts = jnp.zeros(classes).at[labels.astype(jnp.int32)].add(real)
        return counts / jnp.maximum(counts.sum(), 1.0)

    return jax.vmap(one)(ids)


@functools.partial(jax.jit, static_argnums=(0, 5))
def _reweighted_accuracy(
    model: Any, params: Any, X: jax.Array, y: jax.Array, weights: jax.Array, per_client: bool
) -> jax.Array:
    """``f32[clients]``: ``sum_c weights[i, c] acc_i(c)``, ``acc_i(c)`` the accuracy of client
    i's parameters (``per_client``: leaves ``[clients, ...]``; else one model for all) on the
    held-out records of class c (a class without records counts as 0)."""
    labels = jax.nn.one_hot(y.astype(jnp.int32), weights.shape[1])  # [m, classes]
    per_class = jnp.maximum(labels.sum(0), 1.0)

    def class_accuracy(p: Any) -> jax.Array:
        return (model.correct(p, X, y) @ labels) / per_class

    if per_client:
        accuracy = jax.vmap(class_accuracy)(params)
    else:
        accuracy = jnp.broadcast_to(class_accuracy(params), weights.shape)
    return jnp.sum(weights * accuracy, axis=1)
