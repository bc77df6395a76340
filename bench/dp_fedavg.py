"""DP-FedAvg rounds per second: jfed's one program against a numpy round vectorised over the cohort.

    python bench/dp_fedavg.py [--cohorts 100,1000] [--clients 10000] [--json PATH] [--smoke]

The setting (the same for both): Synthetic(1, 1) (d = 60, 10 classes), N clients of exactly 20
records each, generated once and stored (``SyntheticFederated.materialize``); every round a
uniform cohort of K clients, one local epoch of minibatch SGD (batch 10, two steps) of multinomial
logistic regression from the server model, each update clipped to norm C as a whole (flat),
Gaussian noise of std z C on the sum, the sum divided by K, a server step of 1 (FedAvg); float32.

- ``jfed``: :class:`jfed.algorithms.dp_fedavg.DPFedAvg` through ``jfed.engine.simulate``: the
  rounds are one compiled ``lax.scan``; timed as the run of ``--rounds`` rounds after a warm-up
  that compiles (``simulate(..., timings=)``).
- ``numpy``: the same round written for numpy, vectorised over the cohort (every client's
  epoch as batched ``einsum``), float32: the fast way to write it without JAX. A loop over the
  cohort's clients in numpy is the slow way (timed too, at the smallest cohort, as ``numpy-loop``).

Each figure is the median of ``--repeats`` timings, taken in turn (jfed, numpy, jfed, numpy, ...)
so both see the same load of a shared machine. JSON (default ``bench/results/dp_fedavg.json``):
``rows`` of ``{implementation, cohort, rounds_per_second, seconds_per_round, x_numpy}``,
``uptime`` before and after, ``device``, ``versions``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from _common import parse_args, uptime, write_json

from jfed.algorithms.dp_fedavg import DPFedAvg, FloatNoise, Hyperparams, aggregator_of
from jfed.data import SyntheticFederated
from jfed.engine import Uniform, simulate
from jfed.models import DenseClassifier
from jfed.privacy import GaussianSumParams
from jfed.report import versions

RECORDS, DIM, CLASSES, BATCH = 20, 60, 10, 10
CLIENT_LR, CLIP, NOISE_MULTIPLIER = 0.1, 1.0, 1.0


def population(n_clients: int):
    synthetic = SyntheticFederated.create(
        jax.random.key(0), n_clients, 1.0, 1.0, n_max=RECORDS, dim=DIM, classes=CLASSES,
        count_log_mean=np.log(RECORDS) + 1.0, count_log_std=0.0,
    )  # fmt: skip
    stored = synthetic.materialize()
    assert int(np.min(stored.counts)) == RECORDS
    return stored


def jfed_seconds_per_round(stored, cohort: int, rounds: int) -> float:
    # the float Gaussian sum (FloatNoise, labelled): the mechanism the numpy round writes
    aggregator = aggregator_of(True, float(cohort), noise=FloatNoise())
    algorithm = DPFedAvg(DenseClassifier(DIM, CLASSES, 0), RECORDS, Uniform(cohort), aggregator,
                         batch=BATCH)  # fmt: skip
    hyper = Hyperparams(
        jnp.float32(CLIENT_LR),
        jnp.float32(1.0),
        jnp.float32(0.0),
        GaussianSumParams(jnp.float32(CLIP), jnp.float32(NOISE_MULTIPLIER)),
    )
    timings: dict = {}
    simulate(algorithm, stored, hyper, jax.random.key(1), rounds, timings=timings)
    return timings["run_seconds"] / rounds


class NumpyDPFedAvg:
    """The same round in numpy, vectorised over the cohort (float32)."""

    def __init__(self, stored, seed: int = 0) -> None:
        self.X = np.asarray(stored.features, np.float32)  # [N, 20, d]
        self.y = np.asarray(stored.targets).astype(np.int64)  # [N, 20]
        self.rng = np.random.default_rng(seed)
        self.w = np.zeros((DIM, CLASSES), np.float32)
        self.b = np.zeros(CLASSES, np.float32)

    def round(self, cohort: int) -> None:
        ids = self.rng.choice(len(self.X), cohort, replace=False)
        X, y = self.X[ids], self.y[ids]
        W = np.broadcast_to(self.w, (cohort, DIM, CLASSES)).copy()
        b = np.broadcast_to(self.b, (cohort, CLASSES)).copy()
        order = np.argsort(self.rng.random((cohort, RECORDS), dtype=np.float32), axis=1)
        rows = np.arange(cohort)[:, None]
        for step in range(RECORDS // BATCH):
            take = order[:, step * BATCH : (step + 1) * BATCH]
            Xb, yb = X[rows, take], y[rows, take]  # [K, B, d], [K, B]
            logits = np.einsum("kbd,kdc->kbc", Xb, W) + b[:, None, :]
            logits -= logits.max(axis=2, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(axis=2, keepdims=True)
            p[rows, np.arange(BATCH)[None, :], yb] -= 1.0
            p /= np.float32(BATCH)
            W -= np.float32(CLIENT_LR) * np.einsum("kbd,kbc->kdc", Xb, p)
            b -= np.float32(CLIENT_LR) * p.sum(axis=1)
        dW, db = W - self.w, b - self.b
        norms = np.sqrt(np.einsum("kdc,kdc->k", dW, dW) + np.einsum("kc,kc->k", db, db))
        scale = np.minimum(np.float32(1.0), np.float32(CLIP) / np.maximum(norms, 1e-12))
        noise_std = np.float32(NOISE_MULTIPLIER * CLIP)
        sum_w = np.einsum("k,kdc->dc", scale, dW)
        sum_b = scale @ db
        sum_w += noise_std * self.rng.standard_normal(sum_w.shape, dtype=np.float32)
        sum_b += noise_std * self.rng.standard_normal(sum_b.shape, dtype=np.float32)
        self.w += sum_w / np.float32(cohort)
        self.b += sum_b / np.float32(cohort)

    def round_loop(self, cohort: int) -> None:
        """The same round with a Python loop over the cohort's clients."""
        ids = self.rng.choice(len(self.X), cohort, replace=False)
        sum_w = np.zeros_like(self.w)
        sum_b = np.zeros_like(self.b)
        for i in ids:
            W, b = self.w.copy(), self.b.copy()
            order = self.rng.permutation(RECORDS)
            for step in range(RECORDS // BATCH):
                take = order[step * BATCH : (step + 1) * BATCH]
                Xb, yb = self.X[i, take], self.y[i, take]
                logits = Xb @ W + b
                p = np.exp(logits - logits.max(axis=1, keepdims=True))
                p /= p.sum(axis=1, keepdims=True)
                p[np.arange(BATCH), yb] -= 1.0
                p /= np.float32(BATCH)
                W -= np.float32(CLIENT_LR) * (Xb.T @ p)
                b -= np.float32(CLIENT_LR) * p.sum(axis=0)
            dW, db = W - self.w, b - self.b
            scale = min(1.0, CLIP / max(float(np.sqrt((dW**2).sum() + (db**2).sum())), 1e-12))
            sum_w += np.float32(scale) * dW
            sum_b += np.float32(scale) * db
        noise_std = np.float32(NOISE_MULTIPLIER * CLIP)
        self.w += (sum_w + noise_std * self.rng.standard_normal(sum_w.shape, np.float32)) / cohort
        self.b += (sum_b + noise_std * self.rng.standard_normal(sum_b.shape, np.float32)) / cohort


def numpy_seconds_per_round(model: NumpyDPFedAvg, cohort: int, rounds: int, loop=False) -> float:
    run = model.round_loop if loop else model.round
    start = time.perf_counter()
    for _ in range(rounds):
        run(cohort)
    return (time.perf_counter() - start) / rounds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cohorts", default="100,1000")
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument(
        "--seconds",
        type=float,
        default=1.0,
        help="rough length of one timing (rounds are sized to it)",
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", metavar="PATH", default="bench/results/dp_fedavg.json")
    args = parse_args(parser, argv, __file__, cohorts="10", clients=100, seconds=0.0, repeats=1)
    load_before = uptime()
    stored = population(args.clients)
    rows = []
    for cohort in [int(float(c)) for c in args.cohorts.split(",")]:
        model = NumpyDPFedAvg(stored)
        numpy_seconds_per_round(model, cohort, 3)  # warm-up
        rough = numpy_seconds_per_round(model, cohort, 10)
        rounds = max(10, int(args.seconds / rough))
        jfed_seconds_per_round(stored, cohort, rounds)  # compiles
        timings: dict = {"jfed": [], "numpy": []}
        for _ in range(args.repeats):
            timings["jfed"].append(jfed_seconds_per_round(stored, cohort, rounds))
            timings["numpy"].append(numpy_seconds_per_round(model, cohort, rounds))
        if cohort == min(int(float(c)) for c in args.cohorts.split(",")):
            loop_rounds = max(3, rounds // 20)
            timings["numpy-loop"] = [numpy_seconds_per_round(model, cohort, loop_rounds, True)
                                     for _ in range(max(1, args.repeats // 2))]  # fmt: skip
        numpy_median = statistics.median(timings["numpy"])
        for implementation, values in timings.items():
            median = statistics.median(values)
            rows.append({
                "implementation": implementation, "cohort": cohort, "rounds": rounds,
                "seconds_per_round": median, "rounds_per_second": 1.0 / median,
                "x_numpy": numpy_median / median,
            })  # fmt: skip
    load_after = uptime()
    setting = (
        f"DP-FedAvg, Synthetic(1,1), N={args.clients} clients of {RECORDS} records, d={DIM}, "
        f"{CLASSES} classes, 1 local epoch of batch {BATCH}, flat clip, Gaussian noise"
    )
    print(setting)
    print(f"{'implementation':>15} {'K':>6} {'rounds/s':>10} {'ms/round':>10} {'x numpy':>8}")
    for row in rows:
        print(f"{row['implementation']:>15} {row['cohort']:>6} {row['rounds_per_second']:>10.1f} "
              f"{1e3 * row['seconds_per_round']:>10.3f} {row['x_numpy']:>8.2f}")  # fmt: skip
    print(f"load before: {load_before}\nload after:  {load_after}")
    if args.json:
        payload = {
            "setting": setting,
            "rows": rows,
            "uptime": {"before": load_before, "after": load_after},
            "device": str(jax.devices()[0]),
            "versions": versions(),
        }
        write_json(args.json, payload)


if __name__ == "__main__":
    main()
