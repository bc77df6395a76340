"""Choosing hyper-parameters on the validation split, as the source papers do.

Two rules, recorded in every chosen row as ``choice_rule`` with the statistic used:

- ``per-eps``: for each (method, eps), the hyper-parameters with the best validation
  statistic across seeds;
- ``fixed``: for each algorithm, ONE setting for all eps, the one with the best validation
  statistic over eps and seeds (the modulated-learning paper's rule).

The statistic is the median by default: validation R^2 of the one-shot estimator is heavy-tailed
(a near-singular ridge solve gives R^2 of -800 in one run where the median is -0.02), so a mean
lets a few outliers choose. ``mean`` and ``trimmed-mean`` (10% cut at each end) are options.

A choice on the edge of its grid says the grid was too narrow: :func:`edge_choices` finds them and
:func:`sweep_until_interior` extends the grid beyond the edge and sweeps again (the sweep resumes,
so only the new values run) until the choice is interior, the allowed range ends, or the
extensions run out; what remains on an edge is reported.

Only the validation metric is read to choose; the test metric is reported for the choice.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable

import numpy as np
from scipy.stats import trim_mean

from jfed._validation import UsageError
from jfed.catalog import SELECTION_STATISTICS, TUNING_RULES

RULES = TUNING_RULES
STATISTICS = SELECTION_STATISTICS
TRIM = 0.1  # the trimmed mean's cut at each end


def _statistic(values: list[float], statistic: str) -> float:
    if statistic == "median":
        return float(np.median(values))
    if statistic == "mean":
        return float(np.mean(values))
    if statistic == "trimmed-mean":
        return float(trim_mean(values, TRIM))
    raise UsageError(f"unknown selection statistic {statistic!r}; expected one of {STATISTICS}")


IDENTITY = ("config_key", "method", "epsilon", "seed", "dataset")


def as_number(value) -> float:
    """A row's metric as a float: NaN for what is not a finite-sized number (``None`` where a
    run's metric was not finite, text, a list, a boolean, an integer beyond a float's range)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    try:
        return float(value)
    except OverflowError:
        return math.nan


def swept_names(rows: list[dict]) -> tuple[str, ...]:
    """The tunable fields (of the rows' methods' declarations) whose value varies across rows."""
    from jfed.methods import method
    from jfed.methods.fields import fields_of

    tunable = {
        f.name for name in {row["method"] for row in rows}
        for f in fields_of(method(name).config) if f.tunable
    }  # fmt: skip
    values: dict = defaultdict(set)
    for row in rows:
        for name in tunable & set(row):
            values[name].add(str(row[name]))
    return tuple(sorted(name for name, seen in values.items() if len(seen) > 1))


def choose(
    rows: list[dict],
    hyper: tuple[str, ...],
    rule: str = "fixed",
    validation: str = "validation_r2",
    maximize: bool = True,
    statistic: str = "median",
) -> dict:
    """``{(dataset, method, eps): hyper-values tuple}`` chosen by ``rule`` from validation
    only (``dataset`` is ``None`` in rows without one), scoring each setting by ``statistic``
    of its validation values (over seeds, and over eps for the ``fixed`` rule)."""
    if rule not in RULES:
        raise UsageError(f"unknown choice rule {rule!r}; expected one of {RULES}")
    sign = 1.0 if maximize else -1.0
    scores: dict = defaultdict(list)
    for row in rows:
        value = as_number(row[validation])
        value = value if math.isfinite(value) else -math.inf * sign
        combo = tuple(row[h] for h in hyper)
        scores[(_group(row, rule), combo)].append(sign * value)
    best: dict = {}
    for (group, combo), values in scores.items():
        score = _statistic(values, statistic)
        if group not in best or score > best[group][0]:
            best[group] = (score, combo)
    return {_group(row, "per-eps"): best[_group(row, rule)][1] for row in rows}


def _group(row: dict, rule: str) -> tuple:
    """What one choice covers: (data set, method[, eps])."""
    base = (row.get("dataset"), row["method"])
    return (*base, row["epsilon"]) if rule == "per-eps" else base


def _sortable(values: tuple) -> tuple:
    """Grid values in numeric order (numbers before anything else)."""
    flat = values[0] if values else ()
    return tuple((0, v, "") if isinstance(v, int | float) else (1, 0, str(v)) for v in flat)


