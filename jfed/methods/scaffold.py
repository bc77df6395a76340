"""SCAFFOLD (``scaffold``) and DP-SCAFFOLD (``dp-scaffold``) on DP-FedAvg's populations, written
on the public method API as a user's method is; the clients' control variates are per-client
state kept by the engine (:mod:`jfed.algorithms.scaffold`).

Privacy (DP-SCAFFOLD): each round makes two releases on the same cohort, the noised mean of the
clipped model updates (clip C, fixed denominator K) and the noised sum of the clipped
control-variate updates (clip C_c), both with noise multiplier z. The engine's ledger wraps them
once by the cohort's sampling; z is calibrated for that composition over the rounds and
certified for it. ``--noise discrete`` (the default) puts both releases on one integer grid
(L grid units per clip norm, chosen for the sweep): two exact discrete Gaussian events inside
one sampled event, certified by default through the continuous Gaussians they are coupled to
(joined as one, PLD; ``--accountant discrete-rdp``: their discrete events); ``--noise float`` draws
float32 Gaussian noise for both, as one Gaussian of multiplier ``z / sqrt(2)`` (the ideal
mechanism's guarantee, its bounded reach reserved from delta).

Audit (``--audit-canaries M``): the canaries take part in the model release only (they send a
model update and no control-variate update) and are scored against it. The bound they give is
a lower bound on the eps of that release alone, hence on the run's, which composes both: a
correct run audits well below its certified eps (the certificate also pays for the control
release), and a release noised below its calibration still shows above it.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jfed import privacy
from jfed.algorithms import scaffold
from jfed.methods.experiment import Output
from jfed.methods.federated import FederatedExperiment, server_momentum
from jfed.methods.record_fields import RecordFields


class ScaffoldExperiment(FederatedExperiment):
    """SCAFFOLD or DP-SCAFFOLD (the method's privacy decides the aggregators)."""

    record_fields = RecordFields(inside=("control_norm",), outside=("control_clipped_fraction",))
    """The server's control variate is the noised control release's running mean; the control
    updates' clipped count is unnoised."""

    canary_source = "state.server.model_aggregator"
    audited_release = "the model release (the noised mean of the clipped model updates)"
    kept = (
        Output("params", "state.server.params"),
        Output("control_norm", "infos.control_norm", reduce="last"),
        Output("clipped_fraction", "infos.clipped_fraction"),
        Output("control_clipped_fraction", "infos.control_clipped_fraction", reduce="mean"),
        Output("cohort_size", "infos.cohort_size"),
    )

    @property
    def algorithm(self) -> scaffold.Scaffold:
        if self.private:
            noise = self.release_noise()
            model_aggregator: Any = privacy.FixedDenominatorMean(
                self.with_canaries(noise.sum(False)), self.expected_cohort
            )
            control_aggregator: Any = noise.sum(False)
        else:
            model_aggregator, control_aggregator = privacy.CohortMean(), privacy.PlainSum()
        return scaffold.Scaffold(
            model=self.model, training=self.training, cohort=self.cohort,
            model_aggregator=model_aggregator, control_aggregator=control_aggregator,
            n_clients=self.n_clients, optimizer=self.config.server_optimizer,
        )  # fmt: skip

    def hyperparams(self, config: Any, noise_multiplier: float | None) -> scaffold.Hyperparams:
        """The run's traced numbers; both releases at noise multiplier ``noise_multiplier``."""
        if noise_multiplier is None:
            model_privacy: Any = privacy.NoParams()
            control_privacy: Any = privacy.NoParams()
        else:
            model_privacy = self.sum_params(config.update_clip, noise_multiplier)
            control_privacy = self.sum_params(config.control_clip, noise_multiplier)
        f32 = jnp.float32
        return scaffold.Hyperparams(
            client_learning_rate=f32(config.client_learning_rate),
            server_learning_rate=f32(config.server_learning_rate),
            server_momentum=f32(server_momentum(config)),
            model_privacy=jax.tree.map(f32, model_privacy),
            control_privacy=jax.tree.map(f32, control_privacy),
        )

    def evaluate(self, outputs: dict, config: Any) -> dict:
        metrics = super().evaluate(outputs, config)
        metrics["control_norm"] = float(outputs["control_norm"])
        if self.private:
            metrics["control_clipped_fraction"] = float(outputs["control_clipped_fraction"])
        return metrics
