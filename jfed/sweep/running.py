"""Run a method's configuration, or a grid of them, through the one runner
(:func:`jfed.sweep.runner.run_sweep`): a run is a sweep of one configuration."""

from __future__ import annotations

import os
from collections.abc import Iterable

from jfed._validation import UsageError
from jfed.engine import ExecutionPlan
from jfed.methods import Config, build_experiment
from jfed.sweep.checkpoint import Checkpoints
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
    checkpoint_every: int | None = None,
    checkpoint_path: str | None = None,
    resume: bool = False,
    keep_checkpoints: bool = False,
    **data,
) -> dict:
    """Calibrate, compile, run and evaluate one configuration; return its record
    (:mod:`jfed.sweep.schema`).

    Args:
      config: a method's configuration, e.g. ``ModulatedIterative(dataset="co2", epsilon=2)``.
      plan: engine batching plan (default: sized for the backend).
      progress: a progress bar over rounds, from inside the compiled scan (default: when stderr
        is a terminal).
      checkpoint_every: save the run's state to ``checkpoint_path`` every so many rounds
        (:mod:`jfed.sweep.checkpoint`; default: never); the record is the same bits.
      checkpoint_path: the checkpoint file (e.g. ``"out/run.checkpoint.npz"``).
      resume: continue from the checkpoint at ``checkpoint_path`` where there is one (refused
        when it is one of another configuration); without it, one found there is refused.
      keep_checkpoints: keep the checkpoint of the finished run (default: removed).
      data: ``task=`` / ``reference=`` to reuse loaded data (see
        :func:`jfed.methods.experiment`).

    Raises:
      TypeError: ``config`` is not a method's configuration (a method's name, say).
      UsageError: checkpoint options without a ``checkpoint_path``, or a checkpoint refused.

    Example:
      record = jfed.run(config, checkpoint_every=50, checkpoint_path="out/run.checkpoint.npz",
                        resume=True)  # continues a stopped run, or starts one
    """
    config = _configuration(config, "jfed.run")
    checkpoints = checkpoints_of(checkpoint_every, checkpoint_path, resume, keep_checkpoints)
    (record,) = run_sweep(build_experiment(config, **data), [config], None, plan=plan,
                          progress=progress, share_noise=False,
                          checkpoints=checkpoints)  # fmt: skip
    return record


def checkpoints_of(
    every: int | None, path: str | None, resume: bool = False, keep: bool = False
) -> Checkpoints | None:
    """The :class:`~jfed.sweep.checkpoint.Checkpoints` of :func:`run`'s arguments (``None``
    when ``every`` is); ``UsageError`` when a checkpoint option comes without both."""
    if every is None:
        if resume or keep or path is not None:
            raise UsageError(
                "resume / keep_checkpoints / checkpoint_path need checkpoint_every (rounds "
                "between two checkpoints)"
            )
        return None
    if path is None:
        raise UsageError("checkpoint_every needs checkpoint_path (the checkpoint file)")
    return Checkpoints(path, every, resume=resume, keep=keep)


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
