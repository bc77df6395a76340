"""Per-client state: a round that reads and writes every cohort member's state against the same
round without state, and its cost as the population grows (it should follow the cohort).

    python bench/client_state.py [--workload gradient|local-epoch] [--populations 1e4,1e5,1e6]
                                 [--cohort 1000] [--dim D] [--rounds 20] [--repeats 7]
                                 [--client-state device,host,disk] [--table-dir DIR]
                                 [--json PATH]

Workloads (a uniform cohort of ``--cohort`` clients per round in both):

- ``gradient`` (default): procedural linear-regression clients (``SyntheticLinear``, d = 100),
  each sending its least-squares gradient clipped to norm 1; the server steps on the sum. With
  state (SCAFFOLD-like), each client also keeps a control variate ``c_i: f32[d]`` in the engine's
  table: it sends ``g - c_i + c`` (clipped) and keeps ``g`` as its new ``c_i``; the server keeps
  ``c`` as the running mean of what was sent. The clients do almost nothing, so this lays the
  state's own cost bare: on a CPU, gathering and scattering a cohort's rows of a table of
  10^6 rows is bound by memory latency (random rows of a 381 MB table), about 1.6 ms for 1,000
  rows read and written against 0.05 ms at 10^4 rows, whatever the ids' order.
- ``local-epoch``: a round whose clients train, DP-FedAvg's default task without the noise:
  Synthetic(1, 1) clients of 20 records generated from their ids (d = 60, 10 classes), one local
  epoch of SGD (2 minibatches of 10) of multinomial logistic regression (610 parameters); with
  state, SCAFFOLD's: the steps corrected by ``c - c_i`` and the new ``c_i`` (610 floats) kept.

Where the table lives (``--client-state``, a comma-separated list: a ``yes`` row per place):
``device`` (default) the engine's device table; ``host`` a :class:`~jfed.engine.HostTable` in host
memory; ``disk`` one in ``.npy`` files in a fresh folder under ``--table-dir`` (default: the
system's temporary folder), deleted when the benchmark ends. A run flushes its files when it
ends, so a row's ``round_ms`` includes writing its pages to the disk (a 4 KiB page per row written
when rows are smaller than a page, as at d = 100). Off the device, the cohort's rows
cross between host and device through callbacks inside the compiled rounds (see
:mod:`jfed.engine.client_state`); ``peak_mb`` then counts no table. On a CPU a table in page
cache costs memory copies, not disk reads: a table larger than the host's memory reads what the
page cache lacks from the disk, at the disk's bandwidth.

Timing: a program of R rounds also creates the table (``n x d`` zeros), a cost paid once per
run; so each row times programs of R and 2R rounds and reports ``(t(2R) - t(R)) / R``, the cost
of one round alone (medians over ``--repeats``, the rows taking turns so that they share the
machine's load: bench/_common.times_in_turns). ``x_stateless`` is a row's round time over the
stateless round's at the same n (target <= 1.3 at n = 10^6, cohort 1,000); ``x_smallest_n``
over the same kind's at the smallest n (flat: O(cohort)). ``peak_mb`` is XLA's memory analysis
of the 2R-round program (arguments + outputs + temporaries - aliased), ``table_mb`` the table's
size: a peak of about one table plus O(cohort) shows the scatter is in place.

Timings are not committed (the machine is shared); run it to see them. JSON (default
``bench/results/client_state.json``): ``rows`` of ``{n, state, client_state, cohort, dim,
round_ms, round_ms_runs, x_stateless, x_smallest_n, peak_mb, table_mb}``, with ``uptime``
before and after, ``device`` and ``versions``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from dataclasses import dataclass, replace

import jax
import jax.numpy as jnp
from _common import device_name, parse_args, times_in_turns, uptime, write_json

from jfed.data import SyntheticFederated, SyntheticLinear
from jfed.engine import ExecutionPlan, HostTable, Uniform, run_rounds
from jfed.report import versions

STEP = 0.1


def _clipped(gradient: jax.Array) -> jax.Array:
    return gradient * jnp.minimum(1.0, 1.0 / jnp.maximum(jnp.linalg.norm(gradient), 1e-12))


def gradient(theta: jax.Array, record) -> jax.Array:
    x, y = record
    return (x @ theta - y) * x


@dataclass(frozen=True)
class Stateless:
    """SGD on the cohort's summed clipped gradients."""

    cohort: int
    dim: int

    def init(self, hyper, key):
        return {"theta": jnp.zeros(self.dim), "control": jnp.zeros(self.dim)}

    def client(self, broadcast, record, key):
        theta, _ = broadcast
        return _clipped(gradient(theta, record))

    def round(self, state, hyper, key, clients):
        cohort = clients.sample(Uniform(self.cohort))
        total = cohort.sum(self.client, (state["theta"], state["control"]))
        return {"theta": state["theta"] - STEP * total / self.cohort,
                "control": state["control"]}, cohort.info.size  # fmt: skip


