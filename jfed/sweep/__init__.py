"""Sweeps: eps x seeds x hyper-parameters vmapped in one compiled program, resumable, tuned.

from jfed.sweep import RegressionAdapter, configurations, run_sweep, tuned_table
adapter = RegressionAdapter("modulated-one-shot", load_regression("fair"))
rows = run_sweep(adapter, configurations([0.5, 1, 2], 5, {"ridge": [0.5, 1, 2]}), "runs.jsonl")
table = tuned_table(rows, ("ridge",), rule="fixed")
"""

from jfed.sweep.adapters import SWEEP_ALGORITHMS, RegressionAdapter
from jfed.sweep.runner import config_key, configurations, read_rows, run_sweep
from jfed.sweep.tuning import RULES, choose, tuned_table

__all__ = [
    "RULES",
    "SWEEP_ALGORITHMS",
    "RegressionAdapter",
    "choose",
    "config_key",
    "configurations",
    "read_rows",
    "run_sweep",
    "tuned_table",
]
