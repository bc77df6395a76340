"""A local randomizer of your own, plugged into a built-in method: DP-SGD FedAvg (one record per
client, each client perturbs its clipped gradient; the modulated-learning paper's baseline) with
Laplace noise instead of Gaussian noise.

The randomizer says how it perturbs (jittable, its scale traced so one program serves every eps),
the sensitivity of a message in its own norm (L1 here: an L2 distance of 2G in d dimensions is
at most sqrt(d) 2G in L1), and the dp-accounting event of one release. DP-SGD's round releases
through a local-randomizer aggregator that runs it on every client's clipped gradient and states
its event, so the method's calibration, certificate and records follow it. Registered under its
own name, it gets every command:

    python examples/custom_randomizer.py run dpsgd-laplace --epsilon 4 --accountant pld
    python examples/custom_randomizer.py sweep dpsgd-laplace --epsilon 1,4,16 --seeds 3 \
        --accountant pld --out results/dpsgd-laplace
"""

import math
from dataclasses import dataclass

import dp_accounting
import jax

import jfed
from jfed.methods import DPSGD, method, register_method


@dataclass(frozen=True)
class LaplaceNoise:  # a jfed.privacy.NoiseRandomizer
    def perturb(self, key, x, noise_scale):
        return x + noise_scale * jax.random.laplace(key, x.shape)

    def sensitivity(self, l2_bound, dim):
        return math.sqrt(dim) * l2_bound  # ||v||_1 <= sqrt(d) ||v||_2

    def dp_event(self, noise_multiplier):  # noise scale b = noise_multiplier x L1 sensitivity
        return dp_accounting.LaplaceDpEvent(noise_multiplier)


@dataclass(frozen=True)
class LaplaceDPSGD(DPSGD):
    """The fields of dpsgd (flags, ranges, defaults), as a method of its own."""


@register_method(
    "dpsgd-laplace",
    config=LaplaceDPSGD,
    summary="DP-SGD FedAvg with Laplace noise on every client's clipped gradient",
    notion="local (eps, delta)-DP",
    protected="one client's record (x_i, y_i)",
    trust_model="untrusted server; each client randomizes its own gradient",
    metrics=method("dpsgd").metrics,  # tuned on validation R^2, reports test R^2, as dpsgd
)
class LaplaceDPSGDExperiment(method("dpsgd").load()):  # the built-in experiment, another noise
    randomizer = LaplaceNoise()


if __name__ == "__main__":
    import sys

    sys.exit(jfed.main(sys.argv[1:] or ["run", "dpsgd-laplace", "--accountant", "pld"]))
