"""Sweeps: eps x seeds x tunable fields vmapped in one compiled program, resumable, tuned.

from jfed.methods import ModulatedOneShot, build_experiment
from jfed.sweep import configurations, run_sweep, tuned_table
base = ModulatedOneShot(dataset="fair")
configs = configurations(base, [0.5, 1, 2], 5, {"ridge": [0.5, 1, 2]})
rows = run_sweep(build_experiment(base), configs, "runs.jsonl")
table = tuned_table(rows, ("ridge",), rule="fixed")

A run is a sweep of one configuration: :func:`run` and :func:`run_grid` (also ``jfed.run`` and
``jfed.run_grid``) build the experiment and call :func:`run_sweep`.
"""

from jfed.report.rows import read_rows
from jfed.sweep.runner import configurations, run_sweep
from jfed.sweep.running import run, run_grid
from jfed.sweep.schema import config_key
from jfed.sweep.tuning import RULES, choose, tuned_table

__all__ = [
    "RULES",
    "choose",
    "config_key",
    "configurations",
    "read_rows",
    "run",
    "run_grid",
    "run_sweep",
    "tuned_table",
]
