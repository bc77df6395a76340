"""The engine against hand-written rounds, two workloads at d = 10, side by side in one process.

    python bench/engine.py --json bench/results/engine_cpu.json [--sizes 1e4,1e5,1e6,1e7]
                           [--workloads modulated,W] [--numpy-max 1e7]

    # on a GPU (engine_gpu.json): the accelerator's sizes, numpy only where it takes seconds
    python bench/engine.py --json bench/results/engine_gpu.json --sizes 1e6,1e7,1e8 \
                           --numpy-max 1e7 --no-one-core

Workloads (``--workloads``, default both):

- ``modulated``: one modulated one-shot round on procedural clients (``SyntheticLinear``: a
  client's record is generated from its id), ``bench/modulated_round.py``'s setting;
- ``W``: one round of one-sample DP-SGD as the peers' frameworks run it, records held in arrays
  (``ArrayClients``; x ~ N(0, I), y = x . w_true + 0.1 N(0, 1), generated once per n): every
  client computes the squared-loss gradient ``(x . w - y) x`` of its record at ``w = 0``, clips it
  to L2 norm ``C = 1`` and adds its own ``N(0, sigma^2 I)``, ``sigma = 1`` (local noise); the
  round's output is the mean of these noisy clipped gradients (f32[10]).

Rows of each workload (best of ``--repeats`` after a warm-up that compiles; the JAX rows run in
turns, one repeat of each at a time, so that a change in the machine's load reaches every row
alike, and the order rotates every turn; the numpy row is timed after them, since a JAX round run
right after it was measured 5-25% slower):

- ``jfed``: ``run_rounds`` with the backend's default plan (blocks, fixed-width chunks, masking of
  padded clients, the generic statistic); for W, :class:`jfed.algorithms.dpsgd.FedAvg` with
  learning rate 1 from ``w = 0`` and a radius that never binds, so its new ``theta`` is minus the
  mean;
- ``hand-written chunked`` (W: ``hand-written chunked, same draws``): the same round written
  directly: one ``lax.scan`` over chunks of the same width, each vmapping the same client function
  over the same per-client keys (``client_key(round key, client id)``), so the same draws and the
  same result (modulated: the gap is printed; W: asserted allclose);
- ``hand-written, counter-addressed``: the chunked round with the message draws of a whole chunk
  made in one hash call, addressed as (client id, word index) with no per-client key
  (:func:`chunk_draws`: computed with the clients along the vectorised axis, the tails only when
  the chunk drew an extreme cell): other draws (a different stream), the same distribution by the
  same transforms (d normals with their extreme cells refined, as
  :func:`jfed._random.private_normals_and_uniforms`, and for modulated one phase); the records
  as ``jfed`` reads them;
- ``materialised``: every client's message at once in plain JAX, with the per-client keys of
  ``jfed`` (memory grows with n);
- ``jfed, sweep of 4 runs (per run)``: the ``jfed`` round vmapped over 4 run keys in one program
  (as :func:`jfed.sweep.run` compiles a sweep), its seconds divided by 4 (its peak MB is the
  whole program's);
- ``jfed, one core``: the ``jfed`` row again in a child process pinned to one core (what the
  second core adds; skipped with ``--no-one-core`` or where the OS cannot pin);
- ``numpy``: the round vectorised over all clients with numpy (its own generator, so other
  draws; modulated: ``bench/modulated_round.py``, which also generates the records; W: from
  host copies of the same record arrays); only up to ``--numpy-max`` clients (default: every
  size).

For W the rows are checked at every n: the same-draws and the materialised rows equal ``jfed``
(allclose), and the counter-addressed and numpy means lie within 8 ``sigma / sqrt(n)`` of it
(other noise, the same records).

JSON ``rows``: ``{workload, n, implementation, seconds, updates_per_second, peak_mb}``
(``workload`` ``modulated`` or ``W``; ``implementation`` one of the rows above); ``peak_mb`` is
the compiled program's own peak (XLA's memory analysis: arguments, so for W the record arrays,
44 n bytes, + outputs + temporaries) for the JAX rows and tracemalloc's for numpy (the round's own
allocations, not W's records). Also ``params`` (modulated), ``params_w`` (W), ``repeats``,
``uptime`` before and after, ``device``, ``versions``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import tracemalloc
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
from modulated_round import DIM, PARAMS, numpy_round

from jfed._random import (
    _extreme_cells,
    _normals_with_tails,
    _threefry_blocks,
    _unit_uniform,
    normals_from_words,
)
from jfed.algorithms import dpsgd, modulated
from jfed.algorithms.linear import clip_to_ball, second_moments
from jfed.data import ArrayClients, SyntheticLinear
from jfed.engine import ExecutionPlan, run_rounds
from jfed.engine.keys import client_key, round_key, run_streams
from jfed.report import versions

WORKLOADS = ("modulated", "W")
SWEEP_RUNS = 4
SWEEP = f"jfed, sweep of {SWEEP_RUNS} runs (per run)"


def swept(round_):
    """``round_`` over ``SWEEP_RUNS`` run keys split from ``key``, in one vmapped program."""

    def sweep(population, hp, key):
        keys = jax.random.split(key, SWEEP_RUNS)
        return jax.vmap(round_, in_axes=(None, None, 0))(population, hp, keys)

    return sweep


OTHER_DRAWS = {"hand-written, counter-addressed": "counter-addressed", "numpy": "numpy"}
"""W's rows with other draws than jfed's (checked against it statistically), and their labels."""

PARAMS_W = dict(clip_norm=1.0, noise_std=1.0, response_noise=0.1)
"""W: gradient clip C, local noise sigma, and the noise of the responses y."""


def peak_mb(compiled) -> float:
    memory = compiled.memory_analysis()
    total = (memory.argument_size_in_bytes + memory.output_size_in_bytes
             + memory.temp_size_in_bytes - memory.alias_size_in_bytes)  # fmt: skip
    return total / 2**20


def chunk_draws(
    root: jax.Array, ids: jax.Array, n_normal: int, n_uniform: int
) -> tuple[jax.Array, jax.Array]:
    """A whole chunk's message draws in one hash call, addressed as (client id, word index):
    client i's word j is the first output of the threefry block ``(i, j)`` under a key of the
    round's own,
    computed ``[word, client]`` (clients along the vectorised axis). ``(normals: f32[c,
    n_normal], uniforms: f32[c, n_uniform])`` for ``ids: i32[c]``: other draws than jfed's, by
    the same transforms (normals whose extreme cells are refined by their blocks' second outputs,
    computed only when the chunk drew one; a conditional, whose result XLA holds in memory, so
    the words are hashed once more than the test for extreme cells and nothing else)."""
    k0, k1 = jax.random.key_data(jax.random.fold_in(root, 1))  # apart from jfed's blocks
    width = n_normal + n_uniform
    shape = (width, ids.shape[0])
    client = jnp.broadcast_to(ids.astype(jnp.uint32)[None, :], shape)
    word = jnp.broadcast_to(jnp.arange(width, dtype=jnp.uint32)[:, None], shape)

    def blocks(_=None):
        return _threefry_blocks(k0, k1, client, word)

    def bulk(_):
        words = blocks()[0]
        return normals_from_words(words[:n_normal]), _unit_uniform(words[n_normal:])

    def tails(_):
        words, companions = blocks()
        normals = _normals_with_tails(words[:n_normal], companions[:n_normal])
        return normals, _unit_uniform(words[n_normal:])

    extreme = jnp.any(_extreme_cells(blocks()[0][:n_normal]))
    normals, uniforms = jax.lax.cond(extreme, tails, bulk, None)
    return normals.T, uniforms.T


def programs(n: int):
    """The three JAX rounds for ``n`` clients: functions of (population, hp, key) -> theta."""
    algorithm = modulated.OneShot(DIM)
    plan = ExecutionPlan.for_backend().fitted(n)
    chunk = plan.chunk_size  # the hand-written rounds scan chunks of jfed's width

    def jfed_round(population, hp, key):
        return run_rounds(algorithm, population, hp, key, 1, plan)[0].theta

    def messages(population, broadcast, root, ids):
        keys = jax.vmap(lambda i: client_key(root, i))(ids)
        return jax.vmap(lambda i, k: modulated.client_message(broadcast, population.record(i), k))(
            ids, keys
        )

    def server(hp, broadcast, stats):
        state = algorithm.init(hp, None)
        return algorithm.server_step(state, hp, broadcast, stats)[0].theta

    def setup(hp, key):
        _, server_root, client_root = run_streams(key)
        broadcast = modulated._broadcast(hp, round_key(server_root, 0), DIM, 1)
        return broadcast, round_key(client_root, 0)

    def chunked(message_fn):
        """A round that scans chunks of ``chunk`` clients, each vmapping ``message_fn``."""

        def round_(population, hp, key):
            broadcast, root = setup(hp, key)
            chunks = -(-n // chunk)
            ids = jnp.arange(chunks * chunk, dtype=jnp.int32).reshape(chunks, chunk)

            def chunk_stats(chunk_ids):
                weights = (chunk_ids < n).astype(jnp.float32)
                z, y, clipped = message_fn(
                    population, broadcast, root, jnp.minimum(chunk_ids, n - 1)
                )
                masked = (z * weights[:, None], y * weights, clipped * weights)
                return second_moments(masked, weights)

            def add(total, chunk_ids):
                return jax.tree.map(jnp.add, total, chunk_stats(chunk_ids)), None

            zero = jax.tree.map(
                lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(chunk_stats, ids[0])
            )
            total, _ = jax.lax.scan(add, zero, ids)
            return server(hp, broadcast, total)

        return round_

    def counter_messages(population, broadcast, root, ids):
        noise, unit = chunk_draws(root, ids, DIM, 1)
        x, y = jax.vmap(population.record)(ids)
        x, clipped = jax.vmap(lambda v: clip_to_ball(v, broadcast.clip_norm))(x)
        z = jax.vmap(lambda v, p, e: modulated.encode(broadcast, v, p, e))(
            x, 2.0 * jnp.pi * unit, noise
        )
        return z, y, clipped

    def materialised_round(population, hp, key):
        broadcast, root = setup(hp, key)
        ids = jnp.arange(n, dtype=jnp.int32)
        stats = second_moments(messages(population, broadcast, root, ids), jnp.ones(n, jnp.float32))
        return server(hp, broadcast, stats)

    return {
        "jfed": jfed_round,
        SWEEP: swept(jfed_round),
        "hand-written chunked": chunked(messages),
        "hand-written, counter-addressed": chunked(counter_messages),
        "materialised": materialised_round,
    }, plan


def w_hyperparams() -> dpsgd.Hyperparams:
    """W's round as ``dpsgd.FedAvg`` runs it: a step of 1 from ``w = 0`` and a projection radius
    that never binds, so the new ``theta`` is exactly minus the mean noisy clipped gradient."""
    return dpsgd.hyperparams(clip_norm=PARAMS_W["clip_norm"], learning_rate=1.0,
                             noise_std=PARAMS_W["noise_std"], radius=1e30)  # fmt: skip


def w_records(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """W's records, generated once: ``X: f32[n, d]`` ~ N(0, I), ``y = X w_true + 0.1 N(0, 1)``
    with ``w_true`` on the unit sphere."""
    rng = np.random.default_rng(seed)
    w_true = rng.standard_normal(DIM)
    w_true = (w_true / np.linalg.norm(w_true)).astype(np.float32)
    X = rng.standard_normal((n, DIM), dtype=np.float32)
    y = X @ w_true + np.float32(PARAMS_W["response_noise"]) * rng.standard_normal(
        n, dtype=np.float32
    )
    return X, y


def numpy_w_round(X: np.ndarray, y: np.ndarray, seed: int) -> np.ndarray:
    """W's round vectorised over all clients with numpy (float32, its own generator)."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    w = np.zeros(DIM, f32)
    G = (X @ w - y)[:, None] * X
    norms = np.linalg.norm(G, axis=1, keepdims=True)
    G *= np.minimum(f32(1.0), f32(PARAMS_W["clip_norm"]) / np.maximum(norms, f32(1e-30)))
    G += f32(PARAMS_W["noise_std"]) * rng.standard_normal(G.shape, dtype=f32)
    return G.mean(axis=0)