@dataclass(frozen=True)
class WithState(Stateless):
    """The same round, each member reading and rewriting its control variate."""

    def client_state(self, hyper, key):
        return jnp.zeros(self.dim)

    def stateful_client(self, broadcast, record, key, control_i):
        theta, control = broadcast
        g = gradient(theta, record)
        return _clipped(g - control_i + control), g

    def round(self, state, hyper, key, clients):
        cohort = clients.sample(Uniform(self.cohort))
        broadcast = (state["theta"], state["control"])
        total = cohort.sum(self.stateful_client, broadcast, client_state=True)
        mean = total / self.cohort
        return {"theta": state["theta"] - STEP * mean,
                "control": 0.9 * state["control"] + 0.1 * mean}, cohort.info.size  # fmt: skip


RECORDS, BATCH, LOCAL_LEARNING_RATE = 20, 10, 0.1


@dataclass(frozen=True)
class LocalEpoch:
    """A round whose clients train: each cohort member runs one local epoch of minibatch SGD
    (``RECORDS / BATCH`` steps) of multinomial logistic regression from the server model on its
    Synthetic(1, 1) records (generated from its id), and sends its model change clipped to norm 1;
    the server steps on the mean (DP-FedAvg's default task and model without the noise:
    ``(dim + 1) classes`` parameters)."""

    cohort: int
    dim: int
    classes: int = 10

    @property
    def size(self) -> int:
        return (self.dim + 1) * self.classes

    def init(self, hyper, key):
        return {"theta": jnp.zeros(self.size), "control": jnp.zeros(self.size)}

    def _loss(self, theta: jax.Array, X: jax.Array, y: jax.Array, used: jax.Array) -> jax.Array:
        weights, bias = (
            theta[: -self.classes].reshape(self.dim, self.classes),
            theta[-self.classes :],
        )
        logits = X @ weights + bias
        labels = jax.nn.one_hot(y.astype(jnp.int32), self.classes)
        losses = -jnp.sum(labels * jax.nn.log_softmax(logits), axis=-1)
        return jnp.sum(losses * used) / jnp.maximum(jnp.sum(used), 1.0)

    def trained(self, theta: jax.Array, record, correction: jax.Array) -> jax.Array:
        """The model after the local epoch, each step's gradient plus ``correction``."""
        used = (jnp.arange(record.features.shape[0]) < record.count).astype(jnp.float32)
        model = theta
        for start in range(0, RECORDS, BATCH):  # static: RECORDS / BATCH steps
            rows = slice(start, start + BATCH)
            g = jax.grad(self._loss)(model, record.features[rows], record.targets[rows], used[rows])
            model = model - LOCAL_LEARNING_RATE * (g + correction)
        return model

    def client(self, broadcast, record, key):
        theta, _ = broadcast
        return _clipped(self.trained(theta, record, 0.0) - theta)

    def round(self, state, hyper, key, clients):
        cohort = clients.sample(Uniform(self.cohort))
        total = cohort.sum(self.client, (state["theta"], state["control"]))
        return {"theta": state["theta"] + total / self.cohort,
                "control": state["control"]}, cohort.info.size  # fmt: skip