def tuned_table(
    rows: list[dict],
    hyper: tuple[str, ...],
    rule: str = "fixed",
    validation: str = "validation_r2",
    test: str = "test_r2",
    maximize: bool = True,
    statistic: str = "median",
) -> list[dict]:
    """One row per (method, eps): the chosen hyper-parameters and the test metric over seeds
    (mean, standard error, seeds), with ``choice_rule`` recorded.

    A method with nothing to choose (``validation`` None: the swept fields are the experiment's
    design, e.g. the sites and units of an estimation study) gets one row per (method, eps,
    swept values)."""
    groups: dict = defaultdict(list)
    if validation is None:
        for row in rows:
            groups[(*_group(row, "per-eps"), tuple(row[h] for h in hyper))].append(row)
        rule_text = "none (every setting reported)"
    else:
        chosen = choose(rows, hyper, rule, validation, maximize, statistic)
        for row in rows:
            key = _group(row, "per-eps")
            if tuple(row[h] for h in hyper) == chosen[key]:
                groups[key].append(row)
        rule_text = f"{rule} on {validation} ({statistic})"
    table = []
    for (_, method, epsilon, *_), members in sorted(
        groups.items(), key=lambda kv: (str(kv[0][0]), kv[0][1], kv[0][2], _sortable(kv[0][3:]))
    ):
        values = np.array([as_number(m[test]) for m in members], np.float64)
        first = members[0]
        table.append(
            {
                "method": method,
                "dataset": first.get("dataset"),
                "epsilon": epsilon,
                "delta": first.get("delta"),
                "accountant": first.get("accountant"),
                "notion": first.get("notion"),
                **{h: first[h] for h in hyper},
                "choice_rule": rule_text,
                f"{test}_mean": float(values.mean()),
                f"{test}_se": float(values.std(ddof=1) / np.sqrt(len(values)))
                if len(values) > 1
                else 0.0,
                "seeds": len(values),
                "reference": first.get("ols_r2"),
            }
        )
    return table


def edge_choices(rows: list[dict], table: list[dict], hyper: tuple[str, ...]) -> list[dict]:
    """Chosen values that sit on the edge of their swept values (two or more swept), one entry
    per (data set, method, name, value): ``{"dataset", "method", "name", "value", "side",
    "epsilons"}``."""
    swept: dict = defaultdict(set)
    for row in rows:
        for name in hyper:
            swept[(row.get("dataset"), row["method"], name)].add(row[name])
    found: dict = {}
    for row in table:
        for name in hyper:
            values = sorted(swept[(row.get("dataset"), row["method"], name)])
            if len(values) < 2 or row[name] not in (values[0], values[-1]):
                continue
            side = "upper" if row[name] == values[-1] else "lower"
            key = (row.get("dataset"), row["method"], name, row[name])
            entry = found.setdefault(key, {
                "dataset": key[0], "method": key[1], "name": name, "value": row[name],
                "side": side, "epsilons": [],
            })  # fmt: skip
            entry["epsilons"].append(row["epsilon"])
    return list(found.values())


def beyond_edge(values: list[float], side: str) -> float:
    """The next grid value past an edge: a geometric step for positive grids (the ratio of the
    two outermost values), else an arithmetic one."""
    values = sorted(values)
    edge, neighbour = (values[-1], values[-2]) if side == "upper" else (values[0], values[1])
    if edge > 0 and neighbour > 0:
        return edge * edge / neighbour
    return 2 * edge - neighbour


def sweep_until_interior(
    run_grid: Callable[[dict], list[dict]],
    grid: dict[str, list[float]],
    tune: Callable[[list[dict]], list[dict]],
    allowed: Callable[[str, float], bool] = lambda name, value: True,
    max_extensions: int = 3,
) -> tuple[list[dict], list[dict], list[str]]:
    """Sweep ``grid``, tune, and extend the grid past every edge choice, up to
    ``max_extensions`` times.

    Args:
      run_grid: runs (resumably) every configuration of a grid and returns all its rows.
      grid: the swept values per name.
      tune: rows -> tuned table (:func:`tuned_table` with the sweep's rule and metrics).
      allowed: whether a value is in its name's allowed range (an edge at the end of the range
        is not extended).
      max_extensions: how many times the grid may grow.

    Returns:
      ``(rows, table, notes)``: the notes say, in words, what was extended and what choice is
      still on an edge.
    """
    grid = {name: sorted(values) for name, values in grid.items()}
    notes: list[str] = []
    for attempt in range(max_extensions + 1):
        rows = run_grid(grid)
        table = tune(rows)
        edges = edge_choices(rows, table, tuple(grid))
        grown = {name: list(values) for name, values in grid.items()}
        for edge in edges:
            where = f"{edge['method']}" + (f" on {edge['dataset']}" if edge["dataset"] else "")
            value = beyond_edge(grown[edge["name"]], edge["side"])
            if attempt == max_extensions or not allowed(edge["name"], value):
                reason = (
                    "the extensions ran out"
                    if attempt == max_extensions
                    else f"{value:g} is outside the allowed range"
                )
                notes.append(
                    f"{where}: the choice {edge['name']} = {edge['value']:g} is on the "
                    f"{edge['side']} edge of the grid ({reason})"
                )
            elif value not in grown[edge["name"]]:
                grown[edge["name"]] = sorted([*grown[edge["name"]], value])
                notes.append(
                    f"{where}: {edge['name']} = {edge['value']:g} was on the {edge['side']} edge; "
                    f"the grid grows to {value:g}"
                )
        if grown == grid:
            break
        grid = grown
    return rows, table, list(dict.fromkeys(notes))  # a boundary is noted once
