"""Sweeps: eps x seeds x tunable fields vmapped in one compiled program, resumable, tuned.

from jfed.methods import ModulatedOneShot
from jfed.methods.running import experiment
from jfed.sweep import configurations, run_sweep, tuned_table
base = ModulatedOneShot(dataset="fair")
configs = configurations(base, [0.5, 1, 2], 5, {"ridge": [0.5, 1, 2]})
rows = run_sweep(experiment(base), configs, "runs.jsonl")
table = tuned_table(rows, ("ridge",), rule="fixed")
"""

from jfed.sweep.runner import config_key, configurations, read_rows, run_sweep
from jfed.sweep.tuning import RULES, choose, tuned_table

__all__ = [
    "RULES",
    "choose",
    "config_key",
    "configurations",
    "read_rows",
    "run_sweep",
    "tuned_table",
]
