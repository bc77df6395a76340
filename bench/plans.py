"""The default plan against other chunk widths: one jfed round of ``bench/engine.py``'s workloads
under each plan, side by side in one process.

    python bench/plans.py --json bench/results/plans_gpu.json --sizes 1e8 \\
                          [--chunks 16384,65536,262144,1048576,4194304] [--with-conditionals]

Rows (best of ``--repeats``, after a warm-up that compiles; the rows of one n run in turns):
``default`` is :meth:`jfed.ExecutionPlan.for_backend` (fitted to n, as ``run_rounds`` users get
it); every other row is ``ExecutionPlan(block_size=4 * chunk, chunk_size=chunk)`` fitted to n.
A plan changes float rounding only (checked: every row's round within 1e-3 of the default's, in
the relative max norm; float32 sums of 10^8 clients in other orders differed by 3e-4 on a GPU).

``--with-conditionals`` adds the row ``default, CPU branches``: the default plan with the
branches the CPU runs (``lax.platform_dependent``'s ``cpu``: the draws of a chunk held in memory
by a conditional, the private normals' tails and the masking of full chunks behind
conditionals) on this backend, to show what those conditionals would cost there (on a GPU each
waits on the host for its predicate). The same numbers.

JSON ``rows``: ``{workload, n, plan, chunk_size, block_size, seconds, updates_per_second,
peak_mb}``; also ``repeats``, ``uptime`` before and after, ``device``, ``versions``.
"""

from __future__ import annotations

import argparse
from functools import partial

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
from engine import DIM, PARAMS, peak_mb, w_hyperparams, w_records

from jfed.algorithms import dpsgd, modulated
from jfed.data import ArrayClients, SyntheticLinear
from jfed.engine import ExecutionPlan, run_rounds
from jfed.report import versions

CPU_BRANCHES = "default, CPU branches"


def _cpu_branch(*args, default=None, cpu=None, **per_platform):
    """``lax.platform_dependent`` that always lowers the ``cpu`` branch."""
    del default, per_platform
    return cpu(*args)


def workload(name: str, n: int):
    """``(algorithm, population, hp)`` of ``bench/engine.py``'s workload ``name`` at ``n``."""
    if name == "modulated":
        population = SyntheticLinear.create(jax.random.key(0), n, DIM)
        return modulated.OneShot(DIM), population, modulated.hyperparams(**PARAMS)
    X, y = w_records(n)
    return dpsgd.FedAvg(DIM), ArrayClients(jnp.asarray(X), jnp.asarray(y)), w_hyperparams()


def compiled_round(algorithm, population, hp, key, plan: ExecutionPlan):
    def round_(population, hp, key):
        return run_rounds(algorithm, population, hp, key, 1, plan)[0].theta

    return jax.jit(round_).lower(population, hp, key).compile()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e6")
    parser.add_argument("--chunks", default="1024,4096,16384,65536,262144")
    parser.add_argument("--workloads", default="modulated,W")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--with-conditionals", action="store_true")
    parser.add_argument("--json", metavar="PATH")
    args = parse_args(parser, argv, __file__, sizes="1e3", chunks="64,256", repeats=1)
    key = jax.random.key(1)
    load_before = uptime()
    rows = []
    print(f"{jax.devices()[0]}; default plan: {ExecutionPlan.for_backend().describe()}")
    print(f"{'workload':>9} {'n':>11} {'plan':>22} {'chunk':>9} {'block':>9} {'seconds':>9} "
          f"{'updates/s':>10} {'peak MB':>8}")  # fmt: skip
    for name in [w.strip() for w in args.workloads.split(",") if w.strip()]:
        for n in [int(float(s)) for s in args.sizes.split(",")]:
            algorithm, population, hp = workload(name, n)
            plans = {"default": ExecutionPlan.for_backend().fitted(n)}
            for chunk in [int(c) for c in args.chunks.split(",")]:
                plan = ExecutionPlan(block_size=4 * chunk, chunk_size=chunk).fitted(n)
                if plan not in plans.values():
                    plans[f"chunks of {chunk:,}"] = plan
            programs = {
                label: compiled_round(algorithm, population, hp, key, plan)
                for label, plan in plans.items()
            }
            if args.with_conditionals:
                patch = jax.lax.platform_dependent
                jax.lax.platform_dependent = _cpu_branch
                try:
                    jax.clear_caches()
                    programs[CPU_BRANCHES] = compiled_round(
                        algorithm, population, hp, key, plans["default"]
                    )
                finally:
                    jax.lax.platform_dependent = patch
                    jax.clear_caches()
                plans[CPU_BRANCHES] = plans["default"]
            runs = {label: partial(p, population, hp, key) for label, p in programs.items()}
            reference = np.asarray(runs["default"]())
            for label, run in runs.items():
                theta = np.asarray(run())
                gap = float(np.abs(theta - reference).max() / np.abs(reference).max())
                assert gap < 1e-3, f"{name} n={n} {label}: {gap:.1e} from the default plan"
            seconds = best_in_turns(runs, args.repeats)
            for label, plan in plans.items():
                row = {"workload": name, "n": n, "plan": label, "chunk_size": plan.chunk_size,
                       "block_size": plan.block_size, "seconds": seconds[label],
                       "updates_per_second": n / seconds[label],
                       "peak_mb": peak_mb(programs[label])}  # fmt: skip
                rows.append(row)
                print(f"{name:>9} {n:>11,} {label:>22} {plan.chunk_size:>9,} "
                      f"{plan.block_size:>9,} {row['seconds']:>9.4f} "
                      f"{row['updates_per_second']:>10.3g} {row['peak_mb']:>8.1f}",
                      flush=True)  # fmt: skip
    load_after = uptime()
    print(f"load before: {load_before}\nload after:  {load_after}")
    if args.json:
        write_json(args.json, {"benchmark": "plans", "dim": DIM, "repeats": args.repeats,
                               "rows": rows, "uptime": {"before": load_before,
                                                        "after": load_after},
                               "device": device_name(),
                               "versions": versions()})  # fmt: skip


if __name__ == "__main__":
    main()
