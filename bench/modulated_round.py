"""Time one modulated round: jfed's jitted engine vs a plain vectorised numpy round, and the exact
option (``--noise discrete``) beside jfed's float round.

Both do the same work per round: generate n linear-regression clients (d = 10), clip, encode with
one modulation direction and Gaussian noise, reduce to ``sum z z^T`` and ``sum z y``, debias, and
solve the one-shot ridge system. Both run in float32, in this process, side by side. The
``discrete`` rows run the same round with every message released exactly on the integer grid
(:class:`jfed.algorithms.modulated.ModulatedGridMap`: the message rounded with a triangular
dither under an exact integer norm bound, exact discrete Gaussian noise sampled in integer
arithmetic, scaled back), at the noise multiplier whose noise in value units is the float rows'
``noise_std``; its grid is the finest that holds that noise.

    python bench/modulated_round.py [--sizes 1e4,1e5,1e6,1e7] [--discrete-sizes 1e4,1e5,1e6]
                                    [--repeats 3] [--json PATH]

Prints a table (client-updates/s, the numpy/jax time ratio, ``x_float``, peak memory) and writes
JSON with a list ``rows`` of ``{n, noise, jax_seconds, x_float, numpy_seconds, ratio, peak_mb,
numpy_peak_mb, compile_seconds, noise_multiplier, grid_norm}`` (the numpy fields on the float
rows only), the ``uptime`` before and after, ``device`` and ``versions``. The jax rows of one n
take turns (:func:`_common.times_in_turns`, best of ``--repeats``), so both noises see the same
load; ``x_float`` is a row's time over the float row's at the same n. ``peak_mb`` is the
compiled program's own peak (XLA's memory analysis: arguments + outputs + temporaries);
``numpy_peak_mb`` is tracemalloc's peak for the numpy round.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

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

from jfed.algorithms import modulated
from jfed.data import SyntheticLinear
from jfed.engine import ExecutionPlan, run_rounds
from jfed.privacy.local_discrete import LocalGridGaussian, grid_norm_for
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


NOISES = ("float", "discrete")


def _best_of(repeats: int, fn, *args) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return min(times)


def exact_setting() -> tuple[modulated.Hyperparams, int]:
    """The discrete rows' hyper-parameters and grid: the multiplier z whose discrete Gaussian,
    in value units, has the float rows' ``noise_std`` (``z = noise_std / (2 sqrt(B) R / L)``,
    ``R = alpha C + beta``), on the finest grid that holds it."""
    radius = modulated.message_radius(PARAMS["alpha"], PARAMS["beta"], PARAMS["clip_norm"])
    grid_norm = grid_norm_for(PARAMS["noise_std"] / (2.0 * radius), DIM)
    noise_multiplier = PARAMS["noise_std"] / LocalGridGaussian(DIM, grid_norm).value_sensitivity(
        radius
    )
    exact = dict(PARAMS, noise_std=0.0, noise_multiplier=noise_multiplier)
    return modulated.hyperparams(**exact), grid_norm


def _compiled(algorithm, population, hp, plan: ExecutionPlan, n: int):
    """The round's program compiled, its compile time and its peak memory (bytes)."""
    fitted = plan.fitted(n)
    program = jax.jit(
        lambda population, hp, key: run_rounds(algorithm, population, hp, key, 1, fitted)
    )
    start = time.perf_counter()
    compiled = program.lower(population, hp, jax.random.key(1)).compile()
    compile_seconds = time.perf_counter() - start
    memory = compiled.memory_analysis()
    peak_bytes = (
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        + memory.temp_size_in_bytes
        - memory.alias_size_in_bytes
    )
    return compiled, compile_seconds, peak_bytes


