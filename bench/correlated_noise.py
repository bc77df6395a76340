"""Correlated noise inside the round: a release of BLT, banded and tree noise against independent
noise, on the same aggregator and model size.

    python bench/correlated_noise.py [--dim 1e6] [--rounds 64] [--repeats 5] [--json PATH]

Every row runs ``--rounds`` releases of :class:`jfed.privacy.correlated.CorrelatedGaussianSum`
in one jitted ``lax.scan`` (the state carried, release t keyed by ``fold_in(key, t)``), on a
clipped sum of ``--dim`` float32 parameters, as a DP-FTRL round's server side runs it. What
differs is only the noise strategy:

- ``independent``: one fresh [d] draw per round (what an independent Gaussian sum costs);
- ``blt-3``, ``blt-5``: one draw and 3 or 5 [d] buffers read and written (jax-privacy's BLT from
  the rational approximation of 1 / sqrt(1 - x));
- ``banded-4``: one draw and 3 [d] buffers (forward substitution);
- ``tree``: Honaker's tree over the run, 2 draws per round on average and log2(R) + 1 buffers.

The rows take turns (``times_in_turns``, best of ``--repeats``); ``x_independent`` is a row's
time over the independent row's (the target for BLT is <= 1.2). Before timing, each row's noise
is checked against its mechanism: the std of the last running sum over the coordinates is within
5% of what the mechanism's matrices say.

JSON ``rows``: ``{noise, buffers, dim, rounds, seconds, seconds_per_round, x_independent}``;
also ``repeats``, ``uptime`` before and after, ``device``, ``versions``.
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

from jfed.privacy.correlated import (
    BandedNoise,
    BltNoise,
    ClippedContribution,
    CorrelatedGaussianSum,
    CorrelatedGaussianSumParams,
    IndependentNoise,
    TreeNoise,
)
from jfed.privacy.participation import Participation
from jfed.report import versions

PARAMS = CorrelatedGaussianSumParams(clip_norm=1.0, noise_multiplier=1.0)


def strategies(rounds: int) -> dict:
    return {
        "independent": IndependentNoise(),
        "blt-3": BltNoise.rational_approximation(3),
        "blt-5": BltNoise.rational_approximation(5),
        "banded-4": BandedNoise((1.0, 0.5, 0.375, 0.3125)),
        "tree": TreeNoise(rounds),
    }


def releases(aggregator: CorrelatedGaussianSum, dim: int, rounds: int):
    """A jitted ``key -> f32[dim]``: R releases of a fixed clipped sum; returns the running sum
    of the releases (the noised prefix sum; what DP-FTRL's model reads)."""
    summed = ClippedContribution(jnp.full(dim, 0.25, jnp.float32), jnp.float32(0.0))

    def run(key: jax.Array) -> jax.Array:
        def round_(carry, t):
            state, total = carry
            released, state, _ = aggregator.release(
                PARAMS, state, summed, jax.random.fold_in(key, t)
            )
            return (state, total + released), None

        start = (aggregator.init(PARAMS, summed.update), jnp.zeros(dim, jnp.float32))
        (_, total), _ = jax.lax.scan(round_, start, jnp.arange(rounds))
        return total

    return jax.jit(run)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", default="1e6")
    parser.add_argument("--rounds", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", metavar="PATH")
    args = parse_args(parser, argv, __file__, dim="1e3", rounds=4, repeats=1)
    dim, rounds = int(float(args.dim)), args.rounds
    participation = Participation(rounds, 1, rounds)  # one participation: sens is the max column
    key = jax.random.key(0)
    runs, aggregators = {}, {}
    for name, noise in strategies(rounds).items():
        aggregators[name] = CorrelatedGaussianSum(noise, participation)
        runs[name] = releases(aggregators[name], dim, rounds)
    for name, run in runs.items():  # the noise is the mechanism's: a broken row shows here
        expected = aggregators[name].prefix_noise_std(PARAMS)[-1]
        measured = float(np.std(np.asarray(run(key), np.float64) - 0.25 * rounds))
        assert abs(measured / expected - 1.0) < 0.05 + 5.0 / np.sqrt(dim), (name, measured)
    load_before = uptime()
    times = best_in_turns({name: (lambda run=run: run(key)) for name, run in runs.items()},
                          args.repeats)  # fmt: skip
    load_after = uptime()
    baseline = times["independent"]
    print(f"{rounds} releases of {dim:,} parameters, {device_name()}")
    print(f"{'noise':>12} {'seconds':>9} {'per round':>10} {'x independent':>14}")
    rows = []
    for name, best in times.items():
        buffers = jax.tree.leaves(aggregators[name].noise.init(jnp.zeros(1)))
        rows.append({"noise": name, "buffers": int(sum(b.shape[0] for b in buffers)),
                     "dim": dim, "rounds": rounds, "seconds": best, "seconds_per_round":
                     best / rounds, "x_independent": best / baseline})  # fmt: skip
        print(f"{name:>12} {best:>9.4f} {best / rounds:>10.2e} {best / baseline:>14.2f}")
    print(f"load before: {load_before}\nload after:  {load_after}")
    if args.json:
        payload = {"benchmark": "correlated_noise", "repeats": args.repeats, "rows": rows,
                   "uptime": {"before": load_before, "after": load_after},
                   "device": device_name(), "versions": versions()}  # fmt: skip
        write_json(args.json, payload)


if __name__ == "__main__":
    main()
