"""One LDP-FL round at the paper's MNIST scale: jfed's vmapped round against the same local
training run client by client in a Python loop, side by side in one process.

    python bench/ldp_fl.py --json bench/results/ldp_fl_cpu.json [--images 60000 --clients 100]
                           [--smoke]

The data are the procedural MNIST-shaped images (28x28, 10 classes; :mod:`jfed.data.images`),
shared equally among the clients; the model is the paper's two-layer CNN; one local epoch of
minibatches of 10 (the paper's MNIST setting), every client selected, eps = 1, fixed range.

Rows (best of ``--repeats`` timed runs after a warm-up that compiles; the rows of each table take
turns in every repeat, PyTorch's training among the whole rounds, so that the ratios compare
times taken under the same machine load):

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

- ``PyTorch loop, per client`` (only when ``torch`` is installed; it is not a jfed dependency):
  the same CNN in PyTorch (``Conv2d`` 5x5 ``same``, max-pool, ``Linear``; 454,922 weights at
  28x28), trained client after client as a Flower or pfl user runs clients on one CPU: a fresh
  model loaded from the round's start weights, one epoch of ``torch.optim.SGD`` minibatches in a
  shuffled order, every core to torch's threads. Its ``seconds_per_round`` adds the loops'
  server side (the same two-point perturbation and mean, run by jfed's code) to its training.
  Where JAX runs on a GPU and torch sees CUDA, the loop runs on the GPU (``--torch-device``:
  ``auto``, ``cpu`` or ``cuda``), as a per-client framework runs its clients on one GPU;
  ``none`` leaves it out (``--smoke`` does: 2 clients, jfed's side only).

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
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from _common import best_in_turns, parse_args, uptime, write_json  # bench/ is on the path when run

from jfed._random import stream_key
from jfed.algorithms import ldp_fl
from jfed.data.images import procedural_clients
from jfed.engine import ExecutionPlan, simulate, stack
from jfed.engine.keys import client_key, round_key, run_streams
from jfed.privacy import two_point
from jfed.report import versions

PYTORCH_TRAINING = "PyTorch training"


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


def torch_client_loop(
    start: dict[str, np.ndarray],
    X: np.ndarray,
    y: np.ndarray,
    batch: int,
    learning_rate: float,
    device: str = "auto",
):
    """A function training every client one after another in PyTorch, or None without torch.
    ``device``: ``cpu``, ``cuda``, or ``auto`` (``cuda`` where JAX runs on a GPU and torch sees
    CUDA, else ``cpu``).

    ``start``: flax's parameter tree of :class:`ConvCNN` as numpy (converted to PyTorch's
    layouts once); ``X: f32[n, m, 784]``, ``y: i32[n, m]``. The function returns the trained
    weights of every client, ``f32[n, P]`` in PyTorch's order (for timing; the order differs)."""
    try:
        import torch
    except ImportError:
        return None

    if device == "auto":
        on_gpu = jax.default_backend() == "gpu" and torch.cuda.is_available()
        device = "cuda" if on_gpu else "cpu"
    side = math.isqrt(X.shape[-1])
    classes = int(start["params"]["Dense_1"]["bias"].shape[0])

    def net():
        return torch.nn.Sequential(
            torch.nn.Conv2d(1, 32, 5, padding="same"), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(32, 64, 5, padding="same"), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Flatten(), torch.nn.Linear(64 * (side // 4) ** 2, 128), torch.nn.ReLU(),
            torch.nn.Linear(128, classes),
        )  # fmt: skip

    params = start["params"]
    hidden = params["Dense_0"]["kernel"]  # flax flattens (h, w, c); torch flattens (c, h, w)
    hidden = hidden.reshape(side // 4, side // 4, 64, 128).transpose(2, 0, 1, 3).reshape(-1, 128)
    tensors = [
        params["Conv_0"]["kernel"].transpose(3, 2, 0, 1), params["Conv_0"]["bias"],
        params["Conv_1"]["kernel"].transpose(3, 2, 0, 1), params["Conv_1"]["bias"],
        hidden.T, params["Dense_0"]["bias"],
        params["Dense_1"]["kernel"].T, params["Dense_1"]["bias"],
    ]  # fmt: skip
    tensors = [torch.tensor(np.ascontiguousarray(t), device=device) for t in tensors]
    state = dict(zip(net().state_dict().keys(), tensors, strict=True))
    features = torch.tensor(np.asarray(X), device=device).reshape(
        X.shape[0], X.shape[1], 1, side, side
    )
    labels = torch.tensor(np.asarray(y), device=device).long()
    generator = torch.Generator().manual_seed(0)

    def train_all():
        reports = []
        for i in range(features.shape[0]):
            model = net().to(device)
            model.load_state_dict(state)
            optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
            order = torch.randperm(features.shape[1], generator=generator).to(device)
            for s in range(features.shape[1] // batch):
                ids = order[s * batch : (s + 1) * batch]
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(features[i, ids]), labels[i, ids])
                loss.backward()
                optimizer.step()
            reports.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
        return torch.stack(reports).cpu().numpy()  # waits for the device

    return train_all, torch.__version__, torch.get_num_threads(), device


def matmul_gflops(size: int = 2048) -> float:
    """The float32 matrix-product rate of this machine, best of 3 (GFLOP/s)."""
    a = jax.random.normal(jax.random.key(0), (size, size))
    product = jax.jit(lambda a: a @ a)
    return 2 * size**3 / best_in_turns({"product": lambda: product(a)}, 3)["product"] / 1e9


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--images", type=int, default=60_000)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--torch-device", default="auto", choices=("auto", "cpu", "cuda", "none"))
    parser.add_argument("--matmul-size", type=int, default=2048, help="the rate's matrix side")
    args = parse_args(parser, argv, __file__, clients=2, images=40, repeats=1,
                      torch_device="none", matmul_size=64)  # fmt: skip
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
        # none is simulated to compute it, as in jfed's round); client after client, as jfed's
        # round on CPU (vmapped over 100 reports of 454,922 weights it took 6x longer on CPU)
        def add(total, client):
            i, w = client
            noisy = two_point.perturb(stream_key(finish_key, i), w, 0.0, 0.075, jnp.float32(1.0))
            return total + noisy, None

        ids = jnp.arange(reports.shape[0])
        total, _ = jax.lax.scan(add, jnp.zeros(reports.shape[1:], reports.dtype), (ids, reports))
        return total / reports.shape[0]

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

        training = jax.jit(lambda b: stack(client, b, task.train, round_key(client_root, 0),
                                           engine_plan.fitted(n)))  # fmt: skip
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

    torch_loop = None if args.torch_device == "none" else torch_client_loop(
        jax.tree.map(np.asarray, unravel(start)), np.asarray(X), np.asarray(y), args.batch, 0.03,
        args.torch_device)  # fmt: skip
    # every row of a table takes its turn in every repeat, so that all see the same machine load
    # (PyTorch's training sits with the whole rounds: jfed's round is compared with it)
    round_runs = {"jfed": jfed_round, "jfed, clients vmapped": jfed_vmapped,
                  "loop, per client": client_loop, "loop, per step": step_loop}  # fmt: skip
    torch_info = None
    if torch_loop is not None:
        train_all, torch_version, torch_threads, torch_device = torch_loop
        round_runs[PYTORCH_TRAINING] = train_all
        torch_info = {"version": torch_version, "threads": torch_threads, "device": torch_device}
    seconds = best_in_turns(round_runs, args.repeats)
    training = best_in_turns(
        {"jfed": engine_training(plan), "jfed, clients vmapped": engine_training(vmapped),
         "loop, per client": client_loop_training, "loop, per step": step_loop_training},
        args.repeats,
    )  # fmt: skip
    server_seconds = best_in_turns({"server": server_side}, args.repeats)["server"]
    if torch_loop is not None:
        torch_training = seconds.pop(PYTORCH_TRAINING)
        seconds["PyTorch loop, per client"] = torch_training + server_seconds
        training["PyTorch loop, per client"] = torch_training
    # XLA counts a loop's body once, so count one SGD step (no loop) and multiply
    step_cost = (
        jax.jit(lambda flat, x, labels: jax.grad(jfed_loss)(flat, x, labels))
        .lower(start, X[0, : args.batch], y[0, : args.batch])
        .compile()
        .cost_analysis()
    )
    step_cost = step_cost[0] if isinstance(step_cost, list) else step_cost
    round_gflop = float(step_cost["flops"]) * steps * n / 1e9
    rate = matmul_gflops(args.matmul_size)
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
        "torch": torch_info,
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
        f"  the round's local training: {round_gflop:.0f} GFLOP; a {args.matmul_size}^2 matrix "
        f"product runs at "
        f"{rate:.0f} GFLOP/s here: at that rate no implementation beats the per-step loop by more "
        f"than {result['ratio_bound']:.1f}x per round (the server side included) or "
        f"{result['training_ratio_bound']:.1f}x in local training"
    )
    if torch_info is not None:
        pytorch = training["PyTorch loop, per client"]
        result["round_vs_pytorch_training"] = pytorch / seconds["jfed"]
        print(
            f"  PyTorch {torch_info['version']} ({torch_info['device']}, {torch_info['threads']} "
            "threads) trains the "
            f"clients one after another in {pytorch:.2f} s: jfed's whole round is "
            f"{result['round_vs_pytorch_training']:.2f}x that (above 1: faster)"
        )
    elif args.torch_device == "none":
        print("  (--torch-device none: no PyTorch row)")
    else:
        print("  (torch is not installed: no PyTorch row)")
    result["uptime"] = {"before": load_before, "after": uptime()}
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()
