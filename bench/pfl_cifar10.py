"""pfl-research's CIFAR-10 setups in jfed and in pfl 0.6, side by side on this machine: seconds
per round and per 100 rounds, the per-round cost breakdown, and accuracy after the same rounds.

    python bench/pfl_cifar10.py --json bench/results/pfl_cifar10_cpu.json

The setups (apple/pfl-research: benchmarks/image_classification/configs/baseline.yaml and
publications/pfl, the framework comparison): 1,000 users of 50 images each, IID; a cohort of 50
users a round; one local epoch of SGD minibatches of 10 at learning rate 0.1; FedAvg weighting
every user alike (``WeightByUser``) with a central SGD step of learning rate 1; pfl's
``simple_cnn`` (:class:`jfed.models.CifarCNN`, 1,626,442 parameters, dropout 0.25 and 0.5 in
training). ``--dp`` adds pfl's central DP benchmark: each user's update clipped to L2 norm 0.4,
Gaussian noise on the sum calibrated by pfl's PLD accountant for eps = 2, delta = 1e-6 over 3,000
rounds at sampling rate 1,000 / 10^6 with a noise cohort of 1,000 (the noise's standard
deviation scaled by 50 / 1,000); jfed uses the standard deviation pfl computed.

pfl runs in a virtual environment of its own (``bench/.venv/pfl``, created on first use with
``pip install torch==2.13.0 pfl[pytorch]==0.6.0``; neither is a jfed dependency) through
``bench/_pfl_cifar10_peer.py``. Both sides train on the same images: CIFAR-10's python batches
from ``--data-dir`` when given, else procedural CIFAR-shaped images (32x32x3, 10 classes; the
time of a round does not depend on pixel values, and the output says which were used),
standardised per channel as pfl's benchmark does.

jfed's round is written on the engine directly (:func:`jfed.engine.simulate` with the small
algorithm below: a uniform cohort, each client's local SGD written for one client, flat
clipping by :func:`jfed.privacy.clip_tree`, noise by :func:`jfed.privacy.gaussian_noise_tree`).
Its breakdown comes from three compiled programs timed alike: local training alone (with the
sum over the cohort and the central step), plus clipping, plus noise; each part is the
difference. pfl's breakdown wraps pfl's own functions (local training, clipping, noise); the
rest of its round is sampling, aggregation and the central step.

``--no-peer`` runs jfed's side only (no pfl environment; with ``--dp`` the noise's standard
deviation is then ``--noise-stddev``, not pfl's); ``--smoke`` does, at 4 users of 10 images.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from _common import device_name, parse_args, uptime, write_json  # bench/ is on the path when run

from jfed.data.cifar import read_cifar
from jfed.data.clients import from_arrays
from jfed.engine import ExecutionPlan, Uniform, simulate
from jfed.models import CifarCNN
from jfed.privacy import clip_tree, gaussian_noise_tree

HERE = os.path.dirname(os.path.abspath(__file__))
PFL_VENV = os.path.join(HERE, ".venv", "pfl")
PFL_REQUIREMENTS = ("torch==2.13.0", "pfl[pytorch]==0.6.0")


class Hyper(NamedTuple):
    local_learning_rate: jax.Array
    central_learning_rate: jax.Array
    clip: jax.Array
    noise_stddev: jax.Array  # on the sum of the cohort's clipped updates


@dataclass(frozen=True)
class FedAvgRound:
    """FedAvg as pfl's benchmark runs it: a uniform cohort, one local epoch of minibatch SGD per
    client (its records in a fresh random order), the mean of the updates over the cohort and a
    central SGD step. ``stage``: ``"train"`` (no clipping, no noise), ``"clip"`` (updates clipped
    to ``hyper.clip``) or ``"dp"`` (clipped, and Gaussian noise added to the sum)."""

    model: CifarCNN
    cohort: Uniform
    records: int  # per client (every client holds the same number)
    batch: int
    stage: str = "dp"

    def init(self, hyper: Hyper, key: jax.Array) -> dict:
        return self.model.init(key)

    def client(self, broadcast, view, key):
        params, hyper = broadcast
        order_key, dropout_key = jax.random.split(key)
        order = jax.random.permutation(order_key, self.records)
        steps = self.records // self.batch

        def step(local, s):
            X, y = view.rows(jax.lax.dynamic_slice(order, (s * self.batch,), (self.batch,)))
            grads = jax.grad(self.model.loss)(
                local, X, y, jnp.ones(self.batch), jax.random.fold_in(dropout_key, s)
            )
            return jax.tree.map(lambda p, g: p - hyper.local_learning_rate * g, local, grads), None

        local, _ = jax.lax.scan(step, params, jnp.arange(steps))
        update = jax.tree.map(jnp.subtract, local, params)
        if self.stage != "train":
            update, _ = clip_tree(update, hyper.clip)
        return update

    def round(self, params: dict, hyper: Hyper, key: jax.Array, clients):
        cohort = clients.sample(self.cohort)
        total = cohort.sum(self.client, (params, hyper))
        if self.stage == "dp":
            noise = gaussian_noise_tree(key, total, hyper.noise_stddev)
            total = jax.tree.map(jnp.add, total, noise)
        mean = jax.tree.map(lambda t: t / self.cohort.size, total)
        params = jax.tree.map(lambda p, m: p + hyper.central_learning_rate * m, params, mean)
        return params, {"cohort": cohort.info.size}


def procedural_cifar(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(u8[n, 32, 32, 3], i64[n])``: each class a fixed smooth colour pattern (a few Gaussian
    blobs per channel), each image its class's pattern shifted by up to 3 pixels plus noise."""
    rng = np.random.default_rng(seed)
    grid = np.arange(32.0)
    yy, xx = np.meshgrid(grid, grid, indexing="ij")
    centres = rng.uniform(6, 26, (10, 3, 3, 2))
    patterns = np.exp(
        -((yy - centres[..., 0, None, None]) ** 2 + (xx - centres[..., 1, None, None]) ** 2) / 18
    ).sum(axis=2)  # [class, channel, 32, 32]
    patterns = np.moveaxis(patterns / patterns.max(axis=(2, 3), keepdims=True), 1, -1)
    labels = rng.integers(0, 10, n)
    images = np.empty((n, 32, 32, 3), np.uint8)
    for i, (label, (dy, dx)) in enumerate(zip(labels, rng.integers(-3, 4, (n, 2)), strict=True)):
        image = np.roll(patterns[label], (dy, dx), axis=(0, 1)) + 0.35 * rng.normal(
            size=(32, 32, 3)
        )
        images[i] = np.clip(image * 255.0, 0, 255).astype(np.uint8)
    return images, labels