def bench(
    sizes: list[int], discrete_sizes: list[int], repeats: int, plan: ExecutionPlan
) -> list[dict]:
    float_hp = modulated.hyperparams(**PARAMS)
    exact_hp, grid_norm = exact_setting()
    settings = {
        "float": (modulated.OneShot(DIM), float_hp, None),
        "discrete": (modulated.OneShot(DIM, grid_norm=grid_norm), exact_hp, grid_norm),
    }
    key = jax.random.key(1)
    rows = []
    for n in sorted(set(sizes) | set(discrete_sizes)):
        population = SyntheticLinear.create(jax.random.key(0), n, DIM)
        noises = [noise for noise, wanted in (("float", sizes), ("discrete", discrete_sizes))
                  if n in wanted]  # fmt: skip
        programs = {}
        for noise in noises:
            algorithm, hp, _ = settings[noise]
            programs[noise] = (*_compiled(algorithm, population, hp, plan, n), hp)
        runs = {noise: (lambda c=compiled, p=population, hp=hp: c(p, hp, key))
                for noise, (compiled, _, _, hp) in programs.items()}  # fmt: skip
        seconds = best_in_turns(runs, repeats)

        for noise in noises:
            _, compile_seconds, peak_bytes, hp = programs[noise]
            row = {
                "n": n,
                "noise": noise,
                "jax_seconds": seconds[noise],
                "x_float": seconds[noise] / seconds["float"] if "float" in seconds else None,
                "jax_clients_per_second": n / seconds[noise],
                "peak_mb": peak_bytes / 2**20,
                "compile_seconds": compile_seconds,
                "noise_multiplier": None if hp.noise_multiplier is None
                else float(hp.noise_multiplier),
                "grid_norm": settings[noise][2],
            }  # fmt: skip
            if noise == "float":  # the numpy round in calls of its own (module docstring)
                theta_star = np.asarray(population.theta_star, np.float32)
                tracemalloc.start()
                numpy_round(n, theta_star, 0)
                numpy_peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                numpy_seconds = _best_of(max(1, repeats - 1), numpy_round, n, theta_star, 0)
                row |= {
                    "numpy_seconds": numpy_seconds,
                    "ratio": numpy_seconds / seconds[noise],
                    "numpy_clients_per_second": n / numpy_seconds,
                    "numpy_peak_mb": numpy_peak / 2**20,
                }
            rows.append(row)
            print_row(row)
    return rows


HEADER = (
    f"{'n':>10} {'noise':>8} {'jax s':>9} {'x float':>8} {'numpy s':>9} {'numpy/jax':>9} "
    f"{'jax upd/s':>11} {'numpy upd/s':>11} {'jax peak MB':>11} {'np peak MB':>10} "
    f"{'compile s':>9}"
)


def _shown(row: dict, name: str, width: int, form: str) -> str:
    value = row.get(name)
    return f"{'-':>{width}}" if value is None else f"{value:>{width}{form}}"


def print_row(row: dict) -> None:
    print(
        f"{row['n']:>10,} {row['noise']:>8} {row['jax_seconds']:>9.4f} "
        f"{_shown(row, 'x_float', 8, '.2f')} {_shown(row, 'numpy_seconds', 9, '.4f')} "
        f"{_shown(row, 'ratio', 9, '.2f')} {row['jax_clients_per_second']:>11.3g} "
        f"{_shown(row, 'numpy_clients_per_second', 11, '.3g')} {row['peak_mb']:>11.2f} "
        f"{_shown(row, 'numpy_peak_mb', 10, '.1f')} {row['compile_seconds']:>9.2f}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e4,1e5,1e6,1e7", help="comma-separated n values")
    parser.add_argument(
        "--discrete-sizes", default="1e4,1e5,1e6",
        help="n values of the discrete rows (each also gets a float row); '' for none",
    )  # fmt: skip
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats (best is kept)")
    parser.add_argument("--chunk-size", type=int, default=ExecutionPlan().chunk_size)
    parser.add_argument("--block-size", type=int, default=ExecutionPlan().block_size)
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    args = parse_args(parser, argv, __file__, sizes="1e3", discrete_sizes="1e3", repeats=1)
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    discrete_sizes = [int(float(s)) for s in args.discrete_sizes.split(",") if s]
    sizes = sorted(set(sizes) | set(discrete_sizes))  # every discrete row has its float row
    plan = ExecutionPlan(block_size=args.block_size, chunk_size=args.chunk_size)
    load_before = uptime()
    print(f"one modulated round, d={DIM}, backend={jax.default_backend()}, plan={plan}")
    print(HEADER)
    rows = bench(sizes, discrete_sizes, args.repeats, plan)
    load_after = uptime()
    print(f"load before: {load_before}\nload after:  {load_after}")
    if args.json:
        write_json(args.json, {
            "benchmark": "modulated_round",
            "dim": DIM,
            "params": PARAMS,
            "plan": {"block_size": plan.block_size, "chunk_size": plan.chunk_size},
            "devices": [str(d) for d in jax.devices()],
            "device": device_name(),
            "uptime": {"before": load_before, "after": load_after},
            "versions": versions(),
            "rows": rows,
        })  # fmt: skip
        print(f"wrote {args.json}")


if __name__ == "__main__":
    jnp.zeros(())  # initialise the backend before timing
    main()
