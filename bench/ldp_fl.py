"""One LDP-FL round at the paper's MNIST scale: jfed's vmapped round against the same local
training run client by client in a Python loop, side by side in one process.

    python bench/ldp_fl.py --json bench/results/ldp_fl_cpu.json [--images 60000 --clients 100]

The data are the procedural MNIST-shaped images (28x28, 10 classes; :mod:`jfed.data.images`),
shared equally among the clients; the model is the paper's two-layer CNN; one local epoch of
minibatches of 10 (the paper's MNIST setting), every client selected, eps = 1, fixed range.

Rows (best of ``--repeats`` timed runs after a warm-up that compiles):

- ``jfed``: ``simulate`` of one round with the method's default plan (on CPU one client at a time
  inside the compiled program; each client trains and perturbs its own report by the two-point
  mechanism, and the engine sums the reports);
- ``jfed, clients vmapped``: the same with every client of the round in one vmapped chunk (the
  accelerator plan; on CPU the vmapped CNN becomes grouped convolutions);
- ``loop, per step``: how per-client frameworks run clients on one device: a Python loop over the
  clients and over each client's minibatches, one compiled SGD step per call, then the same
  perturbation and the mean;
- ``loop, per client``: a Python loop over the clients calling one compiled local-training
  function per client (the whole of a client's epochs in one call).

The loops run the model as a per-client framework would write it, with ``flax.linen.Conv``
(faster than jfed's matrix-product convolution when called outside a compiled loop; the same
parameters); jfed runs its own CNN (:class:`jfed.algorithms.ldp_fl.MatmulConv`).

``ratio_vs_loop`` is the per-step loop's time over jfed's; ``ratio_vs_client_loop`` the
per-client loop's. All agree on the round's noise-free mean (checked).

What the CPU allows: ``round_gflop`` is XLA's count of the floating-point operations of one
round's local training (one client's, times the clients), ``matmul_gflops`` the rate this
machine reaches on a 2048 x 2048 float32 matrix product (best of 3), and ``ratio_bound`` the
per-step loop's time over ``round_gflop / matmul_gflops``: the ratio an implementation would
reach if it ran every operation of the round at matrix-product speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from _common import uptime, write_json  # bench/ is on the path when run

from jfed.algorithms import ldp_fl
from jfed.data.images import procedural_clients
from jfed.engine import ExecutionPlan, aggregate, simulate, stack_messages
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


class ConvCNN(nn.Module):
    """The same CNN with ``nn.Conv`` (the per-client framework's way to write it)."""

    side: int
    classes: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = x.reshape((*x.shape[:-1], self.side, self.side, 1))
        x = nn.max_pool(nn.relu(nn.Conv(32, (5, 5))(x)), (2, 2), (2, 2))
        x = nn.max_pool(nn.relu(nn.Conv(64, (5, 5))(x)), (2, 2), (2, 2))
        x = x.reshape((*x.shape[:-3], -1))
        x = nn.relu(nn.Dense(128)(x))
        return nn.Dense(self.classes)(x)


@dataclasses.dataclass(frozen=True)
class FrameworkLDPFL(ldp_fl.LDPFL):
    """jfed's local training with the loops' model (the same parameter tree and minibatches),
    its steps traced one after another inside one compiled call (``unroll_steps``), which is how
    ``nn.Conv`` runs fast on CPU."""

    @property
    def module(self) -> nn.Module:
        return ConvCNN(self.side, self.classes)


def matmul_gflops(size: int = 2048) -> float:
    """The float32 matrix-product rate of this machine, best of 3 (GFLOP/s)."""
    a = jax.random.normal(jax.random.key(0), (size, size))
    product = jax.jit(lambda a: a @ a)
    return 2 * size**3 / best(lambda: product(a), 3) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--images", type=int, default=60_000)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    load_before = uptime()
    task = procedural_clients(args.clients, n_images=args.images)
    m = int(task.train.counts[0])
    n = args.clients
    algorithm = ldp_fl.LDPFL("cnn", 28, 10, n, n, m, 1, args.batch, "fixed")
    hp = ldp_fl.hyperparams(0.03, 1.0, 0.0, 0.075)
    key = jax.random.key(0)
    from jfed.methods import LDPFL
    from jfed.methods.ldp_fl import LDPFLExperiment

    plan = LDPFLExperiment(LDPFL(clients=n), task=task).default_plan()
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
    framework_model = ConvCNN(28, 10)
    framework = FrameworkLDPFL(
        **{f.name: getattr(algorithm, f.name) for f in dataclasses.fields(algorithm)}
        | {"unroll_steps": True}
    )

    @jax.jit
    def finish(reports, finish_key):
        # each client's two-point report, then their mean (a shuffle does not change a sum, so
        # none is simulated to compute it, as in jfed's round)
        noisy = jax.vmap(lambda k, w: two_point.perturb(k, w, 0.0, 0.075, jnp.float32(1.0)))(
            jax.random.split(finish_key, reports.shape[0]), reports
        )
        return noisy.mean(0)

    train_client = jax.jit(
        lambda w, features, labels, k: framework.local_training(w, features, labels, 0.03, k)
    )

    def loss_of(model: nn.Module):
        def loss(flat, features, labels):
            logits = model.apply(unravel(flat), features)
            return optax.softmax_cross_entropy_with_integer_labels(
                logits, labels.astype(jnp.int32)
            ).mean()

        return loss

    framework_loss, jfed_loss = loss_of(framework_model), loss_of(algorithm.module)

    @jax.jit
    def sgd_step(flat, opt_state, features, labels):
        grads = jax.grad(framework_loss)(flat, features, labels)
        updates, opt_state = optimizer.update(grads, opt_state, flat)
        return optax.apply_updates(flat, updates), opt_state

    steps = m // args.batch

    # the three train the same clients from the same start with the same minibatches
    noise_free = ldp_fl.LDPFL("cnn", 28, 10, n, n, m, 1, args.batch, "fixed", private=False)
    reference = simulate(noise_free, task.train, hp, key, 1, plan)[0].weights
    trained = jnp.stack([train_client(start, X[i], y[i], keys[i]) for i in range(n)])
    gap = float(jnp.abs(trained.mean(0) - reference).max())

    # the clients' local training alone (what the engine runs; the perturbation and mean of a
    # round are the same computation in every implementation)
    def engine_training(engine_plan):
        def client(broadcast, view, client_key_):
            return algorithm.local_training(
                broadcast.weights, view.features[view.silo_id, :m],
                view.targets[view.silo_id, :m], broadcast.learning_rate, client_key_,
            )  # fmt: skip

        training = jax.jit(lambda b: aggregate(client, b, task.train, round_key(client_root, 0),
                                               engine_plan.fitted(n), stack_messages))  # fmt: skip
        broadcast = ldp_fl.Broadcast(start, jnp.float32(0.03))
        return lambda: training(broadcast)

    def client_loop_training():
        return jnp.stack([train_client(start, X[i], y[i], keys[i]) for i in range(n)])

    def step_loop_training():
        reports = []
        for i in range(n):
            order = np.asarray(jax.random.permutation(jax.random.split(keys[i], 1)[0], m))
            flat, opt_state = start, optimizer.init(start)
            for s in range(steps):
                ids = order[s * args.batch : (s + 1) * args.batch]
                flat, opt_state = sgd_step(flat, opt_state, X[i, ids], y[i, ids])
            reports.append(flat)
        return jnp.stack(reports)

    def server_side():
        return finish(trained, server_root)

    def client_loop():
        return finish(client_loop_training(), server_root)

    def step_loop():
        return finish(step_loop_training(), server_root)

    seconds = {
        "jfed": best(jfed_round, args.repeats),
        "jfed, clients vmapped": best(jfed_vmapped, args.repeats),
        "loop, per client": best(client_loop, args.repeats),
        "loop, per step": best(step_loop, max(1, args.repeats - 1)),
    }
    training = {
        "jfed": best(engine_training(plan), args.repeats),
        "jfed, clients vmapped": best(engine_training(vmapped), args.repeats),
        "loop, per client": best(client_loop_training, args.repeats),
        "loop, per step": best(step_loop_training, max(1, args.repeats - 1)),
    }
    server_seconds = best(server_side, args.repeats)
    # XLA counts a loop's body once, so count one SGD step (no loop) and multiply
    step_cost = (
        jax.jit(lambda flat, x, labels: jax.grad(jfed_loss)(flat, x, labels))
        .lower(start, X[0, : args.batch], y[0, : args.batch])
        .compile()
        .cost_analysis()
    )
    step_cost = step_cost[0] if isinstance(step_cost, list) else step_cost
    round_gflop = float(step_cost["flops"]) * steps * n / 1e9
    rate = matmul_gflops()
    device = jax.devices()[0]
    rows = [
        {"implementation": name, "seconds_per_round": s, "rounds_per_second": 1.0 / s,
         "training_seconds": training[name], "clients": n, "images": args.images,
         "weights": weights_count}
        for name, s in seconds.items()
    ]  # fmt: skip
    result = {
        "benchmark": "one LDP-FL round, paper's CNN, procedural 28x28 images",
        "rows": rows,
        "ratio_vs_loop": seconds["loop, per step"] / seconds["jfed"],
        "ratio_vs_client_loop": seconds["loop, per client"] / seconds["jfed"],
        "training_ratio_vs_loop": training["loop, per step"] / training["jfed"],
        "training_ratio_vs_client_loop": training["loop, per client"] / training["jfed"],
        "server_side_seconds": server_seconds,
        "noise_free_mean_gap": gap,
        "plan": plan.describe() if plan is not None else "backend default",
        "round_gflop": round_gflop,
        "matmul_gflops": rate,
        "ratio_bound": seconds["loop, per step"] / (round_gflop / rate + server_seconds),
        "training_ratio_bound": training["loop, per step"] / (round_gflop / rate),
        "device": f"{device.platform}: {device.device_kind}",
        "versions": versions(),
    }
    print(f"one round: {n} clients x {m} images, CNN with {weights_count} weights, "
          f"E = 1, B = {args.batch} ({result['device']})")  # fmt: skip
    for row in rows:
        print(f"  {row['implementation']:22s} {row['seconds_per_round']:8.2f} s/round "
              f"{row['rounds_per_second']:8.3f} rounds/s; local training alone "
              f"{row['training_seconds']:6.2f} s")  # fmt: skip
    print(f"  the loops' server side (two-point perturbation of every report, mean) "
          f"{server_seconds:.2f} s")  # fmt: skip
    print(
        f"  ratio vs the per-step loop {result['ratio_vs_loop']:.1f}x, vs the per-client loop "
        f"{result['ratio_vs_client_loop']:.2f}x; noise-free means agree within {gap:.1e}"
    )
    print(
        f"  local training alone: {result['training_ratio_vs_loop']:.1f}x the per-step loop, "
        f"{result['training_ratio_vs_client_loop']:.2f}x the per-client loop"
    )
    print(
        f"  the round's local training: {round_gflop:.0f} GFLOP; a 2048^2 matrix product runs at "
        f"{rate:.0f} GFLOP/s here: at that rate no implementation beats the per-step loop by more "
        f"than {result['ratio_bound']:.1f}x per round (the server side included) or "
        f"{result['training_ratio_bound']:.1f}x in local training"
    )
    result["uptime"] = {"before": load_before, "after": uptime()}
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()
