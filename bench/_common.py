"""What every benchmark script shares: the machine's load, timing in turns, and its JSON written
atomically."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

import jax


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


def best_in_turns(runs: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """``{name: seconds}``: the best of ``repeats`` timings of each ``runs[name]()`` (after one
    warm-up call each), the rows taking turns so that every row sees the same machine load.

    The order rotates every turn, so that no row always runs right after the same one. (Time a
    numpy row in a call of its own: a JAX round timed right after a numpy round that allocated
    and freed ~100 MB ran 5-25% slower, measured on 2 CPU cores, bench/engine.py's W at 10^6.)"""
    for run in runs.values():
        jax.block_until_ready(run())
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    for turn in range(repeats):
        start = turn % len(names)
        for name in names[start:] + names[:start]:
            tic = time.perf_counter()
            jax.block_until_ready(runs[name]())
            times[name].append(time.perf_counter() - tic)
    return {name: min(seconds) for name, seconds in times.items()}
