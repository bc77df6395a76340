"""SCAFFOLD (Karimireddy et al. 2020) and DP-SCAFFOLD: control variates against client drift, the
clients' own kept as per-client state by the engine.

One round (option II of the paper's Algorithm 1, cohort S of the N clients):

1. the server sends the model x and its control variate c;
2. client i runs K local steps of SGD on its loss from ``y = x`` with the corrected gradient
   ``g_i(y) - c_i + c`` (the loss plus ``<c - c_i, y>``), then sets
   ``c_i+ = c_i - c + (x - y) / (K eta_l)`` and reports ``Delta y_i = y - x`` and
   ``Delta c_i = c_i+ - c_i``; it keeps ``c_i+`` (its state, stored by the engine);
3. the server releases the mean of the ``Delta y_i`` and the SUM of the ``Delta c_i`` through
   two aggregators, and updates ``x <- x + eta_g mean`` (its optimizer on ``-mean``) and
   ``c <- c + sum / N``.

With every ``c_i`` and c starting at zero, ``c = (1 / N) sum_i c_i`` after every round: the
server's control variate is the mean of the stored ones (exactly, up to float rounding, when the
releases are not noised).

DP-SCAFFOLD (user-level, central): both statistics are clipped per client (``Delta y`` to C,
``Delta c`` to C_c) and get Gaussian noise; the round makes two releases on one cohort, each an
aggregator of its own, both in the round's ledger (accounted together: one sampled Gaussian of
the combined multiplier). A client's stored ``c_i`` never leaves it; the server only sees the
noised sums.

References: Karimireddy, Kale, Mohri, Reddi, Stich, Suresh, "SCAFFOLD: Stochastic Controlled
Averaging for Federated Learning", ICML 2020; Noble, Bellet, Dieuleveut, "Differentially Private
Federated Learning on Heterogeneous Data", AISTATS 2022 (DP-SCAFFOLD).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jfed.algorithms.local_training import LocalTraining, server_step, server_transform, tree_vdot
from jfed.privacy.privatizers import tree_norm

PyTree = Any


class Hyperparams(NamedTuple):
    """The traced numbers of one run (``f32[]`` each).

    Attributes:
      client_learning_rate: eta_l.
      server_learning_rate: eta_g.
      server_momentum: the server optimizer's momentum (0: the paper's plain step).
      model_privacy: the parameters of the model update's aggregator (read unchanged).
      control_privacy: the parameters of the control variates' aggregator (read unchanged).
    """

    client_learning_rate: jax.Array
    server_learning_rate: jax.Array
    server_momentum: jax.Array
    model_privacy: Any
    control_privacy: Any


class ServerState(NamedTuple):
    """``params`` x, ``control`` c (shaped like x), the server optimizer's state and the two
    aggregators' states."""

    params: PyTree
    control: PyTree
    optimizer: PyTree
    model_aggregator: PyTree
    control_aggregator: PyTree


@dataclass(frozen=True)
class Scaffold:
    """SCAFFOLD, or DP-SCAFFOLD with private aggregators (see the module docstring).

    Attributes (static):
      model: the :class:`~jfed.models.Model` trained.
      training: the clients' local SGD (:class:`~jfed.algorithms.local_training.LocalTraining`).
      cohort: the round's cohort kind (``Uniform``, ``Poisson``, a schedule).
      model_aggregator: releases the MEAN of ``Delta y`` (e.g. ``CohortMean`` or a fixed-
        denominator Gaussian mean).
      control_aggregator: releases the SUM of ``Delta c`` (e.g. ``PlainSum`` or ``GaussianSum``).
      n_clients: N, the population (the control variate moves by the sum over N).
      optimizer: the server optimizer's name (``sgd``: the paper's step).
    """

    model: Any
    training: LocalTraining
    cohort: Any
    model_aggregator: Any
    control_aggregator: Any
    n_clients: int
    optimizer: str = "sgd"

    def init(self, hyper: Hyperparams, key: jax.Array) -> ServerState:
        params = self.model.init(key)
        control = jax.tree.map(jnp.zeros_like, params)
        return ServerState(
            params,
            control,
            server_transform(self.optimizer, hyper).init(params),
            self.model_aggregator.init(hyper.model_privacy, params),
            self.control_aggregator.init(hyper.control_privacy, params),
        )

    def client_state(self, hyper: Hyperparams, key: jax.Array) -> PyTree:
        """``c_i = 0``, shaped like the model."""
        del hyper
        shapes = jax.eval_shape(self.model.init, key)
        return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def client(
        self, broadcast: tuple, records: Any, key: jax.Array, control_i: PyTree
    ) -> tuple[tuple[PyTree, PyTree], PyTree]:
        """ONE client: ``((Delta y_i, Delta c_i), c_i+)``."""
        params, control, learning_rate = broadcast
        correction = jax.tree.map(jnp.subtract, control, control_i)  # c - c_i

        def objective(y, X, labels, weights, step_key):
            return self.model.loss(y, X, labels, weights, step_key) + tree_vdot(correction, y)

        local = self.training.run(objective, params, records, key, learning_rate)
        delta_y = jax.tree.map(jnp.subtract, local, params)
        scale = 1.0 / (self.training.steps_taken(records) * learning_rate)
        new_control = jax.tree.map(
            lambda ci, c, dy: ci - c - scale * dy, control_i, control, delta_y
        )  # c_i - c + (x - y) / (K eta_l)
        delta_c = jax.tree.map(jnp.subtract, new_control, control_i)
        return (delta_y, delta_c), new_control

    def round(
        self, state: ServerState, hyper: Hyperparams, key: jax.Array, clients: Any
    ) -> tuple[ServerState, dict]:
        cohort = clients.sample(self.cohort)
        model_key, control_key = jax.random.split(key)
        (mean_update, control_sum), (model_agg, control_agg), (diag_y, diag_c) = cohort.aggregate(
            (self.model_aggregator, self.control_aggregator),
            (hyper.model_privacy, hyper.control_privacy),
            (state.model_aggregator, state.control_aggregator),
            self.client,
            (state.params, state.control, hyper.client_learning_rate),
            (model_key, control_key),
            client_state=True,
        )
        params, opt_state = server_step(
            self.optimizer, hyper, state.params, state.optimizer, mean_update
        )
        control = jax.tree.map(lambda c, s: c + s / self.n_clients, state.control, control_sum)
        size = jnp.maximum(cohort.info.size.astype(jnp.float32), 1.0)
        infos = {
            "clip": diag_y["clip"],
            "clipped_fraction": diag_y["clipped_count"] / size,
            "control_clipped_fraction": diag_c["clipped_count"] / size,
            "mean_update_norm": diag_y["norm_sum"] / size,
            "cohort_size": cohort.info.size,
            "overflow": cohort.info.overflow,
            "server_update_norm": tree_norm(mean_update),
            "control_norm": tree_norm(control),
        }
        if "rounding_fallbacks" in diag_y:  # the integer grid: both releases' fallbacks
            infos["rounding_fallbacks"] = (
                diag_y["rounding_fallbacks"] + diag_c["rounding_fallbacks"]
            )
        return ServerState(params, control, opt_state, model_agg, control_agg), infos
