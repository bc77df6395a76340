"""Choosing hyper-parameters on the validation split, as the source papers do.

Two rules, recorded in every chosen row as ``choice_rule``:

- ``per-eps``: for each (algorithm, eps), the hyper-parameters with the best mean validation
  metric across seeds;
- ``fixed``: for each algorithm, ONE setting for all eps, the one with the best validation metric
  averaged over eps and seeds (the modulated-learning paper's rule).

Only the validation metric is read to choose; the test metric is reported for the choice.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from jfed.catalog import TUNING_RULES

RULES = TUNING_RULES
IDENTITY = ("config_key", "algorithm", "epsilon", "seed", "dataset")


def hyper_names(rows: list[dict], known: tuple[str, ...]) -> tuple[str, ...]:
    """The swept hyper-parameter fields present in the rows."""
    return tuple(sorted({k for row in rows for k in row if k in known}))


def choose(
    rows: list[dict],
    hyper: tuple[str, ...],
    rule: str = "fixed",
    validation: str = "validation_r2",
    maximize: bool = True,
) -> dict:
    """``{(dataset, algorithm, eps): hyper-values tuple}`` chosen by ``rule`` from validation
    only (``dataset`` is ``None`` in rows without one)."""
    if rule not in RULES:
        raise ValueError(f"unknown choice rule {rule!r}; expected one of {RULES}")
    sign = 1.0 if maximize else -1.0
    scores: dict = defaultdict(list)
    for row in rows:
        value = row[validation]
        value = float(value) if value is not None and np.isfinite(value) else -np.inf * sign
        combo = tuple(row[h] for h in hyper)
        scores[(_group(row, rule), combo)].append(sign * value)
    best: dict = {}
    for (group, combo), values in scores.items():
        score = float(np.mean(values))
        if group not in best or score > best[group][0]:
            best[group] = (score, combo)
    return {_group(row, "per-eps"): best[_group(row, rule)][1] for row in rows}


def _group(row: dict, rule: str) -> tuple:
    """What one choice covers: (data set, algorithm[, eps])."""
    base = (row.get("dataset"), row["algorithm"])
    return (*base, row["epsilon"]) if rule == "per-eps" else base


def tuned_table(
    rows: list[dict],
    hyper: tuple[str, ...],
    rule: str = "fixed",
    validation: str = "validation_r2",
    test: str = "test_r2",
    maximize: bool = True,
) -> list[dict]:
    """One row per (algorithm, eps): the chosen hyper-parameters and the test metric over seeds
    (mean, standard error, seeds), with ``choice_rule`` recorded."""
    chosen = choose(rows, hyper, rule, validation, maximize)
    groups: dict = defaultdict(list)
    for row in rows:
        key = _group(row, "per-eps")
        if tuple(row[h] for h in hyper) == chosen[key]:
            groups[key].append(row)
    table = []
    for (_, algorithm, epsilon), members in sorted(
        groups.items(), key=lambda kv: (str(kv[0][0]), kv[0][1], kv[0][2])
    ):
        values = np.array([m[test] for m in members], np.float64)
        first = members[0]
        table.append(
            {
                "algorithm": algorithm,
                "dataset": first.get("dataset"),
                "epsilon": epsilon,
                "delta": first.get("delta"),
                "accountant": first.get("accountant"),
                **{h: first[h] for h in hyper},
                "choice_rule": f"{rule} on {validation}",
                f"{test}_mean": float(values.mean()),
                f"{test}_se": float(values.std(ddof=1) / np.sqrt(len(values)))
                if len(values) > 1
                else 0.0,
                "seeds": len(values),
                "reference": first.get("ols_r2"),
            }
        )
    return table
