"""The declaration of the ``noisy-mean`` method: light (no JAX), so ``jfed methods`` and the
command line's checks stay fast; the experiment loads when a run starts."""

from dataclasses import dataclass

from jfed.methods import EPSILON, OPEN_UNIT, POSITIVE, Config, Method, Metrics, integers, param


@dataclass(frozen=True)
class NoisyMeanConfig(Config):
    clients: int = param(10_000, "procedural clients n", unit="clients",
                         range=integers(1, 10**8), group="data")  # fmt: skip
    dim: int = param(10, "features d", unit="features", range=integers(1, 10_000), group="data")
    epsilon: float = param(1.0, "eps of the release", range=EPSILON, group="privacy")
    delta: float = param(1e-5, "delta of the release", range=OPEN_UNIT, group="privacy")
    clip: float = param(4.0, "clip norm C of a client's feature vector", unit="feature norm",
                        range=POSITIVE, tunable=True)  # fmt: skip


METHOD = Method(
    name="noisy-mean",
    config=NoisyMeanConfig,
    summary="the mean feature vector of n clients, clipped, with central Gaussian noise",
    notion="central (eps, delta)-DP",
    protected="one client's feature vector",
    trust_model="trusted server adds the noise",
    experiment="jfed_noisy_mean.experiment:NoisyMean",
    metrics=Metrics(selection="squared_error", maximize=False, report="squared_error"),
)
