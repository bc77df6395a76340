"""The ``noisy-mean`` experiment: one round; every client's feature vector is clipped and summed,
the server adds Gaussian noise to the sum (jfed's ``GaussianSum`` aggregator) and divides by n.
The run's eps is certified from the release the aggregator makes: no event code here."""

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from jfed import data, privacy
from jfed.methods import Experiment, Output


@dataclass(frozen=True)
class NoisyMeanAlgorithm:
    n_clients: int
    dim: int
    aggregator: ClassVar = privacy.GaussianSum()

    def init(self, hyper, key):
        return jnp.zeros(self.dim)  # the mean, f32[d]

    def round(self, mean, hyper, key, clients):
        def client(broadcast, record, key):
            x, _ = record
            return x

        total, _, info = clients.aggregate(self.aggregator, hyper, (), client, None, key)
        return total / self.n_clients, {"clipped": info["clipped_count"] / self.n_clients}


class NoisyMean(Experiment):
    outputs = (Output("mean", "state"), Output("clipped", "infos.clipped", reduce="last"))
    default_accountant = privacy.Analytic()  # exact for Gaussian releases without sampling

    def __init__(self, config):
        super().__init__(config)
        self.population = data.SyntheticLinear.create(jax.random.key(0), config.clients,
                                                      config.dim)  # fmt: skip
        self.algorithm = NoisyMeanAlgorithm(config.clients, config.dim)

    def hyperparams(self, config, noise_multiplier):
        # the aggregator's parameters: the clip C and the noise multiplier jfed calibrates
        return jax.tree.map(jnp.float32, privacy.GaussianSumParams(config.clip, noise_multiplier))

    def evaluate(self, outputs, config):
        # the clients' features are N(0, I): the true mean is 0
        return {"squared_error": float(np.sum(np.square(outputs["mean"]))),
                "clipped_fraction": float(outputs["clipped"])}  # fmt: skip