def w_programs(n: int):
    """W's JAX rounds for ``n`` clients: functions of (population, hp, key) -> the mean noisy
    clipped gradient ``f32[d]``."""
    algorithm = dpsgd.FedAvg(DIM)
    plan = ExecutionPlan.for_backend().fitted(n)
    chunk = plan.chunk_size  # the hand-written rounds scan chunks of jfed's width

    def jfed_round(population, hp, key):
        return -run_rounds(algorithm, population, hp, key, 1, plan)[0].theta

    def setup(hp, key):
        _, _, client_root = run_streams(key)
        return (jnp.zeros(DIM, jnp.float32), hp), round_key(client_root, 0)

    def messages(population, broadcast, root, ids):
        keys = jax.vmap(lambda i: client_key(root, i))(ids)
        return jax.vmap(lambda i, k: dpsgd.client_message(broadcast, population.record(i), k)[0])(
            ids, keys
        )

    def counter_messages(population, broadcast, root, ids):
        w, hp = broadcast
        noise, _ = chunk_draws(root, ids, DIM, 0)
        x, y = population.features[ids], population.targets[ids]
        gradients = (x @ w - y)[:, None] * x
        gradients = jax.vmap(lambda g: clip_to_ball(g, hp.clip_norm)[0])(gradients)
        return gradients + hp.noise_std * noise

    def chunked(message_fn):
        """A round that scans chunks of ``chunk`` clients, each vmapping ``message_fn``."""

        def round_(population, hp, key):
            broadcast, root = setup(hp, key)
            chunks = -(-n // chunk)
            ids = jnp.arange(chunks * chunk, dtype=jnp.int32).reshape(chunks, chunk)

            def add(total, chunk_ids):
                gradients = message_fn(population, broadcast, root, jnp.minimum(chunk_ids, n - 1))
                masked = jnp.where((chunk_ids < n)[:, None], gradients, 0.0)
                return total + jnp.sum(masked, 0), None

            total, _ = jax.lax.scan(add, jnp.zeros(DIM, jnp.float32), ids)
            return total / n

        return round_

    def materialised_round(population, hp, key):
        broadcast, root = setup(hp, key)
        ids = jnp.arange(n, dtype=jnp.int32)
        return jnp.sum(messages(population, broadcast, root, ids), 0) / n

    return {
        "jfed": jfed_round,
        SWEEP: swept(jfed_round),
        "hand-written chunked, same draws": chunked(messages),
        "hand-written, counter-addressed": chunked(counter_messages),
        "materialised": materialised_round,
    }, plan


def time_rounds(rounds: dict, numpy_run, repeats: int, *args) -> tuple[dict, dict]:
    """``{name: (seconds, peak_mb)}`` and ``{name: output}`` of the JAX rounds (compiled for
    ``args``), timed in turns, and, where ``numpy_run`` is given, of the numpy row under
    ``"numpy"`` (peak: tracemalloc's), timed after them."""
    compiled = {name: jax.jit(f).lower(*args).compile() for name, f in rounds.items()}
    runs = {name: partial(program, *args) for name, program in compiled.items()}
    outputs = {name: np.asarray(run()) for name, run in runs.items()}
    peaks = {name: peak_mb(program) for name, program in compiled.items()}
    seconds = best_in_turns(runs, repeats)
    if SWEEP in seconds:
        seconds[SWEEP] /= SWEEP_RUNS
    if numpy_run is not None:  # after the JAX rows, not in their turns (see best_in_turns)
        tracemalloc.start()
        outputs["numpy"] = np.asarray(numpy_run())
        peaks["numpy"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        seconds.update(best_in_turns({"numpy": numpy_run}, repeats))
    return {name: (seconds[name], peaks[name]) for name in seconds}, outputs


def bench_modulated(
    n: int, repeats: int, key: jax.Array, only_jfed: bool = False, with_numpy: bool = True
) -> tuple[dict, list[str]]:
    hp = modulated.hyperparams(**PARAMS)
    population = SyntheticLinear.create(jax.random.key(0), n, DIM)
    rounds, _ = programs(n)
    if only_jfed:
        return time_rounds({"jfed": rounds["jfed"]}, None, repeats, population, hp, key)[0], []
    theta_star = np.asarray(population.theta_star, np.float32)
    numpy_run = partial(numpy_round, n, theta_star, 0) if with_numpy else None
    results, thetas = time_rounds(rounds, numpy_run, repeats, population, hp, key)
    gap = float(np.abs(thetas["jfed"] - thetas["hand-written chunked"]).max())
    assert len({theta.tobytes() for theta in thetas[SWEEP]}) == SWEEP_RUNS, "a sweep's runs differ"
    return results, [f"jfed and the hand-written chunked round agree within {gap:.1e}"]


def bench_w(
    n: int, repeats: int, key: jax.Array, only_jfed: bool = False, with_numpy: bool = True
) -> tuple[dict, list[str]]:
    hp = w_hyperparams()
    X, y = w_records(n)
    population = ArrayClients(jnp.asarray(X), jnp.asarray(y))
    rounds, _ = w_programs(n)
    if only_jfed:
        return time_rounds({"jfed": rounds["jfed"]}, None, repeats, population, hp, key)[0], []
    numpy_run = partial(numpy_w_round, X, y, 0) if with_numpy else None
    results, means = time_rounds(rounds, numpy_run, repeats, population, hp, key)
    reference = means["jfed"]
    same = {name: float(np.abs(means[name] - reference).max())
            for name in ("hand-written chunked, same draws", "materialised")}  # fmt: skip
    for name in same:
        np.testing.assert_allclose(means[name], reference, rtol=1e-5, atol=1e-6, err_msg=name)
    scale = PARAMS_W["noise_std"] / np.sqrt(n)
    compared = [name for name in OTHER_DRAWS if name in means]
    other = {name: float(np.abs(means[name] - reference).max()) / scale for name in compared}
    # the sweep's runs: other keys, so other noise on the same records
    other[SWEEP] = float(np.abs(means[SWEEP] - reference).max()) / scale
    for name, distance in other.items():
        # other noise, the same records: each coordinate's gap is N(0, 2 sigma^2 / n)
        assert distance < 8.0, f"{name}: {distance:.1f} sigma/sqrt(n) from jfed"
    return results, [
        "jfed and the same-draws chunked round agree within "
        f"{same['hand-written chunked, same draws']:.1e}, the materialised within "
        f"{same['materialised']:.1e}",
        f"{' and '.join(OTHER_DRAWS[name] for name in compared)} within "
        f"{' and '.join(f'{other[name]:.1f}' for name in compared)} sigma/sqrt(n) of jfed (max "
        f"over d; mean {float(np.linalg.norm(reference)):.3f} in norm)",
    ]


def one_core(workload: str, n: int, repeats: int) -> tuple[float, float] | None:
    """``(seconds, peak_mb)`` of the ``jfed`` row run in a child process pinned to one core (what
    the second core adds), or None where the OS cannot pin a process."""
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        return None
    core = min(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "one_core.json")
        subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--workloads", workload, "--sizes", str(n),
             "--repeats", str(repeats), "--only-jfed", "--no-one-core", "--pin-core", str(core),
             "--json", path],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        with open(path, encoding="utf-8") as handle:
            (row,) = json.load(handle)["rows"]
    return row["seconds"], row["peak_mb"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e4,1e5,1e6,1e7")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help="comma-separated, of: " + ", ".join(WORKLOADS))  # fmt: skip
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--numpy-max", type=float, default=float("inf"),
                        help="time the numpy row only up to this many clients")  # fmt: skip
    parser.add_argument("--no-one-core", dest="one_core", action="store_false",
                        help="skip the jfed row pinned to one core")  # fmt: skip
    parser.add_argument("--only-jfed", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pin-core", type=int, help=argparse.SUPPRESS)
    args = parse_args(parser, argv, __file__, sizes="1e3", repeats=1, one_core=False)
    if args.pin_core is not None:  # before the first computation starts XLA's threads
        os.sched_setaffinity(0, {args.pin_core})
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = sorted(set(workloads) - set(WORKLOADS))
    if unknown or not workloads:
        parser.error(f"--workloads: expected some of {', '.join(WORKLOADS)}, got {args.workloads}")
    benches = {"modulated": bench_modulated, "W": bench_w}
    key = jax.random.key(1)
    rows = []
    load_before = uptime()
    print(
        f"d = {DIM}, {jax.devices()[0].platform}; modulated: one modulated one-shot round "
        "(procedural clients); W: one round of one-sample DP-SGD (records in arrays)"
    )
    print(f"{'workload':>9} {'n':>10} {'implementation':>32} {'seconds':>9} {'updates/s':>10} "
          f"{'peak MB':>9} {'x jfed':>7}")  # fmt: skip
    for workload in workloads:
        for n in [int(float(s)) for s in args.sizes.split(",")]:
            results, checks = benches[workload](
                n, args.repeats, key, args.only_jfed, n <= args.numpy_max
            )
            if args.one_core and not args.only_jfed:
                pinned = one_core(workload, n, args.repeats)
                if pinned is not None:
                    results["jfed, one core"] = pinned
            for name, (seconds, peak) in results.items():
                rows.append({"workload": workload, "n": n, "implementation": name,
                             "seconds": seconds, "updates_per_second": n / seconds,
                             "peak_mb": peak})  # fmt: skip
                print(f"{workload:>9} {n:>10,} {name:>32} {seconds:>9.4f} {n / seconds:>10.3g} "
                      f"{peak:>9.1f} {results['jfed'][0] / seconds:>7.2f}", flush=True)  # fmt: skip
            for line in checks:
                print(f"{'':>20} {line}")
    load_after = uptime()
    print(f"load before: {load_before}\nload after:  {load_after}")
    if args.json:
        payload = {"benchmark": "engine", "dim": DIM, "params": PARAMS, "params_w": PARAMS_W,
                   "repeats": args.repeats, "rows": rows,
                   "numpy_max": None if np.isinf(args.numpy_max) else args.numpy_max,
                   "uptime": {"before": load_before, "after": load_after},
                   "device": device_name(), "versions": versions()}  # fmt: skip
        write_json(args.json, payload)


if __name__ == "__main__":
    main()
