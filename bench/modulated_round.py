"""Time one modulated round: jfed's jitted engine vs a plain vectorised numpy round.

Both do the same work per round: generate n linear-regression clients (d = 10), clip, encode with
one modulation direction and Gaussian noise, reduce to ``sum z z^T`` and ``sum z y``, debias, and
solve the one-shot ridge system. Both run in float32, in this process, side by side.

    python bench/modulated_round.py [--sizes 1e4,1e5,1e6,1e7] [--json PATH]

Prints a table (client-updates/s, the numpy/jax time ratio, peak memory) and writes JSON with a
list ``rows`` of ``{n, jax_seconds, numpy_seconds, ratio, peak_mb, numpy_peak_mb,
compile_seconds}``. ``peak_mb`` is the compiled program's own peak (XLA's memory analysis:
arguments + outputs + temporaries); ``numpy_peak_mb`` is tracemalloc's peak for the numpy round.
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np

from jfed.algorithms import modulated
from jfed.data import SyntheticLinear
from jfed.engine import ExecutionPlan, run_rounds
from jfed.report import versions

DIM = 10
PARAMS = dict(alpha=1.0, beta=0.5, omega=1.0, noise_std=3.0, clip_norm=3.0, ridge=1.0)


def numpy_round(n: int, theta_star: np.ndarray, seed: int) -> np.ndarray:
    """The same round, vectorised over all n clients with numpy (float32)."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    X = rng.standard_normal((n, DIM), dtype=f32)
    y = X @ theta_star + f32(0.5) * rng.standard_normal(n, dtype=f32)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    X *= np.minimum(f32(1.0), f32(PARAMS["clip_norm"]) / np.maximum(norms, f32(1e-30)))
    V = np.linalg.qr(rng.standard_normal((DIM, 1)))[0].astype(f32)
    phases = rng.uniform(0, 2 * np.pi, size=(n, 1)).astype(f32)
    Z = f32(PARAMS["alpha"]) * X
    Z += f32(PARAMS["beta"]) * np.cos(f32(PARAMS["omega"]) * (X @ V) + phases) @ V.T
    Z += f32(PARAMS["noise_std"]) * rng.standard_normal((n, DIM), dtype=f32)
    S_hat = (
        Z.T @ Z / n - PARAMS["beta"] ** 2 / 2 * (V @ V.T) - PARAMS["noise_std"] ** 2 * np.eye(DIM)
    ) / PARAMS["alpha"] ** 2
    b_hat = Z.T @ y / (n * PARAMS["alpha"])
    return np.linalg.solve(S_hat + PARAMS["ridge"] * np.eye(DIM), b_hat)


def _best_of(repeats: int, fn, *args) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return min(times)


def bench(sizes: list[int], repeats: int, plan: ExecutionPlan) -> list[dict]:
    algorithm = modulated.OneShot(DIM)
    hp = modulated.hyperparams(**PARAMS)
    rows = []
    for n in sizes:
        population = SyntheticLinear.create(jax.random.key(0), n, DIM)
        fitted = plan.fitted(n)
        program = jax.jit(
            lambda population, hp, key, fitted=fitted: run_rounds(
                algorithm, population, hp, key, 1, fitted
            )
        )
        key = jax.random.key(1)
        start = time.perf_counter()
        compiled = program.lower(population, hp, key).compile()
        compile_seconds = time.perf_counter() - start
        memory = compiled.memory_analysis()
        peak_bytes = (
            memory.argument_size_in_bytes
            + memory.output_size_in_bytes
            + memory.temp_size_in_bytes
            - memory.alias_size_in_bytes
        )
        jax.block_until_ready(compiled(population, hp, key))
        jax_seconds = _best_of(repeats, compiled, population, hp, key)

        theta_star = np.asarray(population.theta_star, np.float32)
        tracemalloc.start()
        numpy_round(n, theta_star, 0)
        numpy_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        numpy_seconds = _best_of(max(1, repeats - 1), numpy_round, n, theta_star, 0)
        rows.append(
            {
                "n": n,
                "jax_seconds": jax_seconds,
                "numpy_seconds": numpy_seconds,
                "ratio": numpy_seconds / jax_seconds,
                "jax_clients_per_second": n / jax_seconds,
                "numpy_clients_per_second": n / numpy_seconds,
                "peak_mb": peak_bytes / 2**20,
                "numpy_peak_mb": numpy_peak / 2**20,
                "compile_seconds": compile_seconds,
            }
        )
        print_row(rows[-1])
    return rows


HEADER = (
    f"{'n':>10} {'jax s':>9} {'numpy s':>9} {'numpy/jax':>9} {'jax upd/s':>11} "
    f"{'numpy upd/s':>11} {'jax peak MB':>11} {'np peak MB':>10} {'compile s':>9}"
)


def print_row(row: dict) -> None:
    print(
        f"{row['n']:>10,} {row['jax_seconds']:>9.4f} {row['numpy_seconds']:>9.4f} "
        f"{row['ratio']:>9.2f} {row['jax_clients_per_second']:>11.3g} "
        f"{row['numpy_clients_per_second']:>11.3g} {row['peak_mb']:>11.2f} "
        f"{row['numpy_peak_mb']:>10.1f} {row['compile_seconds']:>9.2f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e4,1e5,1e6,1e7", help="comma-separated n values")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats (best is kept)")
    parser.add_argument("--chunk-size", type=int, default=ExecutionPlan().chunk_size)
    parser.add_argument("--block-size", type=int, default=ExecutionPlan().block_size)
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    args = parser.parse_args()
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    plan = ExecutionPlan(block_size=args.block_size, chunk_size=args.chunk_size)
    print(f"one modulated round, d={DIM}, backend={jax.default_backend()}, plan={plan}")
    print(HEADER)
    rows = bench(sizes, args.repeats, plan)
    if args.json:
        payload = {
            "benchmark": "modulated_round",
            "dim": DIM,
            "params": PARAMS,
            "plan": {"block_size": plan.block_size, "chunk_size": plan.chunk_size},
            "devices": [str(d) for d in jax.devices()],
            "versions": versions(),
            "rows": rows,
        }
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    jnp.zeros(())  # initialise the backend before timing
    main()
