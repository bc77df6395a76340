"""What a run will cost, from its declared configuration alone, before anything is compiled.

Every method declares a ``cost(config, plan) -> Cost`` hook (:class:`~jfed.methods.Method`'s
``cost``; the built-in ones are beside their configurations in :mod:`jfed.methods.declared`, a
plug-in writes its own). A cost is four numbers: the bytes of the arrays the device holds at once
(its peak, to compare with the memory free on the machine), the device's work (scalar operations
over the whole run: rounds x clients x what each client computes), and the host's share: the
bytes and seconds of the privacy accounting that runs before the program (a PLD accountant's
distribution grows with the composed steps and shrinks with the noise). They are estimates from
the shapes the programs allocate, within a small factor, and serve one purpose: to refuse at
once, naming the flag and the largest value of it that fits, a run that cannot finish (a d x d
matrix of d = 10^5 needs 40 GB; 10^6 Gaussian rounds composed by PLD need terabytes) rather
than fail after minutes of compiling or exhaust the machine.

:func:`estimate` asks the configuration's method; :func:`check_fits` refuses. The helpers here
(:func:`pld_cost`, :func:`pld_calibration_cost`, the byte sizes) serve the declarations and the
command line's ``jfed account``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from jfed._validation import UsageError
from jfed.methods.config import Config
from jfed.methods.fields import field_map

FLOAT32, FLOAT64, KEY = 4, 8, 8  # bytes of a device float, a host float and a PRNG key
MESSAGE_COPIES = 6  # per-client vectors alive at once: features, message, noise, phases, ...
SOLVE_COPIES = 4  # [d, d] matrices: the running sum, a chunk's sum, the solve's workspace
# how fast each backend works through a run's scalar operations (multiply-adds, draws): what the
# work budget is measured in. A run may take about WORK_SECONDS of it.
OPERATIONS_PER_SECOND = {"cpu": 10**10, "accelerator": 10**13}
WORK_SECONDS = 3600
MAX_WORK = {name: rate * WORK_SECONDS for name, rate in OPERATIONS_PER_SECOND.items()}
MAX_HOST_SECONDS = WORK_SECONDS  # the privacy accounting, on the host, before the program
# what the declarations count, measured on this project's CPU runs (jfed run ... --json -, its
# run_seconds): a client's fixed work per round (its keys, gathers, the engine's streaming), one
# normal or uniform draw, and a multiply-add inside a large matrix product (XLA ran the LDP-FL
# CNN's products at 2e11 flop/s on CPU, bench/results/ldp_fl_cpu.json: a tenth of an operation)
CLIENT_OPERATIONS = 1000
DRAW_OPERATIONS = 100
MATMUL_OPERATIONS = 0.1

# dp-accounting's privacy loss distributions (PLD), measured here: a composed PLD keeps less
# than +-10 standard deviations of the privacy loss (its tail bounds), on a grid of the
# accountant's discretization interval. One Gaussian composition (no sampling) held 1.2 kB and
# took up to 9 us per grid point (16 M points: 19 GB, 153 s); a Poisson-subsampled one 100 B
# and 0.5 us (6.8 M points: 0.66 GB, 3.6 s). Composing many steps of a narrow one costs time
# of its own, growing faster than the steps (q = 1/47, multiplier 50: 2.5e6 steps 2 s, 2.5e7
# steps 74 s, 2.5e8 steps over 250 s). A calibration evaluates about 30 of them.
PLD_TAIL_STDS = 10.0
PLD_BYTES = {"gaussian": 1200, "poisson": 150}
PLD_SECONDS = {"gaussian": 1e-5, "poisson": 1e-6}
PLD_BUILD_SECONDS = 5e-6  # per point of one subsampled step's grid (3.6 M points: 19 s)
PLD_STEP_SECONDS = 1e-6  # per composed step, times sqrt(steps / 10^6)
PLD_EVALUATIONS = 30
PLD_DISCRETIZATION = 1e-4  # dp-accounting's default interval, and jfed's PLD accountant's
# a sweep's own work per run on the host: its configuration, record, row and evaluation (the
# one-shot estimator on modechoice: 2 eps x 2 seeds in 0.05 s of rows beyond the program)
ROW_SECONDS = 0.02


class CostPlan(NamedTuple):
    """What a cost depends on beyond the configuration.

    Attributes:
      chunk: clients vmapped at once (the engine plan's ``chunk_size``).
      shared: the eps of a sweep share their draws (the modulated messages double).
      table_on_device: a per-client state table is held on the device (``False``: in host
        memory or on disk, ``--client-state host|disk``; only the cohort's rows reach it).
    """

    chunk: int
    shared: bool = False
    table_on_device: bool = True


@dataclass(frozen=True)
class Cost:
    """A run's estimated peak memory and work.

    Attributes:
      memory: bytes of the arrays held at once on the device (the host's on CPU).
      work: scalar operations (draws, multiply-adds) over the whole run, on the device.
      sizes: the integer fields that scale it, most decisive first (what a refusal may name).
      host_memory: bytes the host holds before the program runs (the privacy accounting).
      host_seconds: seconds the host works before the program runs.
      hint: what else lowers it, said in a refusal (e.g. ``"--accountant rdp answers at once"``).
      client_table: bytes of the per-client state table (every client's rows), counted in
        ``memory`` only when ``table_on_device``.
      table_on_device: whether the table is held on the device.
    """

    memory: int
    work: int
    sizes: tuple[str, ...] = ()
    host_memory: int = 0
    host_seconds: float = 0.0
    hint: str = ""
    client_table: int = 0
    table_on_device: bool = True

    def plus_host(self, host: Cost) -> Cost:
        """This device cost with ``host``'s accounting beside it (the larger of the two)."""
        return dataclasses.replace(
            self,
            host_memory=max(self.host_memory, host.host_memory),
            host_seconds=self.host_seconds + host.host_seconds,
            hint=self.hint or host.hint,
        )


# ------------------------------------------------------------------- privacy accounting (PLD)


def _pld_grid(
    noise_multiplier: float, steps: int, sampling_rate: float, replace_one: bool
) -> tuple[float, float]:
    """``(one step's loss range, the composed range)`` of the PLD (:func:`pld_points`)."""
    z = noise_multiplier / (2.0 if replace_one else 1.0)
    mu2 = 1.0 / z**2
    q = min(1.0, sampling_rate)
    top = mu2 / 2.0 + PLD_TAIL_STDS / z  # the largest loss of one step kept
    if q >= 1.0:
        variance, single = mu2, 2.0 * PLD_TAIL_STDS / z
    else:
        mixture = q * mu2 + q * (1.0 - q) * mu2**2 / 4.0
        variance = min(mixture, q * q * math.expm1(min(mu2, 700.0)))
        # log(1 + q (e^top - 1)), written to stay finite for a large top
        raised = math.log1p(q * math.expm1(top)) if top < 700.0 else math.log(q) + top
        single = raised - math.log1p(-q)
    composed = 2.0 * PLD_TAIL_STDS * math.sqrt(steps * variance) + single
    return single, min(composed, steps * single)


def pld_points(
    noise_multiplier: float,
    steps: int,
    sampling_rate: float = 1.0,
    discretization: float = PLD_DISCRETIZATION,
    replace_one: bool = False,
) -> float:
    """Grid points of the PLD of ``steps`` composed Gaussian steps (Poisson-subsampled at
    ``sampling_rate`` < 1), within about a factor 2 above what dp-accounting holds (checked
    against it from 6e4 to 2e7 points).

    The privacy loss of one step with multiplier z (mu = 1 / z; replace-one halves z) has
    variance mu^2 without sampling; with sampling q, the smaller of the mixture's
    ``q mu^2 + q (1 - q) mu^4 / 4`` and ``q^2 (e^(mu^2) - 1)`` (small q). The composition keeps
    about :data:`PLD_TAIL_STDS` standard deviations on each side, plus one step's own range,
    and never more than ``steps`` times that range.
    """
    return _pld_grid(noise_multiplier, steps, sampling_rate, replace_one)[1] / discretization


def _pld_kind(sampling_rate: float) -> str:
    return "gaussian" if sampling_rate >= 1.0 else "poisson"


def _pld_seconds(
    noise_multiplier: float, steps: int, sampling_rate: float, discretization: float,
    replace_one: bool,
) -> float:  # fmt: skip
    """Seconds of one PLD evaluation: one step's grid built, the composed grid, and the
    composition of its steps."""
    single, composed = _pld_grid(noise_multiplier, steps, sampling_rate, replace_one)
    grids = single * PLD_BUILD_SECONDS + composed * PLD_SECONDS[_pld_kind(sampling_rate)]
    return grids / discretization + _composing_seconds(steps)


def _composing_seconds(steps: int) -> float:
    return PLD_STEP_SECONDS * steps * math.sqrt(steps / 10**6)


def pld_cost(
    noise_multiplier: float,
    steps: int,
    sampling_rate: float = 1.0,
    discretization: float = PLD_DISCRETIZATION,
    replace_one: bool = False,
    evaluations: int = 1,
    hint: str = "--accountant rdp answers at once",
) -> Cost:
    """The host's cost of composing ``steps`` Gaussian steps by dp-accounting's PLD
    (:func:`pld_points`), ``evaluations`` times."""
    points = pld_points(noise_multiplier, steps, sampling_rate, discretization, replace_one)
    kind = _pld_kind(sampling_rate)
    return Cost(
        0, 0, host_memory=int(points * PLD_BYTES[kind]),
        host_seconds=evaluations
        * _pld_seconds(noise_multiplier, steps, sampling_rate, discretization, replace_one),
        hint=hint,
    )  # fmt: skip


def pld_calibration_cost(
    steps: int,
    sampling_rate: float,
    epsilon: float,
    delta: float,
    discretization: float = PLD_DISCRETIZATION,
    replace_one: bool = False,
    calibrations: int = 1,
    hint: str = "--accountant rdp answers at once",
) -> Cost:
    """The host's cost of calibrating a noise multiplier to (eps, delta) by PLD over ``steps``
    steps (``calibrations`` times, e.g. once per distinct silo size).

    The search starts at multiplier 1 (:func:`jfed.privacy.accounting.bracket`), then
    evaluates near the answer, where the composed loss spreads about eps / z_delta
    (eps = its mean + z_delta standard deviations, z_delta = sqrt(2 ln(1 / delta))): at most
    twice that at half the answer's noise.
    """
    start = pld_points(1.0, steps, sampling_rate, discretization, replace_one)
    spread = epsilon / math.sqrt(2.0 * math.log(1.0 / delta))
    near = 2.0 * (2.0 * PLD_TAIL_STDS * spread) / discretization
    kind = _pld_kind(sampling_rate)
    near_seconds = near * (PLD_BUILD_SECONDS + PLD_SECONDS[kind]) + _composing_seconds(steps)
    seconds = (
        _pld_seconds(1.0, steps, sampling_rate, discretization, replace_one)
        + PLD_EVALUATIONS * near_seconds
    )
    return Cost(
        0, 0, host_memory=int(max(start, near) * PLD_BYTES[kind]),
        host_seconds=calibrations * seconds, hint=hint,
    )  # fmt: skip


# ------------------------------------------------------------------------------- the checks


def estimate(
    config: Config, chunk: int, shared: bool = False, table_on_device: bool = True
) -> Cost | None:
    """The cost of one run of ``config`` with ``chunk`` clients vmapped at once (``shared``: a
    sweep's eps share their draws; ``table_on_device``: where a per-client state table is), from
    its method's ``cost`` hook; ``None`` when the method declares none."""
    from jfed.methods.registry import method_of

    hook = method_of(config).cost
    return None if hook is None else hook(config, CostPlan(chunk, shared, table_on_device))


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


@dataclass(frozen=True)
class Budget:
    """What a run may use: device bytes and operations, host bytes and seconds."""

    memory: int
    work: int = MAX_WORK["accelerator"]
    host_memory: int | None = None  # None: the host's available memory now
    host_seconds: float = MAX_HOST_SECONDS

    def excess(self, cost: Cost) -> str | None:
        """What ``cost`` exceeds, in words (with its hint where the host's accounting is what
        exceeds), or ``None`` when it fits."""
        host_memory = available_memory() if self.host_memory is None else self.host_memory
        hint = f" ({cost.hint})" if cost.hint else ""
        if cost.memory > self.memory:
            table = ""
            if cost.client_table and cost.table_on_device:
                table = (f" ({_bytes(cost.client_table)} of them the per-client state table: "
                         "--client-state host or disk keeps it off the device)")  # fmt: skip
            return f"about {_bytes(cost.memory)} of arrays, {_bytes(self.memory)} is free{table}"
        if cost.host_memory > host_memory:
            return (
                f"about {_bytes(cost.host_memory)} of host memory for its privacy accounting, "
                f"{_bytes(host_memory)} is free{hint}"
            )
        if cost.work > self.work:
            return (
                f"about {cost.work:.2g} operations, more than {_duration(WORK_SECONDS)}'s work "
                f"here ({self.work:.2g})"
            )
        if cost.host_seconds > self.host_seconds:
            return (
                f"about {_duration(cost.host_seconds)} of privacy accounting on the host, more "
                f"than {_duration(self.host_seconds)}{hint}"
            )
        return None


def _duration(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = seconds / size
            return f"{count:.2g} {unit}{'' if count == 1 else 's'}"
    return f"{seconds:.2g} s"


def largest_integer(fits: Callable[[int], bool], low: int, high: int) -> int | None:
    """The largest integer in [low, high] for which ``fits`` holds (costs grow with every size:
    it holds below any value where it holds), by bisection; ``None`` if not even ``low`` does."""
    if not fits(low):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


def _largest_fitting(config: Config, name: str, fits: Callable[[Config], bool]) -> int | None:
    """The largest value of the integer field ``name`` below its current one with which
    ``config`` fits, or ``None`` if not even the field's smallest allowed value does."""
    field = field_map(config)[name]
    low = int(field.range.low) if field.range is not None else 1
    high = int(getattr(config, name)) - 1
    return largest_integer(
        lambda value: fits(dataclasses.replace(config, **{name: value})), low, max(low, high)
    )


def _refuse_epsilon(config: Config, what: str, fits: Callable[[Config], bool]) -> None:
    """Refuse ``config`` naming ``--epsilon`` and the largest eps that fits (3 digits), where a
    smaller eps makes it fit: a privacy accounting's cost grows with eps (a numerical
    calibration searches a wider loss range; a formula's noise shrinks as 1 / eps, and the
    PLD of its exact eps for reference grows). Nothing if no smaller eps fits."""
    epsilon = getattr(config, "epsilon", None)
    field = field_map(config).get("epsilon")
    if not isinstance(epsilon, float) or field is None or field.range is None:
        return
    low = max(float(field.range.low), 1e-6)

    def fits_at(value: float) -> bool:
        changes: dict[str, Any] = {"epsilon": value}
        return fits(dataclasses.replace(config, **changes))

    if epsilon <= low or not fits_at(low):
        return
    below, above = math.log(low), math.log(epsilon)  # fits at e^below, not at e^above
    while above - below > 1e-3:
        middle = 0.5 * (below + above)
        below, above = (middle, above) if fits_at(math.exp(middle)) else (below, middle)
    raise UsageError(
        f"--epsilon={epsilon:g} needs {what}: the largest --epsilon that fits is about "
        f"{float(f'{math.exp(below):.3g}'):g}"
    )


def _bytes(value: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value / 2**20:.3g} MiB"


def flag(name: str) -> str:
    """``average_last`` -> ``--average-last``."""
    return "--" + name.replace("_", "-")


def check_fits(
    config: Config,
    chunk: int,
    memory: int,
    shared: bool = False,
    given: tuple[str, ...] = (),
    max_work: int = MAX_WORK["accelerator"],
    host_memory: int | None = None,
    max_host_seconds: float = MAX_HOST_SECONDS,
    table_on_device: bool = True,
) -> Cost | None:
    """Refuse (``UsageError``, one line naming a flag and the largest value of it that fits) a
    configuration whose arrays need more than ``memory`` bytes, whose work exceeds
    ``max_work``, or whose privacy accounting exceeds the host's memory or
    ``max_host_seconds``; returns its cost otherwise (``None`` for a method without a hook).

    Args:
      config: the run's configuration (for a sweep: its largest sizes).
      chunk: clients vmapped at once (the engine plan's ``chunk_size``).
      memory: bytes free for the run's arrays (:func:`memory_budget`).
      shared: a sweep's eps share their draws.
      given: the fields the user gave, named first in a refusal.
      max_work: operations allowed (:func:`work_budget`).
      host_memory: bytes free on the host (``None``: :func:`available_memory` now).
      max_host_seconds: seconds of host accounting allowed.
      table_on_device: a per-client state table is counted in the device's memory (``False``:
        it is in host memory or on disk).
    """
    budget = Budget(memory, max_work, host_memory, max_host_seconds)
    cost = estimate(config, chunk, shared, table_on_device)
    what = None if cost is None else budget.excess(cost)
    if what is None:
        return cost
    assert cost is not None  # an excess was found, so there is a cost

    def fits(candidate: Config) -> bool:
        found = estimate(candidate, chunk, shared, table_on_device)
        return found is not None and budget.excess(found) is None

    order = [n for n in cost.sizes if n in given] + [n for n in cost.sizes if n not in given]
    order = [n for n in order if getattr(config, n, None) is not None]
    for name in order:
        largest = _largest_fitting(config, name, fits)
        if largest is not None:
            raise UsageError(
                f"{flag(name)}={getattr(config, name)} needs {what}: the largest {flag(name)} "
                f"that fits is {largest}"
            )
    _refuse_epsilon(config, what, fits)  # no size alone: a large eps may be the cause
    flags = ", ".join(flag(n) for n in order) or "its sizes"
    raise UsageError(
        f"this configuration needs {what}, and no smaller value of one of {flags} alone makes "
        f"it fit{f' ({cost.hint})' if cost.hint else ''}"
    )


def sweep_cost(cost: Cost | None, runs: int, calibrations: int) -> Cost:
    """A sweep of ``runs`` runs, none costlier than ``cost`` (``None``: a method without a
    hook, of which only the rows are counted), whose privacy is calibrated ``calibrations``
    times (one per eps and calibrated grid point): the device's work adds up over the runs, its
    memory is one run's (or one slice's), the host works :data:`ROW_SECONDS` per run beside."""
    cost = cost if cost is not None else Cost(0, 0)
    return dataclasses.replace(
        cost, work=cost.work * runs,
        host_seconds=cost.host_seconds * calibrations + ROW_SECONDS * runs,
    )  # fmt: skip
