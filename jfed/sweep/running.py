"""Run a method's configuration, or a grid of them, through the one runner
(:func:`jfed.sweep.runner.run_sweep`): a run is a sweep of one configuration."""

from __future__ import annotations

import os
from collections.abc import Iterable

from jfed.engine import ExecutionPlan
from jfed.methods import Config, build_experiment
from jfed.sweep.runner import configurations, run_sweep


def _configuration(config: object, caller: str) -> Config:
    """``config`` if it is a method's configuration; else a ``TypeError`` saying how to build one
    (a method's name given where its configuration is expected is the usual slip)."""
    if isinstance(config, Config):
        return config
    example = f"jfed.methods.method({config!r}).config(...)" if isinstance(config, str) else (
        "jfed.methods.method('dp-fedavg').config(epsilon=2)")  # fmt: skip
    raise TypeError(
        f"{caller} takes a method's configuration (a jfed.methods.Config), got "
        f"{type(config).__name__} {config!r:.60}: build one with {example}"
    )


def run(
    config: Config,
    plan: ExecutionPlan | None = None,
    progress: bool | None = None,
    **data,
) -> dict:
    """Calibrate, compile, run and evaluate one configuration; return its record
    (:mod:`jfed.sweep.schema`).

    Args:
      config: a method's configuration, e.g. ``ModulatedIterative(dataset="co2", epsilon=2)``.
      plan: engine batching plan (default: sized for the backend).
      progress: a progress bar over rounds, from inside the compiled scan (default: when stderr
        is a terminal).
      data: ``task=`` / ``reference=`` to reuse loaded data (see
        :func:`jfed.methods.experiment`).

    Raises:
      TypeError: ``config`` is not a method's configuration (a method's name, say).
    """
    config = _configuration(config, "jfed.run")
    (record,) = run_sweep(build_experiment(config, **data), [config], None, plan=plan,
                          progress=progress, share_noise=False)  # fmt: skip
    return record


def run_grid(
    base: Config,
    epsilons: Iterable[float] | None = None,
    seeds: int | Iterable[int] = 1,
    grid: dict[str, Iterable[float]] | None = None,
    out: str | None = None,
    resume: bool = False,
    **options,
) -> list[dict]:
    """Every configuration of eps x ``grid`` x seeds on the fixed fields of ``base``, in one
    compiled program; rows written to ``out/runs.jsonl`` when ``out`` is given (``options``: see
    :func:`jfed.sweep.runner.run_sweep`)."""
    base = _configuration(base, "jfed.run_grid")
    data = {k: options.pop(k) for k in ("task", "reference") if k in options}
    configs = configurations(base, epsilons, seeds, grid)
    results = os.path.join(out, "runs.jsonl") if out is not None else None
    return run_sweep(build_experiment(base, **data), configs, results, resume=resume,
                     swept=tuple(sorted(grid or {})), **options)  # fmt: skip
