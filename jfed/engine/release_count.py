"""How many times a release RUNS in one round, read where it is traced, and counted where it runs.

``jax.lax.scan`` traces its body once, so a release recorded while a round is traced
(:class:`~jfed.engine.Ledger`) is recorded once however many steps run it. This module finds,
when the ledger records a release, the JAX constructs the release sits in between the round's
own trace and the call (:func:`runs_here`):

- ``lax.scan`` (and ``lax.fori_loop`` with static bounds, ``lax.map``, which are scans): the
  body runs ``length`` times a round; nested scans multiply;
- ``jax.jit`` and ``jax.checkpoint``: the body runs once;
- ``lax.while_loop`` (and ``lax.fori_loop`` with traced bounds), ``lax.cond`` / ``lax.switch``
  and ``jax.vmap``: the count is unknown, or depends on data (whether a release ran would
  itself be a release), or is one release per mapped element: refused with one line naming
  the construct and the way out (:class:`ReleaseCountError`), before anything runs;
- any other nested trace (a transformation not listed): refused likewise.

A scan may trace its body twice (a weakly typed carry is promoted and the body traced again):
:func:`superseded` says which recorded releases belong to such an abandoned pass.

Beside the trace-time count the compiled program counts its releases as they run: inside
:func:`counting_releases` every ``aggregate`` adds its releases to an ``int32`` cell
(a ``jax.new_ref``) that the program returns, and the runner compares it with the ledger's
count after every run (:mod:`jfed.sweep.runner`).
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

import jax
import jax.numpy as jnp

from jfed._validation import UsageError

_LOOPS = "jax._src.lax.control_flow.loops"
_CONDITIONALS = "jax._src.lax.control_flow.conditionals"

_WAY_OUT = {
    "while": "use lax.scan (or lax.fori_loop with static bounds) of a static length, or a "
    "Python loop",
    "cond": "make the release in every round unconditionally (compute both branches' inputs "
    "and select with jnp.where), or decide in Python",
    "vmap": "use lax.scan over the elements, a Python loop, or one aggregate call with a tuple "
    "of aggregators",
    "other": "make the release in the round's own body, inside lax.scan / lax.fori_loop of a "
    "static length, jax.jit or jax.checkpoint",
}


class ReleaseCountError(UsageError):
    """A release whose number of runs a round cannot be known from the trace (refused before
    anything runs; ``jfed run`` prints its one line)."""


@dataclass(frozen=True)
class Site:
    """Where one release is traced: how many times it runs a round and inside what.

    Attributes:
      runs: times it runs in one round (the product of its enclosing scans' lengths).
      where: the enclosing constructs, outermost first (e.g. ``"lax.scan of length 4"``);
        empty in the round's own body.
      origin: ``(construct frame, frame it called)`` pairs of the enclosing traced
        constructs, for :func:`superseded` (only held while the round is traced).
    """

    runs: int = 1
    where: tuple[str, ...] = ()
    origin: tuple[tuple[FrameType, FrameType], ...] = ()

    def describe(self) -> str:
        """``"inside lax.scan of length 4"`` (``"in the round's body"`` at the top)."""
        return "inside " + " inside ".join(reversed(self.where)) if self.where else (
            "in the round's body")  # fmt: skip


def current_trace() -> Any:
    """JAX's current trace (``None`` where this JAX keeps it elsewhere: the stack alone then
    says whether a release sits in a nested construct)."""
    try:
        from jax._src import core

        return core.trace_ctx.trace
    except (ImportError, AttributeError):  # pragma: no cover - a JAX that moved it
        return None


def _jax_name(frame: FrameType) -> tuple[str, str]:
    return frame.f_globals.get("__name__", ""), frame.f_code.co_name


def _frames_between(start: FrameType | None, stop: FrameType | None) -> list[FrameType]:
    """The frames from ``start`` outwards, up to (not including) ``stop``."""
    frames = []
    while start is not None and start is not stop:
        frames.append(start)
        start = start.f_back
    return frames


_PUBLIC_LOOPS = {(_LOOPS, "fori_loop"): "fori_loop", (_LOOPS, "map"): "map"}
"""The public loops written on ``scan`` / ``while_loop``, named as their caller wrote them."""


def _called_as(frames: list[FrameType], index: int) -> str:
    """The public name of the construct whose frame is ``frames[index]``: the JAX function
    that called it directly (``fori_loop``, ``map``), else its own."""
    for frame in frames[index + 1 :]:
        module, name = _jax_name(frame)
        if not module.startswith("jax"):
            break
        if (module, name) in _PUBLIC_LOOPS:
            return _PUBLIC_LOOPS[module, name]
    return _jax_name(frames[index])[1]


def _refusal(kind: str, construct: str, aggregator: str) -> ReleaseCountError:
    reason = {
        "while": "runs an unknown number of times",
        "cond": "runs or not depending on the data (whether it ran would itself be released)",
        "vmap": "is one release per mapped element, which the ledger does not count",
        "other": "runs a number of times jfed cannot read from the trace",
    }[kind]
    return ReleaseCountError(
        f"a release ({aggregator}) inside {construct} {reason}: {_WAY_OUT[kind]}"
    )


@dataclass(frozen=True)
class _Walk:
    """One frame of the walk from the release out to the round: ``frames[index]`` is a JAX
    construct's frame, ``aggregator`` the releasing aggregator's name."""

    frames: list[FrameType]
    index: int
    aggregator: str
    disjoint_steps: bool

    @property
    def frame(self) -> FrameType:
        return self.frames[self.index]

    @property
    def public_name(self) -> str:
        return _called_as(self.frames, self.index)


def _in_scan(walk: _Walk) -> tuple[int, str]:
    length = walk.frame.f_locals.get("length")
    if not isinstance(length, int):
        raise _refusal("other", f"lax.{walk.public_name}", walk.aggregator)
    return (1 if walk.disjoint_steps else length), f"lax.{walk.public_name} of length {length}"


_WHILE_NAMES = {"fori_loop": "lax.fori_loop with traced bounds"}


def _in_while(walk: _Walk) -> tuple[int, str]:
    construct = _WHILE_NAMES.get(walk.public_name, "lax.while_loop")
    if not walk.disjoint_steps:
        raise _refusal("while", construct, walk.aggregator)
    return 1, construct


def _in_cond(walk: _Walk) -> tuple[int, str]:
    raise _refusal("cond", f"lax.{walk.frame.f_code.co_name}", walk.aggregator)


def _in_vmap(walk: _Walk) -> tuple[int, str]:
    raise _refusal("vmap", f"jax.{walk.frame.f_code.co_name[:-2]}", walk.aggregator)


def _once(construct: str) -> Callable[[_Walk], tuple[int, str]]:
    def runs_once(walk: _Walk) -> tuple[int, str]:
        del walk
        return 1, construct

    return runs_once


_CONSTRUCTS = {
    (_LOOPS, "scan"): _in_scan,
    (_LOOPS, "while_loop"): _in_while,
    (_CONDITIONALS, "cond"): _in_cond,
    (_CONDITIONALS, "switch"): _in_cond,
    ("jax._src.api", "vmap_f"): _in_vmap,
    ("jax._src.api", "pmap_f"): _in_vmap,
    ("jax._src.pjit", "cache_miss"): _once("jax.jit"),
    ("jax._src.ad_checkpoint", "fun_remat"): _once("jax.checkpoint"),
}
"""The JAX frames (module, function) a release can sit in, each to what it makes of the
release: ``(runs a round, description)``, or a :class:`ReleaseCountError`."""


def runs_here(
    aggregator: str, base_frame: FrameType | None, base_trace: Any, disjoint_steps: bool = False
) -> Site:
    """The :class:`Site` of a release recorded now, in a round whose tracing started in
    ``base_frame`` under JAX trace ``base_trace``.

    Args:
      aggregator: the aggregator's name (for the refusal's message).
      base_frame: the frame that traces the round (the walk up the stack stops there).
      base_trace: JAX's trace when the round's tracing started; ``None``: unknown.
      disjoint_steps: the caller states that each client takes part in one step at most of the
        loops the release sits in (the other steps weigh it 0): the steps compose in parallel,
        one release a round (``lax.while_loop`` is then allowed; a condition or a vmap is not).

    Raises:
      ReleaseCountError: inside a construct whose count is unknown or depends on data.
    """
    trace = current_trace()
    if base_trace is not None and trace is base_trace:
        return Site()  # no nested trace (e.g. loops run in Python under disable_jit)
    frames = _frames_between(sys._getframe(1), base_frame)
    runs, where, origin = 1, [], []
    for index, frame in enumerate(frames):
        construct = _CONSTRUCTS.get(_jax_name(frame))
        if construct is None:
            continue
        times, described = construct(_Walk(frames, index, aggregator, disjoint_steps))
        runs *= times
        where.append(described)
        origin.append((frame, frames[index - 1] if index else frame))
    if not where and base_trace is not None:
        seen = [f"{m}.{n}" for m, n in map(_jax_name, frames) if m.startswith("jax")]
        construct_name = f"a JAX transformation ({seen[-1] if seen else 'unknown'})"
        raise _refusal("other", construct_name, aggregator)
    return Site(runs, tuple(reversed(where)), tuple(reversed(origin)))


def superseded(old: Site, new: Site) -> bool:
    """Whether a release recorded at ``old`` was traced in an earlier pass of a construct that
    ``new`` is traced in again (the same construct's frame, another call beneath it): that pass
    was abandoned, its releases are not the program's."""
    beneath = {id(frame): child for frame, child in new.origin}
    return any(id(frame) in beneath and beneath[id(frame)] is not child
               for frame, child in old.origin)  # fmt: skip


_COUNTER: contextvars.ContextVar[Any] = contextvars.ContextVar("jfed_release_counter",
                                                               default=None)  # fmt: skip


@contextlib.contextmanager
def counting_releases() -> Iterator[Any]:
    """``with counting_releases() as counter:`` inside a function being traced: every release
    the rounds traced in the block make adds 1 to ``counter`` (an ``i32[]`` ``jax.new_ref``)
    each time it RUNS; read ``counter[...]`` after the rounds and return it from the program.

    Example::

        def unit(population, hp, key):
            with counting_releases() as counter:
                state, infos = run_rounds(algorithm, population, hp, key, rounds, plan)
            return state, counter[...]
    """
    counter = jax.new_ref(jnp.int32(0))
    token = _COUNTER.set(counter)
    try:
        yield counter
    finally:
        _COUNTER.reset(token)


def count_release(releases: int) -> None:
    """Add ``releases`` to the counter of :func:`counting_releases`, when one is active (a
    program that does not count runs unchanged)."""
    counter = _COUNTER.get()
    if counter is not None:
        counter[...] += jnp.int32(releases)
