"""What a run will cost, from its declared configuration alone, before anything is compiled.

Two numbers per configuration: the bytes of the arrays it holds at once (its peak, to compare with
the memory free on the machine) and its work (scalar draws and multiply-adds over the whole run,
rounds x clients x what each client computes). They are estimates from the shapes the programs
allocate, within a small factor, and serve one purpose: to refuse at once, naming the flag and the
largest value that fits, a run that cannot finish (a d x d matrix of d = 10^5 needs 40 GB) rather
than fail after minutes of compiling or exhaust the machine.

The shapes, per method family (``chunk``: clients vmapped at once, the engine plan's
``chunk_size``; float32 on the device, float64 on the host):

- modulated-*: a chunk's messages ``[chunk, m]`` with ``m = d`` (``2 d`` when a sweep's eps share
  their draws), their second moments ``[m, m]`` summed chunk by chunk, an eigen- or linear solve
  of ``[d, d]``, the directions ``V: [d, k]``. Work per round: ``n m^2`` (the sums ``Z^T Z``).
- dpsgd: ``[chunk, d]`` gradients. Work per round: ``n d``.
- ols: ``[chunk, d]`` and ``[d, d]``. Work: ``n d^2``.
- estimation: units drawn one by one (item-level clipping or noise) hold ``[chunk, n]`` values,
  keys and masks per site; else a site is a few scalars. Work: ``replications S n``.
- functional-estimation: each function's basis matrix ``[m, 64]`` over ``n`` functions and a
  chunk of servers: ``[chunk, n, m, 64]``. Work: ``replications S n m 64``.

Configurations of other methods have no estimate here (``estimate`` returns ``None``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass

from jfed import catalog
from jfed._validation import UsageError
from jfed.methods import declared
from jfed.methods.config import Config
from jfed.methods.fields import field_map

FLOAT32, FLOAT64, KEY = 4, 8, 8  # bytes of a device float, a host float and a PRNG key
MESSAGE_COPIES = 6  # per-client vectors alive at once: features, message, noise, phases, ...
SOLVE_COPIES = 4  # [d, d] matrices: the running sum, a chunk's sum, the solve's workspace
PER_UNIT_BYTES = 2 * KEY + 4 * FLOAT32  # a unit's data and noise keys, value, noise, mask, clip
TRUTH_TERMS = 64  # basis terms of the functional model (jfed.algorithms.functional.TRUTH_TERMS)
LARGEST_REAL_TASK = 20_190  # records of randhie, the largest regression task (`jfed datasets`)
# scalar operations a run may take: about a day at the ~10^9 per second of a few CPU cores, or
# at the ~10^12 of an accelerator (an H100 ran 2.2e9 modulated client-updates/s at d = 10)
MAX_WORK = {"cpu": 10**14, "accelerator": 10**17}


@dataclass(frozen=True)
class Cost:
    """A run's estimated peak memory and work.

    Attributes:
      memory: bytes of the arrays held at once (device memory; the host's on CPU).
      work: scalar operations (draws, multiply-adds) over the whole run.
      sizes: the integer fields that scale it, most decisive first (what a refusal may name).
    """

    memory: int
    work: int
    sizes: tuple[str, ...]


def _clients(config) -> int:
    """n of a regression configuration (the real tasks: at most the largest one's records)."""
    if config.synthetic:
        return config.clients or catalog.SYNTHETIC_CLIENTS
    return LARGEST_REAL_TASK


def _modulated(config, chunk: int, shared: bool) -> Cost:
    d = config.dimension
    n = _clients(config)
    m = 2 * d if shared else d
    rounds = getattr(config, "rounds", 1)
    memory = FLOAT32 * (
        MESSAGE_COPIES * min(chunk, n) * m + SOLVE_COPIES * m * m + d * config.directions
    )
    return Cost(memory, rounds * n * m * m, ("dim", "clients", "rounds"))


def _dpsgd(config, chunk: int, shared: bool) -> Cost:
    del shared
    d = config.dimension
    n = _clients(config)
    memory = FLOAT32 * MESSAGE_COPIES * min(chunk, n) * d
    return Cost(memory, config.rounds * n * d, ("dim", "clients", "rounds"))


def _ols(config, chunk: int, shared: bool) -> Cost:
    del shared
    d = config.dimension
    n = _clients(config)
    memory = FLOAT32 * (MESSAGE_COPIES * min(chunk, n) * d + SOLVE_COPIES * d * d)
    return Cost(memory + FLOAT64 * SOLVE_COPIES * d * d, n * d * d, ("dim", "clients"))


def _per_unit(config) -> bool:
    """Whether the estimation program draws a site's units one by one (mirrors
    ``jfed.algorithms.estimation.MeanEstimation.per_unit``)."""
    if config.setting == "local-item":
        return True
    return config.data == "gaussian" and config.setting in ("central-item", "federated")


def _estimation(config, chunk: int, shared: bool) -> Cost:
    del shared
    sites = min(chunk, config.sites)
    if not _per_unit(config):
        return Cost(PER_UNIT_BYTES * sites, config.replications * config.sites, ("sites",))
    memory = PER_UNIT_BYTES * sites * config.units
    work = config.replications * config.sites * config.units
    return Cost(memory, work, ("units", "sites", "replications"))


def _functional(config, chunk: int, shared: bool) -> Cost:
    del shared
    per_server = config.functions * config.observations * (TRUTH_TERMS + 2)
    memory = FLOAT32 * min(chunk, config.servers) * per_server
    work = config.replications * config.servers * per_server
    return Cost(memory, work, ("observations", "functions", "servers", "replications"))


# the configuration classes with an estimate (a subclass is looked up through its bases)
ESTIMATES: dict[type, Callable[[Config, int, bool], Cost]] = {
    declared.Modulated: _modulated,
    declared.DPSGD: _dpsgd,
    declared.OLS: _ols,
    declared.Estimation: _estimation,
    declared.FunctionalEstimation: _functional,
}


def estimate(config: Config, chunk: int, shared: bool = False) -> Cost | None:
    """The cost of one run of ``config`` with ``chunk`` clients vmapped at once (``shared``: a
    sweep's eps share their draws, doubling the modulated messages); ``None`` when its method
    has no estimate here."""
    for kind in type(config).__mro__:
        if kind in ESTIMATES:
            return ESTIMATES[kind](config, chunk, shared)
    return None


def available_memory() -> int:
    """Bytes of host memory free for a new allocation now (``MemAvailable`` of /proc/meminfo,
    else the free pages), without starting any device."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def memory_budget() -> int:
    """Bytes free for a run's arrays on JAX's default device: its allocator's limit less what is
    in use on an accelerator, the host's available memory on CPU."""
    import jax

    if jax.default_backend() != "cpu":
        stats = jax.devices()[0].memory_stats() or {}
        if "bytes_limit" in stats:
            return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    return available_memory()


def work_budget() -> int:
    """Operations a run may take on JAX's default backend (:data:`MAX_WORK`)."""
    import jax

    return MAX_WORK["cpu" if jax.default_backend() == "cpu" else "accelerator"]


def _largest_fitting(config: Config, name: str, fits: Callable[[Config], bool]) -> int | None:
    """The largest value of the integer field ``name`` below its current one with which
    ``config`` fits (bisection: costs grow with every size), or ``None`` if not even the field's
    smallest allowed value does."""
    field = field_map(config)[name]
    low = int(field.range.low) if field.range is not None else 1
    high = int(getattr(config, name))
    if not fits(dataclasses.replace(config, **{name: low})):
        return None
    while low < high - 1:
        middle = (low + high) // 2
        if fits(dataclasses.replace(config, **{name: middle})):
            low = middle
        else:
            high = middle
    return low


def _bytes(value: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30)):
        if value >= size / 8:
            return f"{value / size:.3g} {unit}"
    return f"{value / 2**20:.3g} MiB"


def check_fits(
    config: Config,
    chunk: int,
    memory: int,
    shared: bool = False,
    given: tuple[str, ...] = (),
    max_work: int = MAX_WORK["accelerator"],
) -> Cost | None:
    """Refuse (``UsageError``, one line naming a flag and the largest value of it that fits) a
    configuration whose arrays need more than ``memory`` bytes or whose work exceeds
    ``max_work``; returns its cost otherwise (``None`` for a method without an estimate).

    Args:
      config: the run's configuration (for a sweep: its largest sizes).
      chunk: clients vmapped at once (the engine plan's ``chunk_size``).
      memory: bytes free for the run's arrays (:func:`memory_budget`).
      shared: a sweep's eps share their draws.
      given: the fields the user gave, named first in a refusal.
      max_work: operations allowed (:func:`work_budget`).
    """
    cost = estimate(config, chunk, shared)
    if cost is None or (cost.memory <= memory and cost.work <= max_work):
        return cost

    def fits(candidate: Config) -> bool:
        found = estimate(candidate, chunk, shared)
        return found is not None and found.memory <= memory and found.work <= max_work

    what = (
        f"about {_bytes(cost.memory)} of arrays, {_bytes(memory)} is free"
        if cost.memory > memory
        else f"about {cost.work:.2g} operations, more than a day's work here ({max_work:.0g})"
    )
    order = [n for n in cost.sizes if n in given] + [n for n in cost.sizes if n not in given]
    for name in order:
        if getattr(config, name, None) is None:
            continue
        largest = _largest_fitting(config, name, fits)
        if largest is not None:
            flag = "--" + name.replace("_", "-")
            raise UsageError(
                f"{flag}={getattr(config, name)} needs {what}: the largest {flag} that fits is "
                f"{largest}"
            )
    raise UsageError(f"this configuration needs {what}, and no smaller size fits")
