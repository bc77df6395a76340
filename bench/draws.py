"""A client's draws as the engine runs them: jax.random on the client's key against jfed.random.

    python bench/draws.py --json bench/results/draws_cpu.json [--clients 1e6] [--values 10]

Every row draws ``--values`` standard normals for each of ``--clients`` clients, the way the
engine runs a client function: a ``lax.scan`` over chunks of the default plan's width, each
``vmap``-ping one client's draw over the chunk's client keys (``client_key(round key, i)``), the
chunk's draws summed (a statistic). Rows (best of ``--repeats``; the JAX rows run in turns, in an
order that rotates every turn, and the numpy row after them):

- ``jax.random.normal``: on the client's key;
- ``jax.random.normal, split key``: on the first of ``jax.random.split(key)``;
- ``jfed.random.normal``: on ``named(key, "noise")``;
- ``jfed.random.private_normal``: the same with tails to 9 standard deviations (two words per
  value), on ``named(key, "noise")``;
- ``jfed.random.private_normal, client key``: on the client's key itself (what
  ``GaussianNoise`` draws);
- ``numpy``: ``default_rng().standard_normal((clients, values), float32)`` summed over clients
  (one core; another generator, so other numbers).

JSON ``rows``: ``{implementation, clients, values, seconds, normals_per_second,
x_jax_random}`` (``x_jax_random``: the first row's seconds over this row's); also ``chunk``,
``repeats``, ``uptime`` before and after, ``device``, ``versions``.
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

import jfed.random as jr
from jfed.engine import ExecutionPlan
from jfed.engine.keys import client_key
from jfed.report import versions

DRAWS = {
    "jax.random.normal": lambda key, shape: jax.random.normal(key, shape),
    "jax.random.normal, split key": lambda key, shape: jax.random.normal(
        jax.random.split(key)[0], shape
    ),
    "jfed.random.normal": lambda key, shape: jr.normal(jr.named(key, "noise"), shape),
    "jfed.random.private_normal": lambda key, shape: jr.private_normal(
        jr.named(key, "noise"), shape
    ),
    "jfed.random.private_normal, client key": jr.private_normal,
}


def chunked_sum(draw, clients: int, values: int, chunk: int):
    """A jitted function of the round key: the sum over all clients of their draws, f32[values]."""
    chunks = -(-clients // chunk)

    def run(root: jax.Array) -> jax.Array:
        ids = jnp.arange(chunks * chunk, dtype=jnp.int32).reshape(chunks, chunk)

        def add(total, chunk_ids):
            drawn = jax.vmap(lambda i: draw(client_key(root, i), (values,)))(chunk_ids)
            return total + jnp.sum(drawn, axis=0), None

        return jax.lax.scan(add, jnp.zeros(values, jnp.float32), ids)[0]

    return jax.jit(run)


def numpy_sum(clients: int, values: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.standard_normal((clients, values), dtype=np.float32).sum(axis=0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1e6")
    parser.add_argument("--values", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", metavar="PATH")
    args = parse_args(parser, argv, __file__, clients="1e3", values=2, repeats=1)
    clients, values = int(float(args.clients)), args.values
    chunk = ExecutionPlan.for_backend().fitted(clients).chunk_size
    root = jax.random.key(1)
    runs = {name: chunked_sum(draw, clients, values, chunk) for name, draw in DRAWS.items()}
    sums = {name: np.asarray(run(root)) for name, run in runs.items()}
    # every row's sum is N(0, clients) per value: a broken draw shows here
    for name, total in sums.items():
        assert np.all(np.abs(total) < 6.0 * np.sqrt(clients)), f"{name}: {total}"
    timed = {name: (lambda run=run: run(root)) for name, run in runs.items()}
    load_before = uptime()
    times = best_in_turns(timed, args.repeats)
    # after the JAX rows, not in their turns (see best_in_turns)
    times.update(best_in_turns({"numpy": lambda: numpy_sum(clients, values)}, args.repeats))
    load_after = uptime()
    first = times["jax.random.normal"]
    rows = []
    print(f"{clients:,} clients x {values} normals, chunks of {chunk}, {jax.devices()[0].platform}")
    print(f"{'implementation':>40} {'seconds':>9} {'normals/s':>10} {'x jax.random':>12}")
    for name, best in times.items():
        rows.append({"implementation": name, "clients": clients, "values": values,
                     "seconds": best, "normals_per_second": clients * values / best,
                     "x_jax_random": first / best})  # fmt: skip
        print(f"{name:>40} {best:>9.4f} {clients * values / best:>10.3g} {first / best:>12.2f}")
    print(f"load before: {load_before}\nload after:  {load_after}")
    if args.json:
        payload = {"benchmark": "draws", "chunk": chunk, "repeats": args.repeats, "rows": rows,
                   "uptime": {"before": load_before, "after": load_after},
                   "device": device_name(), "versions": versions()}  # fmt: skip
        write_json(args.json, payload)


if __name__ == "__main__":
    main()
