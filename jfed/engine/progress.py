"""Progress of a run's rounds, reported from inside the compiled ``lax.scan``.

Every ``report_every`` rounds (and after the last) the program calls back to the host with
``jax.debug.callback``, which advances a tqdm bar with an ETA. The program carries a small integer
*token* as an ordinary argument and the host finds the bar by it, so one compiled program serves
every run (a bar captured in the program would recompile it per run).

Cost: a ``lax.cond`` per round, and per report one device-to-host transfer of an int32 and a
Python call on the host (tens of microseconds; measured in ``bench/progress.py``). Reports are
capped at about :data:`MAX_REPORTS` per run, so long runs of cheap rounds stay cheap.

Where stderr is not a terminal (a log file, a batch job, a pipe), a bar's carriage returns are
noise and a slow round leaves the log silent: :class:`LineProgress` prints instead one plain line
every :data:`LINE_SECONDS` (round, rounds per second, eta), also while nothing has reported yet
(compiling), and nothing for a run shorter than that (:func:`progress_bar` picks the display).
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from tqdm import tqdm  # the text bar everywhere: tqdm.auto would ask notebooks for ipywidgets

MAX_REPORTS = 100
LINE_SECONDS = 30.0
"""Seconds between two lines of :class:`LineProgress` (stderr not a terminal)."""

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


def _terminal() -> bool:
    return sys.stderr.isatty()


def _duration(seconds: float) -> str:
    """``42 s``, ``3.5 min``, ``2.1 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


class LineProgress:
    """tqdm's small interface (``n``, ``update``, ``set_postfix_str``, ``close``, ``with``) for
    a stderr that is not a terminal: a daemon thread prints ``jfed: progress: DESC: UNIT n/total,
    r UNITs/s, eta T`` every ``interval`` seconds until :meth:`close` (nothing if it closes
    sooner). ``update`` may come from any thread (the program's callbacks)."""

    def __init__(self, total: int | None = None, desc: str = "", unit: str = "it",
                 initial: int = 0, disable: bool = False,
                 interval: float | None = None) -> None:  # fmt: skip
        self.total, self.desc, self.unit, self.n = total, desc, unit, int(initial)
        self._begun = time.monotonic()
        self._first: tuple[float, int] | None = None  # (time, count) of the first update
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._interval = LINE_SECONDS if interval is None else interval
        self._thread = None
        if not disable:
            self._thread = threading.Thread(target=self._beat, daemon=True, name="jfed-progress")
            self._thread.start()

    def update(self, count: int = 1) -> None:
        with self._lock:
            self.n += int(count)
            if self._first is None:
                self._first = (time.monotonic(), self.n)

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        del text, refresh  # the line says whether anything has run yet

    def line(self) -> str:
        """The line printed now."""
        with self._lock:
            n, first = self.n, self._first
        now = time.monotonic()
        total = f"/{self.total}" if self.total is not None else ""
        head = f"jfed: progress: {self.desc}: {self.unit} {n}{total}"
        if first is None:
            return f"{head}, none done after {_duration(now - self._begun)} (compiling)"
        (start, counted) = first
        if n > counted:  # since the first report: the compilation left out
            rate = (n - counted) / max(now - start, 1e-9)
        else:  # one report so far: since the start (an underestimate)
            rate = n / max(now - self._begun, 1e-9)
        eta = ""
        if self.total is not None and rate > 0:
            eta = f", eta {_duration(max(0, self.total - n) / rate)}"
        return f"{head}, {rate:.3g} {self.unit}s/s{eta}"

    def _beat(self) -> None:
        while not self._stop.wait(self._interval):
            print(self.line(), file=sys.stderr, flush=True)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_bar(bar: Any, **kwargs: Any) -> Any:
    """``bar(**kwargs)`` (a tqdm class) on a terminal, else a :class:`LineProgress` of the same
    arguments (``total``, ``desc``, ``unit``, ``initial``, ``disable``)."""
    return bar(**kwargs) if _terminal() else LineProgress(**kwargs)


@contextmanager
def round_progress(rounds: int, description: str = "rounds") -> Iterator[jax.Array]:
    """A tqdm bar over ``rounds`` rounds; yields the ``i32[]`` token to pass to the program.

    The caller must wait for the program's results (and its callbacks) before leaving the block.
    """
    token = next(_next_token) % 2**31
    bar = progress_bar(tqdm, total=int(rounds), desc=description, unit="round")
    bar.set_postfix_str("compiling (if not cached)")
    _open_bars[token] = bar
    try:
        yield jnp.int32(token)
    finally:
        _open_bars.pop(token).close()