def ensure_pfl() -> str:
    """The Python of pfl's own virtual environment, created on first use."""
    python = os.path.join(PFL_VENV, "bin", "python")
    if not os.path.exists(python):
        print(f"creating {PFL_VENV} with {' '.join(PFL_REQUIREMENTS)} (once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", PFL_VENV], check=True)
        for requirement in PFL_REQUIREMENTS:  # torch first: pip then takes the CPU build on disk
            subprocess.run([python, "-m", "pip", "install", "-q", requirement], check=True)
    return python


def run_pfl(args, data_path: str, workdir: str) -> dict:
    setup = {
        "users": args.users, "images_per_user": args.images_per_user, "cohort": args.cohort,
        "batch": args.batch, "local_lr": args.local_lr, "central_lr": args.central_lr,
        "rounds": args.rounds, "seed": args.seed, "dp": args.dp, "clip": args.clip,
        "epsilon": args.epsilon, "delta": args.delta, "dp_iterations": args.dp_iterations,
        "population": args.population, "noise_cohort": args.noise_cohort, "threads": args.threads,
    }  # fmt: skip
    setup_path, out_path = os.path.join(workdir, "setup.json"), os.path.join(workdir, "pfl.json")
    with open(setup_path, "w") as handle:
        json.dump(setup, handle)
    peer = os.path.join(HERE, "_pfl_cifar10_peer.py")
    tic = time.perf_counter()
    subprocess.run([ensure_pfl(), peer, data_path, setup_path, out_path], check=True)
    result = json.load(open(out_path))
    result["wall_seconds"] = time.perf_counter() - tic
    return result


def jfed_rounds(args, population, stage: str, hyper: Hyper, key) -> tuple[float, dict]:
    """``(seconds per round, final state)`` of ``args.rounds`` rounds in one compiled program
    (compile excluded), the best of ``args.repeats`` runs."""
    algorithm = FedAvgRound(CifarCNN(), Uniform(args.cohort), args.images_per_user, args.batch,
                            stage)  # fmt: skip
    plan = ExecutionPlan(block_size=args.chunk, chunk_size=args.chunk)
    best, state = float("inf"), None
    for _ in range(args.repeats):
        timings: dict = {}
        state, _ = simulate(algorithm, population, hyper, key, args.rounds, plan, timings=timings)
        best = min(best, timings["run_seconds"] / args.rounds)
    return best, state


def accuracy(params, X: np.ndarray, y: np.ndarray, scale, shift) -> float:
    correct = jax.jit(CifarCNN().correct)
    right = 0.0
    for start in range(0, len(y), 1000):
        batch = (X[start : start + 1000].astype(np.float32) * scale + shift).astype(np.float32)
        right += float(jnp.sum(correct(params, batch, y[start : start + 1000])))
    return right / len(y)


