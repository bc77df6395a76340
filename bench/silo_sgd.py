"""Noisy MB-SGD on the seed's MNIST-shaped workload: jfed vs numpy, and a sweep in one program.

    python bench/silo_sgd.py [--json PATH] [--records 8673] [--sweep 6,10,3] [--smoke]

Workload: 25 silos x 8,673 records, d = 100, K = 10, R = 25, logistic loss (procedural silos
standing in for MNIST), per-example clipping, per-silo Gaussian noise, projection.

1. jfed (one jitted program: rounds as lax.scan, silos vmapped) vs a plain-numpy loop over silos
   written the way the seed's authors wrote theirs (see ``numpy_loop_round``), and vs a numpy
   version vectorised over silos doing exactly jfed's work (per-example clipping, projection);
   all in this process. Reports rounds/s and the ratios.
2. A 6-eps x 10-step-size x 3-repeat sweep (180 runs) of the same workload vmapped in ONE
   program: compile and run times.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from _common import parse_args  # bench/ is on the path

from jfed.algorithms import silo_privacy, silo_sgd
from jfed.algorithms.losses import Loss
from jfed.data.silos import synthetic_silos
from jfed.engine import ExecutionPlan, run_rounds
from jfed.report import versions

N, RECORDS, d, K, R = 25, 8673, 100, 10, 25
CLIP, RADIUS, STEP = 1.0, 10.0, 1.0
EPSILONS = (0.75, 1.5, 3.0, 6.0, 12.0, 18.0)
STEPS = tuple(np.linspace(0.1, 2.0, 10))
REPEATS = 3


def numpy_loop_round(w, X, y, sigma, rng):
    """One round the way the seed's authors wrote it: a Python loop over silos, each drawing K
    indices with replacement, the minibatch-mean logistic gradient (no per-example clipping: they
    bound L from the data), and its noise as ``multivariate_normal(0, sigma^2 I)``."""
    g = np.zeros(d)
    for i in range(N):
        idx = rng.integers(0, X.shape[1], K)
        Xb, yb = X[i][idx], y[i][idx]
        g += Xb.T @ (1.0 / (1.0 + np.exp(-np.clip(Xb @ w, -15, 15))) - yb) / K
        g += rng.multivariate_normal(np.zeros(d), sigma**2 * np.eye(d))
    return w - STEP * g / N


def numpy_lean_loop_round(w, X, y, sigma, rng):
    """A leaner loop over silos doing jfed's work (per-example clipping, standard-normal noise,
    projection): the fairest per-silo loop."""
    updates = []
    for i in range(N):
        idx = rng.integers(0, X.shape[1], K)
        Xb, yb = X[i][idx], y[i][idx]
        grads = (1.0 / (1.0 + np.exp(-(Xb @ w))) - yb)[:, None] * Xb
        norms = np.linalg.norm(grads, axis=1, keepdims=True)
        grads = grads * np.minimum(1.0, CLIP / np.maximum(norms, 1e-12))
        updates.append(grads.mean(0) + sigma * rng.standard_normal(d))
    w = w - STEP * np.mean(updates, axis=0)
    norm = np.linalg.norm(w)
    return w if norm <= RADIUS else w * RADIUS / norm


def numpy_vectorised_round(w, X, y, sigma, rng):
    """The same round vectorised over silos with numpy fancy indexing."""
    idx = rng.integers(0, X.shape[1], (N, K))
    Xb = X[np.arange(N)[:, None], idx]
    yb = y[np.arange(N)[:, None], idx]
    margins = Xb @ w
    grads = (1.0 / (1.0 + np.exp(-margins)) - yb)[..., None] * Xb
    norms = np.linalg.norm(grads, axis=2, keepdims=True)
    grads = grads * np.minimum(1.0, CLIP / np.maximum(norms, 1e-12))
    w = w - STEP * np.mean(grads.mean(1) + sigma * rng.standard_normal((N, d)), axis=0)
    norm = np.linalg.norm(w)
    return w if norm <= RADIUS else w * RADIUS / norm


def _best(fn, repeats=3):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=RECORDS, help="records per silo")
    parser.add_argument(
        "--sweep",
        default=f"{len(EPSILONS)},{len(STEPS)},{REPEATS}",
        help="the sweep's eps, step sizes and repeats (the first of each)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="a time: best of these")
    parser.add_argument("--json", metavar="PATH")
    args = parse_args(parser, argv, __file__, records=40, sweep="2,2,1", repeats=1)
    n = args.records  # the seed's n unless given
    task = synthetic_silos(jax.random.key(0), N, n, d)
    delta = 1.0 / n**2
    sigma = silo_privacy.mbsgd_noise(n, K, R, 1.0, delta, CLIP, "theorem").noise_std
    algorithm = silo_sgd.NoisyMBSGD(Loss("logistic"), d, N, K, R, sampling="with-replacement")
    plan = ExecutionPlan(block_size=N, chunk_size=N)
    hp = silo_sgd.hyperparams(N, step_size=STEP, clip_norm=CLIP, radius=RADIUS, noise_std=sigma)

    program = jax.jit(lambda hp, key: run_rounds(algorithm, task.train, hp, key, R, plan)[0].w)
    start = time.perf_counter()
    compiled = program.lower(hp, jax.random.key(1)).compile()
    compile_seconds = time.perf_counter() - start
    jax.block_until_ready(compiled(hp, jax.random.key(1)))
    jax_seconds = _best(lambda: jax.block_until_ready(compiled(hp, jax.random.key(1))),
                        args.repeats + 2)  # fmt: skip

    X, y = np.asarray(task.train.features, np.float64), np.asarray(task.train.targets, np.float64)
    rng = np.random.default_rng(0)

    def run_numpy(round_fn):
        w = np.zeros(d)
        for _ in range(R):
            w = round_fn(w, X, y, sigma, rng)
        return w

    loop_seconds = _best(lambda: run_numpy(numpy_loop_round), args.repeats)
    lean_seconds = _best(lambda: run_numpy(numpy_lean_loop_round), args.repeats)
    vector_seconds = _best(lambda: run_numpy(numpy_vectorised_round), args.repeats)
    rows = {
        "jax_rounds_per_second": R / jax_seconds,
        "numpy_loop_rounds_per_second": R / loop_seconds,
        "numpy_lean_loop_rounds_per_second": R / lean_seconds,
        "numpy_vectorised_rounds_per_second": R / vector_seconds,
        "ratio_vs_numpy_loop": loop_seconds / jax_seconds,
        "ratio_vs_numpy_lean_loop": lean_seconds / jax_seconds,
        "ratio_vs_numpy_vectorised": vector_seconds / jax_seconds,
        "jax_seconds_per_run": jax_seconds,
        "jax_compile_seconds": compile_seconds,
    }
    print(f"workload: {N} silos x {n} records, d={d}, K={K}, R={R}, logistic, sigma={sigma:.4g}")
    print(f"{'implementation':>22} {'rounds/s':>10} {'jax speed-up':>12}")
    print(f"{'jfed (jit, vmap)':>22} {rows['jax_rounds_per_second']:>10.1f} {'1.0':>12}")
    print(f"{'numpy loop (authors)':>22} {rows['numpy_loop_rounds_per_second']:>10.1f} "
          f"{rows['ratio_vs_numpy_loop']:>12.1f}")  # fmt: skip
    print(f"{'numpy lean loop':>22} {rows['numpy_lean_loop_rounds_per_second']:>10.1f} "
          f"{rows['ratio_vs_numpy_lean_loop']:>12.1f}")  # fmt: skip
    print(f"{'numpy vectorised':>22} {rows['numpy_vectorised_rounds_per_second']:>10.1f} "
          f"{rows['ratio_vs_numpy_vectorised']:>12.1f}")  # fmt: skip

    # the sweep: eps x step size x repeat, one program
    eps_count, step_count, repeats = (int(value) for value in args.sweep.split(","))
    epsilons, steps = EPSILONS[:eps_count], STEPS[:step_count]
    noise = {
        e: silo_privacy.mbsgd_noise(n, K, R, e, delta, CLIP, "theorem").noise_std for e in epsilons
    }
    grid = [(e, s, r) for e in epsilons for s in steps for r in range(repeats)]
    batch = silo_sgd.Hyperparams(
        step_size=jnp.asarray([s for _, s, _ in grid], jnp.float32),
        clip_norm=jnp.full(len(grid), CLIP, jnp.float32),
        radius=jnp.full(len(grid), RADIUS, jnp.float32),
        noise_std=jnp.asarray([[noise[e]] * N for e, _, _ in grid], jnp.float32),
        ridge=jnp.zeros(len(grid), jnp.float32),
    )
    keys = jax.vmap(jax.random.key)(jnp.asarray([r for _, _, r in grid]))
    sweep = jax.jit(
        jax.vmap(lambda hp, key: run_rounds(algorithm, task.train, hp, key, R, plan)[0].w_average)
    )
    start = time.perf_counter()
    sweep_compiled = sweep.lower(batch, keys).compile()
    sweep_compile = time.perf_counter() - start
    start = time.perf_counter()
    results = jax.block_until_ready(sweep_compiled(batch, keys))
    sweep_run = time.perf_counter() - start
    rows |= {
        "sweep_runs": len(grid),
        "sweep_compile_seconds": sweep_compile,
        "sweep_run_seconds": sweep_run,
        "sweep_total_seconds": sweep_compile + sweep_run,
        "sweep_finite": bool(np.all(np.isfinite(np.asarray(results)))),
    }
    print(
        f"sweep of {len(grid)} runs ({len(epsilons)} eps x {len(steps)} steps x {repeats} repeats) "
        f"in one program: compile {sweep_compile:.2f} s + run {sweep_run:.2f} s "
        f"= {sweep_compile + sweep_run:.2f} s"
    )
    if args.json:
        payload = {"benchmark": "silo_sgd", "workload": dict(silos=N, records=n, dim=d, batch=K,
                   rounds=R, loss="logistic"), "rows": [rows], "versions": versions()}  # fmt: skip
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
