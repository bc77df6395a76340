"""Progress of a run's rounds, reported from inside the compiled ``lax.scan``.

Every ``report_every`` rounds (and after the last) the program calls back to the host with
``jax.debug.callback``, which advances a tqdm bar with an ETA. The program carries a small integer
*token* as an ordinary argument and the host finds the bar by it, so one compiled program serves
every run (a bar captured in the program would recompile it per run).

Cost: a ``lax.cond`` per round, and per report one device-to-host transfer of an int32 and a
Python call on the host (tens of microseconds; measured in ``bench/progress.py``). Reports are
capped at about :data:`MAX_REPORTS` per run, so long runs of cheap rounds stay cheap.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager

import jax
import jax.numpy as jnp
from jax import lax
from tqdm import tqdm  # the text bar everywhere: tqdm.auto would ask notebooks for ipywidgets

MAX_REPORTS = 100

# Bars of the runs in flight, by token. Host-side display state only: nothing computed reads it.
_open_bars: dict[int, tqdm] = {}
_next_token = itertools.count()


def report_every(rounds: int, max_reports: int = MAX_REPORTS) -> int:
    """Rounds between two reports so that a run of ``rounds`` makes at most ~``max_reports``."""
    return max(1, -(-int(rounds) // max_reports))


def report_round(token: jax.Array, t: jax.Array, every: int, rounds: int) -> None:
    """Inside the scan: after round ``t`` (0-based), tell the host every ``every`` rounds and
    after the last one. ``token: i32[]`` names the bar."""
    done = t + 1

    def send() -> None:
        jax.debug.callback(_advance, token, done, ordered=False)

    lax.cond((done % every == 0) | (done == rounds), send, lambda: None)


def _advance(token: jax.Array, done: jax.Array) -> None:
    bar = _open_bars.get(int(token))
    finished = int(done)
    if bar is not None and finished > bar.n:  # unordered callbacks may arrive late
        if bar.n == 0:
            bar.set_postfix_str("", refresh=False)  # the program is compiled and running
        bar.update(finished - bar.n)


@contextmanager
def round_progress(rounds: int, description: str = "rounds") -> Iterator[jax.Array]:
    """A tqdm bar over ``rounds`` rounds; yields the ``i32[]`` token to pass to the program.

    The caller must wait for the program's results (and its callbacks) before leaving the block.
    """
    token = next(_next_token) % 2**31
    bar = tqdm(total=int(rounds), desc=description, unit="round")
    bar.set_postfix_str("compiling (if not cached)")
    _open_bars[token] = bar
    try:
        yield jnp.int32(token)
    finally:
        _open_bars.pop(token).close()
