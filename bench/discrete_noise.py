"""The exact discrete Gaussian against float Gaussian noise, for one vector of noise.

    python bench/discrete_noise.py --json bench/results/discrete_noise_cpu.json [--size 1e6]

Every row draws one noise vector of ``--size`` coordinates, jitted, as a release adds it to a sum
(best of ``--repeats``, the rows in turns, each turn in a new order):

- ``jax.random.normal``: float32 normals times the standard deviation;
- ``jfed private normal``: ``gaussian_noise_tree`` (what ``GaussianSum`` draws: tails to 9 sd);
- ``exact discrete Gaussian``: ``jfed.privacy.discrete.discrete_gaussian`` at the variance the
  default ``DiscreteGaussianSum`` grid gives at ``--noise-multiplier`` (integer arithmetic only);
- ``exact discrete Laplace``: ``jfed.privacy.discrete.discrete_laplace`` at a scale of ``--sigma``
  grid units (estimation's noise, for comparison).

Each row is checked first: its sample variance within 6 of its standard deviations of the law's
(1.3% at 10^6 draws). JSON ``rows``: ``{implementation, size, seconds, draws_per_second,
x_float}`` (``x_float``: this row's seconds over the ``jax.random.normal`` row's); also the
variance, ``repeats``, ``uptime`` before and after, ``device``, ``versions``.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from _common import (  # bench/ is on the path
    best_in_turns,
    device_name,
    parse_args,
    uptime,
    write_json,
)

from jfed.privacy import discrete
from jfed.privacy.discrete_aggregators import DiscreteGaussianSum
from jfed.privacy.privatizers import gaussian_noise_tree
from jfed.report import versions


def draws(size: int, variance: int, laplace_scale: float) -> dict:
    """The rows' jitted draws, each a function of a key."""
    bits, quotient = discrete.discrete_gaussian_parameters(np.uint32(variance))
    std = np.float32(np.sqrt(float(2 ** int(bits) * int(quotient))))
    laplace_bits, divisor = discrete.discrete_laplace_parameters(laplace_scale)
    return {
        "jax.random.normal": jax.jit(lambda key: std * jax.random.normal(key, (size,))),
        "jfed private normal": jax.jit(
            lambda key: gaussian_noise_tree(key, jnp.zeros(size, jnp.float32), std)
        ),
        "exact discrete Gaussian": jax.jit(
            lambda key: discrete.discrete_gaussian(key, (size,), int(bits), int(quotient))
        ),
        "exact discrete Laplace": jax.jit(
            lambda key: discrete.discrete_laplace(key, (size,), laplace_bits, divisor)
        ),
    }, {
        "jax.random.normal": float(std) ** 2,
        "jfed private normal": float(std) ** 2,
        "exact discrete Gaussian": float(std) ** 2,  # minus an invisible 1e-300 for sigma >= 2
        "exact discrete Laplace": 2
        * np.exp(-divisor / 2**laplace_bits)
        / (1 - np.exp(-divisor / 2**laplace_bits)) ** 2,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1e6")
    parser.add_argument("--noise-multiplier", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", metavar="PATH")
    args = parse_args(parser, argv, __file__, size="1e4", repeats=1)
    size = int(float(args.size))
    aggregator = DiscreteGaussianSum(dimension=size)
    variance = int(np.ceil(args.noise_multiplier**2 * aggregator.squared_bound))
    runs, variances = draws(size, variance, laplace_scale=float(np.sqrt(variance / 2)))
    key = jax.random.key(0)
    # a broken draw shows here: a sample variance's relative sd is sqrt((kurtosis - 1) / n),
    # at most sqrt(5 / n) for these laws (the Laplace's kurtosis is 6)
    tolerance = 6 * np.sqrt(5 / size)
    for name, run in runs.items():
        observed = float(np.var(np.asarray(run(key), np.float64)))
        assert abs(observed / variances[name] - 1) < tolerance, (name, observed, variances[name])
    load_before = uptime()
    times = best_in_turns({name: (lambda run=run: run(key)) for name, run in runs.items()},
                          args.repeats)  # fmt: skip
    load_after = uptime()
    first = times["jax.random.normal"]
    rows = []
    print(f"one noise vector of {size:,} coordinates, variance {variance:,} (grid units), "
          f"{device_name()}")  # fmt: skip
    print(f"{'implementation':>26} {'seconds':>9} {'draws/s':>10} {'x float':>8}")
    for name, best in times.items():
        rows.append({"implementation": name, "size": size, "seconds": best,
                     "draws_per_second": size / best, "x_float": best / first,
                     "variance": variances[name]})  # fmt: skip
        print(f"{name:>26} {best:>9.4f} {size / best:>10.3g} {best / first:>8.1f}")
    print(f"load before: {load_before}\nload after:  {load_after}")
    if args.json:
        payload = {"benchmark": "discrete_noise", "repeats": args.repeats, "rows": rows,
                   "uptime": {"before": load_before, "after": load_after},
                   "device": device_name(), "versions": versions()}  # fmt: skip
        write_json(args.json, payload)


if __name__ == "__main__":
    main()
