"""The two halves of a FedAvg round that the methods built on it share: one client's local
training (epochs of minibatch SGD on its records, for any local objective) and the server's
optimizer step on the released average.

The federated methods built on DP-FedAvg's client (SCAFFOLD, Ditto, DP-FTRL) differ in what a
client minimises locally, not in how it steps: SCAFFOLD adds a linear correction
``<c - c_i, y>`` to the model's loss, Ditto's personal model a proximal term
``lambda / 2 ||v - w||^2``. :class:`LocalTraining` runs the steps of DP-FedAvg's client
(:meth:`jfed.algorithms.dp_fedavg.DPFedAvg.local_update`: the same record order, batches, masks
and step keys) on an objective the method passes in, so a method with a zero correction trains
exactly as DP-FedAvg does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jfed.algorithms.dp_fedavg import server_optimizer

PyTree = Any
Objective = Callable[[PyTree, jax.Array, jax.Array, jax.Array, jax.Array], jax.Array]
"""``objective(params, X, y, weights, key) -> f32[]``: a model's loss on a minibatch (rows of
weight 0 are padding), plus whatever the method adds."""


@dataclass(frozen=True)
class LocalTraining:
    """``epochs`` epochs of minibatch SGD on one client's records.

    Attributes (static):
      n_max: the most records a client trains on (an epoch takes ``ceil(n_max / batch)``
        steps; steps past the client's own records do nothing).
      batch: B >= 1 records per step.
      epochs: E >= 1.
    """

    n_max: int
    batch: int = 10
    epochs: int = 1

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.n_max // self.batch)

    def steps_taken(self, records: Any) -> jax.Array:
        """``f32[]``: the steps that move the parameters, ``E ceil(min(count, n_max) / B)``
        (SCAFFOLD's K), at least 1."""
        count = jnp.minimum(records.count, self.n_max)
        return jnp.maximum(self.epochs * -(-count // self.batch), 1).astype(jnp.float32)

    def run(
        self,
        objective: Objective,
        params: PyTree,
        records: Any,
        key: jax.Array,
        learning_rate: jax.Array,
    ) -> PyTree:
        """The parameters after the epochs, from ``params``.

        Args:
          objective: what a step descends (see :data:`Objective`).
          params: the starting parameters (a pytree).
          records: the client's records, with ``count`` and ``rows(indices) -> (X, y)``.
          key: the client's training key (one per epoch is split from it).
          learning_rate: the step size (``f32[]``, traced).
        """
        steps = self.steps_per_epoch
        count = jnp.minimum(records.count, self.n_max)
        real = jnp.arange(self.n_max) < count

        def epoch(params: PyTree, epoch_key: jax.Array) -> tuple[PyTree, None]:
            # real records first, in a random order; the tail of the last batch is masked
            order = jnp.argsort(jnp.where(real, jax.random.uniform(epoch_key, (self.n_max,)), 2.0))
            order = jnp.pad(order, (0, steps * self.batch - self.n_max))

            def step(params: PyTree, s: jax.Array) -> tuple[PyTree, None]:
                position = s * self.batch + jnp.arange(self.batch)
                X, y = records.rows(jax.lax.dynamic_slice(order, (s * self.batch,), (self.batch,)))
                weights = (position < count).astype(jnp.float32)
                # a step's dropout (where the model has it) from a stream of the epoch's key
                step_key = jax.random.fold_in(epoch_key, s + 1)
                grads = jax.grad(objective)(params, X, y, weights, step_key)
                active = (s * self.batch < count).astype(jnp.float32)
                return jax.tree.map(
                    lambda p, g: p - learning_rate * active * g, params, grads
                ), None

            params, _ = jax.lax.scan(step, params, jnp.arange(steps))
            return params, None

        trained, _ = jax.lax.scan(epoch, params, jax.random.split(key, self.epochs))
        return trained


def tree_vdot(a: PyTree, b: PyTree) -> jax.Array:
    """``sum`` over leaves of ``<a, b>`` (``f32[]``)."""
    return sum((jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b),
                                                  strict=True)), jnp.float32(0.0))  # fmt: skip


def server_transform(optimizer: str, hyper: Any) -> optax.GradientTransformation:
    """The server optimizer ``optimizer`` (a name of
    :data:`jfed.algorithms.dp_fedavg.SERVER_OPTIMIZERS`) with the learning rate and momentum of
    ``hyper`` (any hyper-parameters with ``server_learning_rate`` and ``server_momentum``)."""
    return server_optimizer(optimizer, hyper)


def server_step(
    optimizer: str, hyper: Any, params: PyTree, optimizer_state: PyTree, average: PyTree
) -> tuple[PyTree, PyTree]:
    """``(params, optimizer_state)`` after the server optimizer ``optimizer`` (a name of
    :data:`jfed.algorithms.dp_fedavg.SERVER_OPTIMIZERS`, its learning rate and momentum read
    from ``hyper``) takes ``-average`` as its gradient."""
    tx = server_transform(optimizer, hyper)
    pseudo_gradient = jax.tree.map(jnp.negative, average)
    updates, optimizer_state = tx.update(pseudo_gradient, optimizer_state, params)
    return optax.apply_updates(params, updates), optimizer_state
