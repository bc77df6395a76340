"""One LDP-FL round at the paper's MNIST scale: jfed's vmapped round against the same local
training run client by client in a Python loop, side by side in one process.

    python bench/ldp_fl.py --json bench/results/ldp_fl_cpu.json [--images 60000 --clients 100]

The data are the procedural MNIST-shaped images (28x28, 10 classes; :mod:`jfed.data.images`),
shared equally among the clients; the model is the paper's two-layer CNN; one local epoch of
minibatches of 10 (the paper's MNIST setting), every client selected, eps = 1, fixed range.

Rows (best of ``--repeats`` timed runs after a warm-up that compiles):

- ``jfed``: ``simulate`` of one round with the method's default plan (on CPU one client at a time
  inside the compiled program; the two-point perturbation, split and shuffle, the mean);
- ``jfed, clients vmapped``: the same with every client of the round in one vmapped chunk (the
  accelerator plan; on CPU the vmapped CNN becomes grouped convolutions);
- ``loop, per step``: how per-client frameworks run clients on one device: a Python loop over the
  clients and over each client's minibatches, one compiled SGD step per call, then the same
  perturbation, shuffle and mean;
- ``loop, per client``: a Python loop over the clients calling one compiled local-training
  function per client (the whole of a client's epochs in one call).

``ratio_vs_loop`` is the per-step loop's time over jfed's; ``ratio_vs_client_loop`` the
per-client loop's. The three agree on the round's noise-free mean (checked).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jfed.algorithms import ldp_fl
from jfed.data.images import procedural_clients
from jfed.engine import ExecutionPlan, simulate
from jfed.engine.keys import client_key, round_key, run_streams
from jfed.privacy import two_point
from jfed.report import versions


def best(function, repeats: int) -> float:
    jax.block_until_ready(function())
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        jax.block_until_ready(function())
        times.append(time.perf_counter() - tic)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--images", type=int, default=60_000)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    task = procedural_clients(args.clients, n_images=args.images)
    m = int(task.train.counts[0])
    n = args.clients
    algorithm = ldp_fl.LDPFL("cnn", 28, 10, n, n, m, 1, args.batch, "fixed")
    hp = ldp_fl.hyperparams(0.03, 1.0, 0.0, 0.075)
    key = jax.random.key(0)
    plan = ExecutionPlan(chunk_size=1, block_size=1) if jax.default_backend() == "cpu" else None
    vmapped = ExecutionPlan(chunk_size=n, block_size=n)
    weights_count = algorithm.unravel()[2]

    def jfed_round():
        return simulate(algorithm, task.train, hp, key, 1, plan)[0].weights

    def jfed_vmapped():
        return simulate(algorithm, task.train, hp, key, 1, vmapped)[0].weights

    init_key, server_root, client_root = run_streams(key)
    start = algorithm.init(hp, init_key).weights
    keys = [client_key(round_key(client_root, 0), i) for i in range(n)]
    X, y = task.train.features[:, :m], task.train.targets[:, :m]
    unravel = algorithm.unravel()[0]
    optimizer = optax.sgd(0.03)

    @jax.jit
    def finish(reports, finish_key):
        randomize, shuffle = jax.random.split(finish_key)
        noisy = jax.vmap(lambda k, w: two_point.perturb(k, w, 0.0, 0.075, jnp.float32(1.0)))(
            jax.random.split(randomize, reports.shape[0]), reports
        )
        return ldp_fl.shuffled_mean(shuffle, noisy)

    train_client = jax.jit(
        lambda w, features, labels, k: algorithm.local_training(w, features, labels, 0.03, k)
    )

    def client_loop():
        reports = jnp.stack([train_client(start, X[i], y[i], keys[i]) for i in range(n)])
        return finish(reports, server_root)

    @jax.jit
    def sgd_step(flat, opt_state, features, labels):
        def loss(flat):
            logits = algorithm.module.apply(unravel(flat), features)
            return optax.softmax_cross_entropy_with_integer_labels(
                logits, labels.astype(jnp.int32)
            ).mean()

        updates, opt_state = optimizer.update(jax.grad(loss)(flat), opt_state, flat)
        return optax.apply_updates(flat, updates), opt_state

    steps = m // args.batch

    def step_loop():
        reports = []
        for i in range(n):
            order = np.asarray(jax.random.permutation(jax.random.split(keys[i], 1)[0], m))
            flat, opt_state = start, optimizer.init(start)
            for s in range(steps):
                ids = order[s * args.batch : (s + 1) * args.batch]
                flat, opt_state = sgd_step(flat, opt_state, X[i, ids], y[i, ids])
            reports.append(flat)
        return finish(jnp.stack(reports), server_root)

    # the three train the same clients from the same start with the same minibatches
    noise_free = ldp_fl.LDPFL("cnn", 28, 10, n, n, m, 1, args.batch, "fixed", private=False)
    reference = simulate(noise_free, task.train, hp, key, 1, plan)[0].weights
    trained = jnp.stack([train_client(start, X[i], y[i], keys[i]) for i in range(n)])
    gap = float(jnp.abs(trained.mean(0) - reference).max())

    seconds = {
        "jfed": best(jfed_round, args.repeats),
        "jfed, clients vmapped": best(jfed_vmapped, args.repeats),
        "loop, per client": best(client_loop, args.repeats),
        "loop, per step": best(step_loop, max(1, args.repeats - 1)),
    }
    device = jax.devices()[0]
    rows = [
        {"implementation": name, "seconds_per_round": s, "rounds_per_second": 1.0 / s,
         "clients": n, "images": args.images, "weights": weights_count}
        for name, s in seconds.items()
    ]  # fmt: skip
    result = {
        "benchmark": "one LDP-FL round, paper's CNN, procedural 28x28 images",
        "rows": rows,
        "ratio_vs_loop": seconds["loop, per step"] / seconds["jfed"],
        "ratio_vs_client_loop": seconds["loop, per client"] / seconds["jfed"],
        "noise_free_mean_gap": gap,
        "device": f"{device.platform}: {device.device_kind}",
        "versions": versions(),
    }
    print(f"one round: {n} clients x {m} images, CNN with {weights_count} weights, "
          f"E = 1, B = {args.batch} ({result['device']})")  # fmt: skip
    for row in rows:
        print(f"  {row['implementation']:22s} {row['seconds_per_round']:8.2f} s/round "
              f"{row['rounds_per_second']:8.3f} rounds/s")  # fmt: skip
    print(
        f"  ratio vs the per-step loop {result['ratio_vs_loop']:.1f}x, vs the per-client loop "
        f"{result['ratio_vs_client_loop']:.2f}x; noise-free means agree within {gap:.1e}"
    )
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