@dataclass(frozen=True)
class LocalEpochWithState(LocalEpoch):
    """The same round as SCAFFOLD runs it: each member's steps corrected by ``c - c_i`` (``c_i``
    its stored control variate, ``(dim + 1) classes`` floats), and its new ``c_i`` kept."""

    def client_state(self, hyper, key):
        return jnp.zeros(self.size)

    def stateful_client(self, broadcast, record, key, control_i):
        theta, control = broadcast
        model = self.trained(theta, record, control - control_i)
        steps = RECORDS // BATCH
        new_control = control_i - control + (theta - model) / (steps * LOCAL_LEARNING_RATE)
        return _clipped(model - theta), new_control

    def round(self, state, hyper, key, clients):
        cohort = clients.sample(Uniform(self.cohort))
        broadcast = (state["theta"], state["control"])
        total = cohort.sum(self.stateful_client, broadcast, client_state=True)
        mean = total / self.cohort
        return {"theta": state["theta"] + mean,
                "control": 0.9 * state["control"] + 0.1 * mean}, cohort.info.size  # fmt: skip


WORKLOADS = {"gradient": (Stateless, WithState), "local-epoch": (LocalEpoch, LocalEpochWithState)}
"""``--workload``: the round without and with per-client state."""


def population_of(workload: str, n: int, dim: int):
    """The clients: procedural linear-regression records, or Synthetic(1, 1) clients of
    ``RECORDS`` records each (generated from their ids every round)."""
    if workload == "gradient":
        return SyntheticLinear.create(jax.random.key(0), n, dim)
    return SyntheticFederated.create(jax.random.key(0), n, 1.0, 1.0, n_max=RECORDS, dim=dim,
                                     count_log_mean=10.0, count_log_std=0.0)  # fmt: skip


def compiled(algorithm, population, rounds: int, plan: ExecutionPlan):
    program = jax.jit(
        lambda population, key: run_rounds(algorithm, population, None, key, rounds, plan)
    )
    return program.lower(population, jax.random.key(0)).compile()


PLACES = ("device", "host", "disk")


def store_of(place: str, folder: str):
    """A plan's ``client_state`` for ``place``: ``None`` on the device, a :class:`HostTable` in
    host memory, or one in ``folder``."""
    if place not in PLACES:
        raise SystemExit(f"expected --client-state among {PLACES}, got {place!r}")
    return None if place == "device" else HostTable(folder if place == "disk" else None)


