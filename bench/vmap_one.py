"""Why the engine vmaps even a chunk of one client: the LDP-FL CNN's local training of 100
clients, scanned client after client, with and without ``vmap``, each in a process of its own.

    python bench/vmap_one.py --json bench/results/vmap_one_cpu.json [--repeats 3] [--smoke]

The clients, model and training are ``bench/ldp_fl.py``'s (100 clients x 30 procedural 28x28
images, the paper's CNN of 454,922 weights, one epoch of minibatches of 10, jfed's
:meth:`jfed.algorithms.ldp_fl.LDPFL.local_training`); no perturbation. Each row runs in a
process of its own, one after the other (the plain scan ran fast in every run of a process that
had run the vmapped program first, and slow in every run of one that had not), and every timing
is kept, beside the best and the median. Rows:

- ``vmapped chunks of one``: a ``lax.scan`` over the clients whose body vmaps the training over a
  chunk of one client, the form in which the engine runs LDP-FL's CPU plan;
- ``plain scan``: the same scan calling the training of one client directly.

On XLA:CPU (jax 0.10.2, 2 cores) the plain scan ran in 20-28 s in most runs and about 2 s in a
few (ad hoc); its slow runs went away with ``XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=
-LIBRARY_FUSION_TYPE_REDUCE`` (YNNPACK's fusions), which also made the vmapped form slower. The
JSON keeps ``XLA_FLAGS`` as it was for the run. ``--smoke`` (2 clients) runs the rows in this
process, one after the other: what it checks is that the rows run, not their times.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import jax
import jax.numpy as jnp
from _common import (  # bench/ is on the path
    device_name,
    parse_args,
    times_in_turns,
    uptime,
    write_json,
)

from jfed.algorithms import ldp_fl
from jfed.data.images import procedural_clients
from jfed.report import versions


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rows", default="vmapped,plain",
                        help="which rows; each runs in a process of its own")  # fmt: skip
    parser.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    args = parse_args(parser, argv, __file__, clients=2, images=20, repeats=1)
    load_before = uptime()
    if not args.in_process:
        report(args, load_before)
        return
    n = args.clients
    task = procedural_clients(n, n_images=args.images)
    m = int(task.train.counts[0])
    algorithm = ldp_fl.LDPFL("cnn", 28, 10, n, n, m, 1, 10, "fixed", private=False)
    start = algorithm.init(ldp_fl.hyperparams(), jax.random.key(0)).weights
    features = jnp.asarray(task.train.features[:, :m])
    targets = jnp.asarray(task.train.targets[:, :m])
    keys = jax.random.split(jax.random.key(1), n)
    learning_rate = jnp.float32(0.03)

    def train(weights, x, y, key):
        return algorithm.local_training(weights, x, y, learning_rate, key)

    @jax.jit
    def vmapped(weights, features, targets, keys):
        def add(total, client):
            trained = jax.vmap(train, (None, 0, 0, 0))(weights, *client)
            return total + trained.sum(0), None

        clients = (features[:, None], targets[:, None], keys[:, None])
        return jax.lax.scan(add, jnp.zeros_like(weights), clients)[0] / n

    @jax.jit
    def plain(weights, features, targets, keys):
        def add(total, client):
            return total + train(weights, *client), None

        return jax.lax.scan(add, jnp.zeros_like(weights), (features, targets, keys))[0] / n

    arguments = (start, features, targets, keys)
    programs = {"vmapped": ("vmapped chunks of one", vmapped), "plain": ("plain scan", plain)}
    chosen = [programs[row] for row in args.rows.split(",")]
    rows_runs = {name: (lambda program=program: program(*arguments)) for name, program in chosen}
    times = times_in_turns(rows_runs, args.repeats)
    weights = jax.device_get(chosen[0][1](*arguments)).tolist()
    write_json(args.json, {"times": times, "weights": weights})


def report(args: argparse.Namespace, load_before: str) -> None:
    """Each row in a child process of its own, one after another; the table and the JSON."""
    times, outputs = {}, []
    for row in args.rows.split(","):
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "row.json")
            command = [sys.executable, __file__, "--in-process", "--rows", row, "--json", path,
                       "--clients", str(args.clients), "--images", str(args.images),
                       "--repeats", str(args.repeats)]  # fmt: skip
            if args.smoke:
                main(command[2:])
            else:
                subprocess.run(command, check=True)
            with open(path, encoding="utf-8") as handle:
                child = json.load(handle)
        times.update(child["times"])
        outputs.append(jnp.asarray(child["weights"]))
    gap = float(max(jnp.abs(output - outputs[0]).max() for output in outputs))
    n, m = args.clients, args.images // args.clients
    rows = [
        {"implementation": name, "seconds": seconds, "best": min(seconds),
         "median": statistics.median(seconds), "clients": n, "images": args.images}
        for name, seconds in times.items()
    ]  # fmt: skip
    print(f"local training of {n} clients x {m} images, LDP-FL CNN, scanned client after client "
          f"({device_name()}); the two agree within {gap:.1e}")  # fmt: skip
    for row in rows:
        runs = ", ".join(f"{s:.2f}" for s in row["seconds"])
        print(f"  {row['implementation']:22s} best {row['best']:7.2f} s, median "
              f"{row['median']:7.2f} s (runs: {runs})")  # fmt: skip
    result = {
        "benchmark": "local training scanned client after client, with and without vmap",
        "rows": rows,
        "gap": gap,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "repeats": args.repeats,
        "device": device_name(),
        "versions": versions(),
        "uptime": {"before": load_before, "after": uptime()},
    }
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()