def summary(per_round: float) -> dict:
    return {"seconds_per_round": per_round, "seconds_per_100_rounds": 100 * per_round}


def tabulate(result: dict) -> dict:
    """``result`` with a one-line ``setting`` and one row per framework (seconds per round and per
    100 rounds, the round's parts, accuracy, and the round's time as a multiple of pfl's), as
    the other benchmarks' results are read by the docs' tables. A part is the difference of two
    separately timed programs (jfed) or a wrapped function's time (pfl): a part smaller than the
    rounds' spread can come out negative. Without pfl's side (``--no-peer``) the ratios are
    ``None``."""
    setup = result["setup"]
    frameworks = ("jfed", "pfl") if result["pfl"] is not None else ("jfed",)
    pfl_seconds = result["pfl"]["seconds_per_round"] if result["pfl"] is not None else None
    setting = (
        f"pfl-research's CIFAR-10 setup: {setup['users']} users x {setup['images_per_user']} "
        f"images IID, cohort {setup['cohort']}, one local epoch of batch {setup['batch']}, "
        f"{setup['rounds']} rounds, "
        + (f"central DP (clip {setup['clip']}, eps {setup['epsilon']}, delta {setup['delta']})"
           if setup["dp"] else "no DP")
        + f"; {setup['images']}; load when it ended: {result['load'].strip()}"
    )  # fmt: skip
    rows = []
    for framework in frameworks:
        side = result[framework]
        version = side.get("version", "") + (f" (torch {side['torch']})" if "torch" in side else "")
        rows.append(
            {"framework": framework, "version": version or "this checkout",
             "seconds_per_round": side["seconds_per_round"],
             "seconds_per_100_rounds": side["seconds_per_100_rounds"],
             **side["breakdown_seconds_per_round"], "test_accuracy": side["test_accuracy"],
             "x_pfl_round": side["seconds_per_round"] / pfl_seconds if pfl_seconds else None}
        )  # fmt: skip
    speedup = pfl_seconds / result["jfed"]["seconds_per_round"] if pfl_seconds else None
    return result | {"setting": setting, "rows": rows, "jfed_speedup": speedup}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--images-per-user", type=int, default=50)
    parser.add_argument("--cohort", type=int, default=50)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--local-lr", type=float, default=0.1)
    parser.add_argument("--central-lr", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=20, help="rounds timed on each side")
    parser.add_argument("--repeats", type=int, default=2, help="jfed: best of this many runs")
    parser.add_argument("--dp", action="store_true", help="pfl's central DP benchmark")
    parser.add_argument("--clip", type=float, default=0.4)
    parser.add_argument("--epsilon", type=float, default=2.0)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--dp-iterations", type=int, default=3_000)
    parser.add_argument("--population", type=float, default=1e6)
    parser.add_argument("--noise-cohort", type=int, default=1_000)
    parser.add_argument(
        "--chunk",
        type=int,
        default=None,
        help="clients vmapped at once by jfed (default: 1 on CPU, the cohort else)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument(
        "--data-dir", default=None, help="CIFAR-10 python batches (else procedural)"
    )
    parser.add_argument("--test-images", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-peer", dest="peer", action="store_false",
                        help="jfed's side only: no pfl run (and no pfl environment)")  # fmt: skip
    parser.add_argument("--noise-stddev", type=float, default=1.0,
                        help="--dp --no-peer: the noise's std on the sum (else pfl's)")  # fmt: skip
    parser.add_argument("--json", default=None, help="write the result here")
    args = parse_args(parser, argv, __file__, users=4, images_per_user=10, cohort=2, batch=5,
                      rounds=1, repeats=1, test_images=10, peer=False)  # fmt: skip
    if args.chunk is None:
        args.chunk = 1 if jax.default_backend() == "cpu" else -(-args.cohort // 8) * 8

    n_train = args.users * args.images_per_user
    if args.data_dir:
        x_train, y_train, x_test, y_test = read_cifar(args.data_dir, 10)
        if n_train > len(y_train):
            parser.error(f"--users x --images-per-user = {n_train} > {len(y_train)} images")
        images = "CIFAR-10 (python batches from --data-dir)"
    else:
        x_all, y_all = procedural_cifar(n_train + args.test_images, args.seed)
        x_train, y_train, x_test, y_test = (x_all[:n_train], y_all[:n_train], x_all[n_train:],
                                            y_all[n_train:])  # fmt: skip
        images = "procedural CIFAR-shaped images (32x32x3, 10 classes): CIFAR-10 not given"
    order = np.random.default_rng(args.seed).permutation(len(y_train))[:n_train]  # IID users
    x_train, y_train = x_train[order], y_train[order]
    x_test, y_test = x_test[: args.test_images], y_test[: args.test_images]
    mean = x_train.mean(axis=(0, 1, 2), dtype=np.float64)
    std = x_train.std(axis=(0, 1, 2), dtype=np.float64)
    scale, shift = (1.0 / std).astype(np.float32), (-mean / std).astype(np.float32)
    print(f"images: {images}; {args.users} users x {args.images_per_user}, cohort {args.cohort}, "
          f"{args.rounds} rounds, {'central DP' if args.dp else 'no DP'}", flush=True)  # fmt: skip

    pfl, noise_stddev = None, args.noise_stddev
    if args.peer:
        with tempfile.TemporaryDirectory() as workdir:
            data_path = os.path.join(workdir, "data.npz")
            np.savez(data_path, train_x=(x_train * scale + shift).astype(np.float32),
                     train_y=y_train, test_x=(x_test * scale + shift).astype(np.float32),
                     test_y=y_test)  # fmt: skip
            pfl = run_pfl(args, data_path, workdir)
        noise_stddev = pfl["noise_stddev_on_sum"]
        timed = pfl["rounds"][1:] or pfl["rounds"]  # the first round warms PyTorch up
        pfl_parts = {part: float(np.mean([r[part] for r in timed]))
                     for part in ("seconds", "local_training", "clipping", "noise")}  # fmt: skip
        pfl_parts["other"] = pfl_parts["seconds"] - sum(
            pfl_parts[p] for p in ("local_training", "clipping", "noise")
        )
    else:
        print("--no-peer: jfed's side only, no pfl run", flush=True)

    writers = np.repeat(np.arange(args.users), args.images_per_user)
    population, _ = from_arrays(x_train, y_train.astype(np.int32), writers, scale, shift)
    hyper = Hyper(*(jnp.float32(v) for v in (args.local_lr, args.central_lr, args.clip,
                                               noise_stddev)))  # fmt: skip
    key = jax.random.key(args.seed)
    stages = ("train", "clip", "dp") if args.dp else ("train",)
    seconds, state = {}, None
    for stage in stages:
        seconds[stage], state = jfed_rounds(args, population, stage, hyper, key)
    jfed_round = seconds[stages[-1]]
    jfed_parts = {
        "local_training_with_aggregation": seconds["train"],
        "clipping": seconds["clip"] - seconds["train"] if args.dp else 0.0,
        "noise": seconds["dp"] - seconds["clip"] if args.dp else 0.0,
    }
    jfed_accuracy = accuracy(state, x_test, y_test, scale, shift)

    result = {
        "benchmark": "pfl_cifar10",
        "setup": vars(args) | {"images": images},
        "device": device_name(),
        "load": uptime(),
        "jfed": summary(jfed_round)
        | {
            "breakdown_seconds_per_round": jfed_parts,
            "test_accuracy": jfed_accuracy,
            "chunk": args.chunk,
        },
        "pfl": None,
    }
    print(f"jfed: {jfed_round:.3f} s per round ({100 * jfed_round:.1f} s per 100 rounds), "
          f"accuracy {jfed_accuracy:.3f} after {args.rounds} rounds")  # fmt: skip
    print("jfed breakdown (s/round): " + ", ".join(f"{k} {v:.3f}" for k, v in jfed_parts.items()))
    if pfl is None:
        if args.json:
            write_json(args.json, tabulate(result))
        return
    result["pfl"] = summary(pfl_parts["seconds"]) | {
        "breakdown_seconds_per_round": {k: v for k, v in pfl_parts.items() if k != "seconds"},
        "test_accuracy": pfl["test_accuracy"],
        "version": pfl["pfl_version"],
        "torch": pfl["torch_version"],
        "torch_threads": pfl["torch_threads"],
        "noise_stddev_on_sum": pfl["noise_stddev_on_sum"],
        "rounds_timed": len(timed),
    }
    result["ratio"] = pfl_parts["seconds"] / jfed_round
    print(f"pfl {pfl['pfl_version']} (torch {pfl['torch_version']}, "
          f"{pfl['torch_threads']} threads): {pfl_parts['seconds']:.3f} s per round "
          f"({100 * pfl_parts['seconds']:.1f} s per 100 rounds), accuracy "
          f"{pfl['test_accuracy']:.3f} after {args.rounds} rounds")  # fmt: skip
    print(
        "pfl breakdown (s/round): "
        + ", ".join(f"{k} {v:.3f}" for k, v in result["pfl"]["breakdown_seconds_per_round"].items())
    )
    print(f"pfl's round takes {result['ratio']:.2f}x jfed's ({images}; {uptime()})")
    if args.json:
        write_json(args.json, tabulate(result))


if __name__ == "__main__":
    main()