def peak_mb(executable) -> float:
    memory = executable.memory_analysis()
    if memory is None:
        return float("nan")
    total = (memory.argument_size_in_bytes + memory.output_size_in_bytes
             + memory.temp_size_in_bytes - memory.alias_size_in_bytes)  # fmt: skip
    return total / 2**20


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--populations", default="1e4,1e5,1e6")
    parser.add_argument("--cohort", type=int, default=1000)
    parser.add_argument(
        "--dim",
        type=int,
        default=None,
        help="features per record (default 100 for gradient, 60 for local-epoch)",
    )
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--workload",
        default="gradient",
        choices=sorted(WORKLOADS),
        help="gradient: one clipped gradient of one record per client (the "
        "state's cost laid bare); local-epoch: a local epoch of a 610-parameter "
        "model on 20 records per client (a round whose clients train)",
    )
    parser.add_argument(
        "--client-state",
        default="device",
        help="where the table lives, a comma-separated list of device, host, disk (one row "
        "with state per place)",
    )
    parser.add_argument(
        "--table-dir",
        default=None,
        help="folder under which a disk table's own folder is made (and deleted at the end; "
        "default: the system's temporary folder)",
    )
    parser.add_argument("--json", metavar="PATH", default="bench/results/client_state.json")
    args = parse_args(
        parser,
        argv,
        __file__,
        populations="1e3",
        cohort=10,
        rounds=2,
        repeats=1,
        client_state="device,disk",
    )
    if args.dim is None:
        args.dim = 100 if args.workload == "gradient" else 60
    populations = [int(float(s)) for s in args.populations.split(",")]
    folder = tempfile.mkdtemp(prefix="jfed_client_state_", dir=args.table_dir)
    try:
        measure(args, populations, args.client_state.split(","), folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def measure(args: argparse.Namespace, populations: list[int], places: list[str], folder: str):
    """Time every row (the stateless round, and the round with state in each place), print the
    table and write the JSON."""
    load_before = uptime()
    print(f"per-client state, cohort {args.cohort}, d = {args.dim}, {device_name()}; "
          f"{load_before}")  # fmt: skip
    kinds = [("no", None)] + [("yes", place) for place in places]
    runs, programs = {}, {}
    key = jax.random.key(1)
    for n in populations:
        population = population_of(args.workload, n, args.dim)
        for state, place in kinds:
            kind = WORKLOADS[args.workload][state == "yes"]
            plan = ExecutionPlan.for_backend().fitted(n)
            if place is not None:  # a table of its own for each population
                table = store_of(place, os.path.join(folder, f"{n}"))
                plan = replace(plan, client_state=table)
            algorithm = kind(args.cohort, args.dim)
            short = compiled(algorithm, population, args.rounds, plan)
            long = compiled(algorithm, population, 2 * args.rounds, plan)
            programs[(n, state, place)] = long
            runs[(n, state, place, 1)] = lambda p=population, c=short: c(p, key)
            runs[(n, state, place, 2)] = lambda p=population, c=long: c(p, key)
    times = times_in_turns({str(k): v for k, v in runs.items()}, args.repeats)
    rows = []
    algorithm = WORKLOADS[args.workload][1](args.cohort, args.dim)
    state_size = algorithm.size if hasattr(algorithm, "size") else args.dim
    for n in populations:
        for state, place in kinds:
            short, long = times[str((n, state, place, 1))], times[str((n, state, place, 2))]
            per_round = [(b - a) / args.rounds for a, b in zip(short, long, strict=True)]
            rows.append({
                "workload": args.workload, "n": n, "state": state, "client_state": place,
                "cohort": args.cohort, "dim": args.dim,
                "round_ms": 1e3 * statistics.median(per_round),
                "round_ms_runs": [1e3 * t for t in per_round],
                "peak_mb": peak_mb(programs[(n, state, place)]),
                "table_mb": 4 * n * state_size / 2**20 if state == "yes" else 0.0,
            })  # fmt: skip
    for row in rows:
        stateless = next(r for r in rows if r["n"] == row["n"] and r["state"] == "no")
        smallest = next(r for r in rows if r["n"] == populations[0] and r["state"] == row["state"]
                        and r["client_state"] == row["client_state"])  # fmt: skip
        row["x_stateless"] = row["round_ms"] / stateless["round_ms"]
        row["x_smallest_n"] = row["round_ms"] / smallest["round_ms"]
    print(f"{'n':>10} {'state':>5} {'place':>6} {'round ms':>9} {'x stateless':>11}"
          f" {'x n_min':>8} {'peak MB':>9} {'table MB':>9}")  # fmt: skip
    for row in rows:
        print(f"{row['n']:>10,} {row['state']:>5} {row['client_state'] or '':>6}"
              f" {row['round_ms']:>9.3f} {row['x_stateless']:>11.2f} {row['x_smallest_n']:>8.2f}"
              f" {row['peak_mb']:>9.1f} {row['table_mb']:>9.1f}")  # fmt: skip
    load_after = uptime()
    print(f"after: {load_after}")
    if args.json:
        write_json(args.json, {
            "benchmark": "client_state", "rounds": [args.rounds, 2 * args.rounds],
            "repeats": args.repeats, "plan": ExecutionPlan.for_backend().describe(),
            "rows": rows, "uptime": {"before": load_before, "after": load_after},
            "device": device_name(), "versions": versions(),
        })  # fmt: skip


if __name__ == "__main__":
    main()
