"""Rounds on a cohort: time and memory follow the cohort, not the population.

    python bench/cohort.py [--populations 1e6,1e8] [--cohorts 1e2,1e3,1e4] [--json PATH]

Each row is one program of ``--rounds`` rounds of SGD on procedural linear-regression clients
(``SyntheticLinear``, d = 10): every round draws a cohort and each cohort client sends its
least-squares gradient clipped to norm 1; the server steps on the sum. Kinds: ``uniform``
(exactly k clients) and ``poisson`` (rate k / n, run at the capacity of
:func:`jfed.engine.cohort.poisson_capacity`). Timings are the median of ``--repeats`` runs after a
warm-up that compiles, divided by the rounds; the programs of the populations for one cohort run
in turn, repeat by repeat, so that they see the same load of a shared machine. ``draw_ms`` times
the cohort draw alone (``draw_cohort``, one call, dispatch included).

JSON (default ``bench/results/cohort.json``): ``rows`` of ``{n, kind, cohort, capacity,
round_ms, round_ms_min, draw_ms, clients_per_second, peak_mb, rss_mb, x_smallest_n}``, where
``peak_mb`` is the compiled program's own peak (XLA's memory analysis: arguments + outputs +
temporaries - aliased), ``rss_mb`` the process's peak resident memory so far (monotone over the
rows), and ``x_smallest_n`` the median round time over that of the same cohort at the smallest
population. Also ``uptime``
(the machine's load before and after: the CPU is shared), ``device`` and ``versions``.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from _common import parse_args, uptime, write_json

from jfed.data import SyntheticLinear
from jfed.engine import ExecutionPlan, Poisson, Uniform, draw_cohort, run_rounds
from jfed.engine.cohort import cohort_capacity
from jfed.report import versions

DIM = 10
STEP = 0.1


def clipped_gradient(theta: jax.Array, record, key: jax.Array) -> jax.Array:
    """One client's least-squares gradient ``(x^T theta - y) x``, clipped to norm 1."""
    del key
    x, y = record
    gradient = (x @ theta - y) * x
    return gradient * jnp.minimum(1.0, 1.0 / jnp.maximum(jnp.linalg.norm(gradient), 1e-12))


@dataclass(frozen=True)
class CohortSgd:
    """SGD on the cohort's summed clipped gradients (divided by the expected cohort size)."""

    cohort: Any
    expected_size: float

    def init(self, hyperparams, key):
        return jnp.zeros(DIM)

    def round(self, theta, hyperparams, key, clients):
        cohort = clients.sample(self.cohort)
        total = cohort.sum(clipped_gradient, theta)
        return theta - STEP * total / self.expected_size, cohort.info.size


def seconds(function, *args) -> float:
    """Wall time of one call, waited for."""
    tic = time.perf_counter()
    jax.block_until_ready(function(*args))
    return time.perf_counter() - tic


def peak_mb(compiled) -> float:
    memory = compiled.memory_analysis()
    total = (memory.argument_size_in_bytes + memory.output_size_in_bytes
             + memory.temp_size_in_bytes - memory.alias_size_in_bytes)  # fmt: skip
    return total / 2**20


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10  # KiB on Linux


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--populations", default="1e6,1e8")
    parser.add_argument("--cohorts", default="1e2,1e3,1e4")
    parser.add_argument("--kinds", default="uniform,poisson")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--json", metavar="PATH", default="bench/results/cohort.json")
    args = parse_args(
        parser,
        argv,
        __file__,
        populations="1e3,1e4",
        cohorts="10",
        kinds="uniform,poisson",
        rounds=2,
        repeats=1,
    )
    populations = [int(float(s)) for s in args.populations.split(",")]
    cohorts = [int(float(s)) for s in args.cohorts.split(",")]
    kinds = args.kinds.split(",")
    load_before = uptime()
    print(f"rounds on a cohort, d = {DIM}, {jax.devices()[0].platform}; {load_before}")
    print(f"{'n':>12} {'kind':>8} {'cohort':>7} {'capacity':>8} {'round ms':>9} {'draw ms':>8}"
          f" {'clients/s':>10} {'peak MB':>8} {'RSS MB':>7} {'x n_min':>8}")  # fmt: skip
    rows = []
    key = jax.random.key(1)
    plan = ExecutionPlan.for_backend()
    pops = {n: SyntheticLinear.create(jax.random.key(0), n, DIM) for n in populations}
    for kind in kinds:
        for k in cohorts:
            # the populations' programs for one cohort are timed in turn, repeat by repeat, so
            # that they share the (shared, varying) load of the machine
            timed = {}
            for n, population in pops.items():
                cohort = Uniform(k) if kind == "uniform" else Poisson(k / n)
                algorithm, fitted = CohortSgd(cohort, float(k)), plan.fitted(n)
                program = jax.jit(
                    lambda pop, key, algorithm=algorithm, fitted=fitted: run_rounds(
                        algorithm, pop, None, key, args.rounds, fitted
                    )
                )
                compiled = program.lower(population, key).compile()
                draw = jax.jit(lambda key, cohort=cohort, n=n: draw_cohort(cohort, n, key))
                timed[n] = (cohort, compiled, draw, [], [])
                jax.block_until_ready(compiled(population, key))
                jax.block_until_ready(draw(key))
            for _ in range(args.repeats):
                for n, (_, compiled, draw, run_times, draw_times) in timed.items():
                    run_times.append(seconds(compiled, pops[n], key) / args.rounds)
                    draw_times.append(seconds(draw, key))
            smallest = statistics.median(timed[min(timed)][3])
            for n, (cohort, compiled, _, run_times, draw_times) in timed.items():
                capacity = cohort_capacity(cohort, n)
                median = statistics.median(run_times)
                row = {
                    "n": n, "kind": kind, "cohort": k, "capacity": capacity,
                    "round_ms": 1e3 * median, "round_ms_min": 1e3 * min(run_times),
                    "draw_ms": 1e3 * statistics.median(draw_times),
                    "clients_per_second": capacity / median, "peak_mb": peak_mb(compiled),
                    "rss_mb": rss_mb(), "x_smallest_n": median / smallest,
                }  # fmt: skip
                rows.append(row)
                print(f"{n:>12,} {kind:>8} {k:>7,} {capacity:>8,} {row['round_ms']:>9.3f}"
                      f" {row['draw_ms']:>8.3f} {row['clients_per_second']:>10.3g}"
                      f" {row['peak_mb']:>8.2f} {row['rss_mb']:>7.0f}"
                      f" {row['x_smallest_n']:>8.2f}", flush=True)  # fmt: skip
    load_after = uptime()
    print(f"after: {load_after}")
    if args.json:
        payload = {
            "benchmark": "cohort", "dim": DIM, "rounds_per_program": args.rounds,
            "repeats": args.repeats, "plan": ExecutionPlan.for_backend().describe(),
            "rows": rows, "uptime": {"before": load_before, "after": load_after},
            "device": str(jax.devices()[0]), "versions": versions(),
        }  # fmt: skip
        write_json(args.json, payload)


if __name__ == "__main__":
    main()
