"""The engine against hand-written rounds: one modulated one-shot round (d = 10, procedural
clients), side by side in one process.

    python bench/engine.py --json bench/results/engine_cpu.json [--sizes 1e4,1e5,1e6,1e7]

Rows (best of ``--repeats`` after a warm-up that compiles):

- ``jfed``: ``simulate`` with the backend's default plan (blocks, fixed-width chunks, masking of
  padded clients, the generic statistic);
- ``hand-written chunked``: the same round written directly: one ``lax.scan`` over chunks of the
  same width, each vmapping the same client function over the same per-client keys
  (``fold_in(round key, client id)``), so the same draws and the same result (checked);
- ``hand-written, counter-addressed``: the chunked round with the message draws addressed as
  (client id, word index) in one threefry call per chunk (``threefry(round key, i * W + j)``), no
  per-client key: other draws (a different stream), the same distribution;
- ``materialised``: every client's message at once in plain JAX (memory grows with n);
- ``numpy``: the round vectorised over all clients with numpy (its own generator, so other
  draws; ``bench/modulated_round.py``).

JSON ``rows``: ``{n, implementation, seconds, updates_per_second, peak_mb}`` (``implementation``
one of ``jfed``, ``hand-written chunked``, ``hand-written, counter-addressed``, ``materialised``,
``numpy``); ``peak_mb`` is the
compiled program's own peak (XLA's memory analysis) for the JAX rows and tracemalloc's for numpy.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry_2x32
from modulated_round import DIM, PARAMS, numpy_round  # bench/ is on the path when run

from jfed._random import _LOWEST_OPEN, _unit_uniform
from jfed.algorithms import modulated
from jfed.algorithms.linear import clip_to_ball, second_moments
from jfed.data import SyntheticLinear
from jfed.engine import ExecutionPlan, run_rounds
from jfed.engine.keys import client_key, round_key, run_streams
from jfed.report import versions


def best(repeats: int, function, *args) -> float:
    jax.block_until_ready(function(*args))
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        jax.block_until_ready(function(*args))
        times.append(time.perf_counter() - tic)
    return min(times)


def peak_mb(compiled) -> float:
    memory = compiled.memory_analysis()
    total = (memory.argument_size_in_bytes + memory.output_size_in_bytes
             + memory.temp_size_in_bytes - memory.alias_size_in_bytes)  # fmt: skip
    return total / 2**20


def programs(n: int, chunk: int):
    """The three JAX rounds for ``n`` clients: functions of (population, hp, key) -> theta."""
    algorithm = modulated.OneShot(DIM)
    plan = ExecutionPlan.for_backend().fitted(n)

    def jfed_round(population, hp, key):
        return run_rounds(algorithm, population, hp, key, 1, plan)[0].theta

    def messages(population, broadcast, root, ids):
        keys = jax.vmap(lambda i: client_key(root, i))(ids)
        return jax.vmap(lambda i, k: modulated.client_message(broadcast, population.record(i), k))(
            ids, keys
        )

    def server(hp, broadcast, stats):
        state = algorithm.init(hp, None)
        return algorithm.server_step(state, broadcast, stats)[0].theta

    def setup(hp, key):
        _, server_root, client_root = run_streams(key)
        broadcast = modulated._broadcast(hp, round_key(server_root, 0), DIM, 1)
        return broadcast, round_key(client_root, 0)

    def chunked(message_fn):
        """A round that scans chunks of ``chunk`` clients, each vmapping ``message_fn``."""

        def round_(population, hp, key):
            broadcast, root = setup(hp, key)
            chunks = -(-n // chunk)
            ids = jnp.arange(chunks * chunk, dtype=jnp.int32).reshape(chunks, chunk)

            def chunk_stats(chunk_ids):
                weights = (chunk_ids < n).astype(jnp.float32)
                z, y, clipped = message_fn(
                    population, broadcast, root, jnp.minimum(chunk_ids, n - 1)
                )
                masked = (z * weights[:, None], y * weights, clipped * weights)
                return second_moments(masked, weights)

            def add(total, chunk_ids):
                return jax.tree.map(jnp.add, total, chunk_stats(chunk_ids)), None

            zero = jax.tree.map(
                lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(chunk_stats, ids[0])
            )
            total, _ = jax.lax.scan(add, zero, ids)
            return server(hp, broadcast, total)

        return round_

    def counter_messages(population, broadcast, root, ids):
        # one threefry call for the chunk: client i's word j is threefry(round key, i * W + j)
        width = DIM + 1  # d normals and one phase
        counters = ids[:, None].astype(jnp.uint32) * width + jnp.arange(width, dtype=jnp.uint32)
        words = threefry_2x32(tuple(jax.random.key_data(root)), counters.reshape(-1))
        unit = _unit_uniform(words).reshape(ids.shape[0], width)
        noise = np.float32(np.sqrt(2.0)) * jax.lax.erf_inv(
            jnp.maximum(_LOWEST_OPEN, 2.0 * unit[:, :DIM] - 1.0)
        )
        x, y = jax.vmap(population.record)(ids)
        x, clipped = jax.vmap(lambda v: clip_to_ball(v, broadcast.clip_norm))(x)
        z = jax.vmap(lambda v, p, e: modulated.encode(broadcast, v, p, e))(
            x, 2.0 * jnp.pi * unit[:, DIM:], noise
        )
        return z, y, clipped

    def materialised_round(population, hp, key):
        broadcast, root = setup(hp, key)
        ids = jnp.arange(n, dtype=jnp.int32)
        stats = second_moments(messages(population, broadcast, root, ids), jnp.ones(n, jnp.float32))
        return server(hp, broadcast, stats)

    return {
        "jfed": jfed_round,
        "hand-written chunked": chunked(messages),
        "hand-written, counter-addressed": chunked(counter_messages),
        "materialised": materialised_round,
    }, plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e4,1e5,1e6,1e7")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    hp = modulated.hyperparams(**PARAMS)
    key = jax.random.key(1)
    rows = []
    print(f"one modulated one-shot round, d = {DIM}, {jax.devices()[0].platform}")
    print(f"{'n':>10} {'implementation':>32} {'seconds':>9} {'updates/s':>10} {'peak MB':>9}"
          f" {'x jfed':>7}")  # fmt: skip
    for n in [int(float(s)) for s in args.sizes.split(",")]:
        population = SyntheticLinear.create(jax.random.key(0), n, DIM)
        plan = ExecutionPlan.for_backend().fitted(n)
        rounds, _ = programs(n, plan.chunk_size)
        results, thetas = {}, {}
        for name, function in rounds.items():
            compiled = jax.jit(function).lower(population, hp, key).compile()
            seconds = best(args.repeats, compiled, population, hp, key)
            thetas[name] = np.asarray(compiled(population, hp, key))
            results[name] = (seconds, peak_mb(compiled))
        theta_star = np.asarray(population.theta_star, np.float32)
        tracemalloc.start()
        numpy_round(n, theta_star, 0)
        numpy_peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        results["numpy"] = (best(max(1, args.repeats - 1), numpy_round, n, theta_star, 0),
                            numpy_peak)  # fmt: skip
        gap = float(np.abs(thetas["jfed"] - thetas["hand-written chunked"]).max())
        for name, (seconds, peak) in results.items():
            rows.append({"n": n, "implementation": name, "seconds": seconds,
                         "updates_per_second": n / seconds, "peak_mb": peak})  # fmt: skip
            print(f"{n:>10,} {name:>32} {seconds:>9.4f} {n / seconds:>10.3g} {peak:>9.1f} "
                  f"{results['jfed'][0] / seconds:>7.2f}", flush=True)  # fmt: skip
        print(f"{'':>10} jfed and the hand-written chunked round agree within {gap:.1e}")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        payload = {"benchmark": "engine", "dim": DIM, "params": PARAMS, "rows": rows,
                   "device": str(jax.devices()[0]), "versions": versions()}  # fmt: skip
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2)


if __name__ == "__main__":
    main()
