"""The ``noisy-mean`` experiment: one round; every client clips its feature vector, the server
adds Gaussian noise calibrated to (eps, delta) to the sum and divides by n."""

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jfed import data, privacy
from jfed.methods import Experiment, Output


class State(NamedTuple):
    mean: jax.Array  # f32[d]
    clip: jax.Array
    noise_std: jax.Array


@dataclass(frozen=True)
class NoisyMeanAlgorithm:
    n_clients: int
    dim: int

    def init(self, hyper, key):
        clip, noise_std = hyper
        return State(jnp.zeros(self.dim), clip, noise_std)

    def round(self, state, key, clients):
        def client(clip, record, key):
            x, _ = record
            return privacy.clip_tree(x, clip)

        total, clipped = clients(client, state.clip)
        noisy = total + privacy.gaussian_noise_tree(key, total, state.noise_std)
        return state._replace(mean=noisy / self.n_clients), {"clipped": clipped / self.n_clients}


class NoisyMean(Experiment):
    outputs = (Output("mean", "state.mean"), Output("clipped", "infos.clipped", reduce="last"))
    report_metric = "squared_error"
    selection_metric = "squared_error"
    selection_maximize = False

    def __init__(self, config):
        super().__init__(config)
        self.population = data.SyntheticLinear.create(jax.random.key(0), config.clients,
                                                      config.dim)  # fmt: skip
        self.algorithm = NoisyMeanAlgorithm(config.clients, config.dim)

    def calibrate(self, config):
        event = privacy.gaussian_rounds_event  # one release of sensitivity C
        exact = privacy.Analytic()
        z = privacy.calibrate(event, config.epsilon, config.delta, accountant=exact)
        guarantee = privacy.certify(event(z), config.delta, accountant=exact,
                                    notion=self.method.notion,
                                    protected=self.method.protected,
                                    trust_model=self.method.trust_model)  # fmt: skip
        return (jnp.float32(config.clip), jnp.float32(z * config.clip)), guarantee

    def evaluate(self, outputs, config):
        # the clients' features are N(0, I): the true mean is 0
        return {"squared_error": float(np.sum(np.square(outputs["mean"]))),
                "clipped_fraction": float(outputs["clipped"])}  # fmt: skip
