"""What every benchmark script shares: its arguments with a smoke size, the machine's load,
timing in turns, and its JSON written atomically."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
"""``bench/results``: the committed results, which a smoke run never writes."""
SMOKE_HELP = (
    "a smoke run: seconds, tiny sizes, the same code path (what the test suite runs so that no "
    "benchmark rots); its JSON goes to --json or a temporary file, never under bench/results/"
)


def parse_args(
    parser: argparse.ArgumentParser, argv: list[str] | None, script: str, **smoke: Any
) -> argparse.Namespace:
    """``parser``'s arguments from ``argv`` (``None``: the command line), with ``--smoke`` added.

    With ``--smoke``, ``smoke`` (``{dest: value}``, the script's tiny sizes) replaces the
    defaults (flags given still win), and the JSON (``--json``) defaults to
    ``<tmp>/jfed-bench-smoke/<script's name>.json``; a smoke JSON under :data:`RESULTS` is
    refused, so a smoke run cannot overwrite a committed result."""
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    if not args.smoke:
        return args
    unknown = set(smoke) - {action.dest for action in parser._actions}
    if unknown:  # a misspelt size would be set beside the arguments and never read
        raise ValueError(f"{script}: smoke sizes of no argument: {sorted(unknown)}")
    name = os.path.splitext(os.path.basename(script))[0]
    folder = os.path.join(tempfile.gettempdir(), "jfed-bench-smoke")
    parser.set_defaults(**smoke, json=os.path.join(folder, f"{name}.json"))
    args = parser.parse_args(argv)
    if args.json and os.path.realpath(args.json).startswith(os.path.realpath(RESULTS) + os.sep):
        parser.error(f"--smoke writes no result under {RESULTS}: --json {args.json}")
    print(f"smoke run of {name}: tiny sizes, timings meaningless; JSON: {args.json}", flush=True)
    return args


def uptime() -> str:
    """``uptime``'s line (the load of this shared machine), or the load averages without it."""
    try:
        return subprocess.run(
            ["uptime"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        return "load average: {:.2f}, {:.2f}, {:.2f}".format(*os.getloadavg())


def device_name() -> str:
    """``platform: device kind`` of JAX's first device (e.g. ``gpu: NVIDIA H100 80GB HBM3``)."""
    device = jax.devices()[0]
    return f"{device.platform}: {device.device_kind}"


def write_json(path: str, payload: dict) -> None:
    """``payload`` to ``path`` as indented JSON: a temporary file beside it, then ``os.replace``,
    so an interrupted benchmark never leaves a half-written result."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=2)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def finish(path: str | None, setting: str, rows: list[dict], load_before: str,
           load_after: str) -> None:  # fmt: skip
    """The end every timing script shares: the load before and after printed, and, with a
    ``path``, ``{setting, rows, device, uptime, versions}`` written there (:func:`write_json`)."""
    from jfed.report import versions

    print(f"load before: {load_before}\nload after:  {load_after}")
    if path:
        write_json(path, {"setting": setting, "rows": rows, "device": device_name(),
                          "uptime": {"before": load_before, "after": load_after},
                          "versions": versions()})  # fmt: skip


def best_in_turns(runs: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """``{name: seconds}``: the best of :func:`times_in_turns`."""
    return {name: min(seconds) for name, seconds in times_in_turns(runs, repeats).items()}


def times_in_turns(runs: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[float]]:
    """``{name: [seconds, ...]}``: ``repeats`` timings of each ``runs[name]()`` (after one
    warm-up call each), the rows taking turns so that every row sees the same machine load.

    Each turn runs the rows in a new order (a seeded shuffle, so a run is repeatable), so that no
    row always runs right after the same one: what a row leaves behind slows the next one. A
    rotation of one order does not do that (every row keeps its predecessor): bench/engine.py's
    W at 10^6 on 2 CPU cores, where jfed's round always ran right after the materialised one
    (164 MB allocated and freed), took 0.062-0.074 s in 4 runs against 0.059-0.060 s in 3 runs
    shuffled, while the hand-written rounds took 0.059-0.063 s in all 7. (Time a numpy row in a
    call of its own: a JAX round run right after one of ~100 MB was 5-25% slower.)"""
    for run in runs.values():
        jax.block_until_ready(run())
    names = list(runs)
    order = np.random.default_rng(0)
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(repeats):
        for index in order.permutation(len(names)):
            name = names[index]
            tic = time.perf_counter()
            jax.block_until_ready(runs[name]())
            times[name].append(time.perf_counter() - tic)
    return times
