"""DP-FedProx, written as a jfed user writes their own algorithm: FedProx (Li et al. 2020, local
steps with a proximal term mu/2 ||w - w_server||^2) with every client's update clipped to norm C
and Gaussian noise on the sum (central DP, user-level: one client's whole data, add or remove).

Registered below, it gets what every built-in method gets:

    python examples/dp_fedprox.py                   # eps x seeds sweep, the FedAvg baseline, a plot
    python examples/dp_fedprox.py run dp-fedprox --epsilon 2 --mu 0.1
    python examples/dp_fedprox.py sweep dp-fedprox --epsilon 1,4 --seeds 3 --grid mu=0,0.1 \
        --out results/dp-fedprox --resume
    python examples/dp_fedprox.py methods           # listed with its flags

It imports only jfed's public names: jfed, jfed.methods, jfed.privacy, jfed.data.
"""

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

import jfed
from jfed import data, privacy
from jfed.methods import (
    EPSILON,
    NONNEGATIVE,
    OPEN_UNIT,
    POSITIVE,
    Config,
    Experiment,
    Metrics,
    Output,
    integers,
    param,
    register_method,
)


@dataclass(frozen=True)
class DPFedProxConfig(Config):
    dataset: str = param("digits-bylabel", "silo data set", choices=data.SILO_DATASETS,
                         group="data")  # fmt: skip
    epsilon: float = param(2.0, "user-level eps of the run", range=EPSILON, group="privacy")
    delta: float = param(1e-3, "delta of the run", range=OPEN_UNIT, group="privacy")
    clip: float = param(0.5, "clip norm C of a client's update", range=POSITIVE, tunable=True)
    mu: float = param(0.1, "proximal weight mu", range=NONNEGATIVE, tunable=True)
    learning_rate: float = param(0.5, "local step size", range=POSITIVE, tunable=True)
    local_steps: int = param(5, "local steps of 16 records per round", range=integers(1, 100))
    rounds: int = param(20, "rounds R", range=integers(1, 1000), group="run")


@dataclass(frozen=True)
class FedProx:  # the algorithm: static shapes here, traced numbers in `h`
    dim: int
    classes: int
    n_clients: int
    local_steps: int
    aggregator: ClassVar = privacy.GaussianSum()  # clip + sum + noise; it states its own event

    def init(self, h, key):
        return jnp.zeros((self.dim, self.classes))

    def round(self, w_server, h, key, clients):
        def client(w_server, silo, key):  # ONE client; the engine vmaps and streams them
            def loss(w, rows):
                X, y = silo.rows(rows)
                nll = -jax.nn.log_softmax(X @ w)[jnp.arange(len(y)), y.astype(jnp.int32)]
                return nll.mean() + h["mu"] / 2 * jnp.sum((w - w_server) ** 2)

            def step(w, step_key):
                rows = jax.random.randint(step_key, (16,), 0, silo.count)
                return w - h["learning_rate"] * jax.grad(loss)(w, rows), None

            w, _ = jax.lax.scan(step, w_server, jax.random.split(key, self.local_steps))
            return w - w_server  # the update; the aggregator clips it

        total, _, info = clients.aggregate(self.aggregator, h["privacy"], (), client, w_server, key)
        clipped = info["clipped_count"] / self.n_clients
        return w_server + total / self.n_clients, {"clipped": clipped}


@register_method(
    "dp-fedprox",
    config=DPFedProxConfig,
    summary="FedProx, clipped updates, central Gaussian noise",
    notion="central (eps, delta)-DP, user-level",
    protected="one client's data",
    trust_model="trusted server adds the noise",
    metrics=Metrics(selection="train_error", maximize=False, report="test_error"),
)
class DPFedProx(Experiment):
    outputs = (Output("w", "state"), Output("clipped", "infos.clipped", reduce="mean"))
    default_accountant = privacy.Analytic()  # exact for Gaussian releases without sampling

    def __init__(self, config):
        super().__init__(config)
        self.task = data.load_silos(config.dataset)
        classes = max(self.task.classes, 2)
        self.algorithm = FedProx(self.task.dim, classes, self.task.n_silos, config.local_steps)

    def hyperparams(self, config, noise_multiplier):  # jfed calibrates z to eps and certifies
        h = {"privacy": privacy.GaussianSumParams(config.clip, noise_multiplier),
             "mu": config.mu, "learning_rate": config.learning_rate}  # fmt: skip
        return jax.tree.map(jnp.float32, h)

    def evaluate(self, outputs, config):  # tuned on the training records, reported on the test
        def error(X, y):
            return float(np.mean(np.argmax(X @ outputs["w"], axis=1) != y))

        train, test = self.task.train.pooled(), self.task.test
        return {"train_error": error(*train), "test_error": error(*test),
                "clipped_fraction": float(outputs["clipped"])}  # fmt: skip


DEMO = [  # what `python examples/dp_fedprox.py` runs: every command a built-in method has
    "sweep dp-fedprox --epsilon 2,4,16 --seeds 2 --out results/dp-fedprox",
    "sweep fedavg --dataset digits-bylabel --rounds 20 --seeds 2 --out results/fedavg",
    "plot results/dp-fedprox results/fedavg --out results/dp-fedprox-vs-fedavg",
]

if __name__ == "__main__":
    import sys

    for command in [sys.argv[1:]] if sys.argv[1:] else [c.split() for c in DEMO]:
        if jfed.main(command) != 0:
            sys.exit(1)
