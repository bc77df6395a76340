"""Results files: JSON lines, one record per finished run (:mod:`jfed.sweep.schema` says what a
record holds), appended and flushed as runs finish, read back whole or up to a torn last line.

Pure JSON and the file system: no JAX, nothing of the sweep, so reports and tables
(:mod:`jfed.report.results`) read what the runner writes without importing it.
"""

from __future__ import annotations

import json
import os

from jfed.report.record import json_safe

ROW_FIELDS = frozenset({"config_key", "method", "epsilon"})  # every row has them


def from_json(value):
    """The inverse of :func:`jfed.report.record.json_safe` for the floats it spelled as strings."""
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        return float(value)
    if isinstance(value, dict):
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v) for v in value]
    return value


def dumps_row(record: dict) -> str:
    """One JSON line (inf and nan spelled as strings, as in every record jfed writes)."""
    return json.dumps(json_safe(record))


def read_rows(path: str) -> list[dict]:
    """All complete rows of a JSON-lines results file, one per configuration (the first written;
    a torn last line is ignored). Raises ``ValueError`` for a file that is not jfed's."""
    if not os.path.exists(path):
        return []
    rows, seen = [], set()
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by an interruption; its configuration re-runs
            if not isinstance(row, dict) or not ROW_FIELDS <= set(row):
                raise ValueError(
                    f"{path} line {number} is not a jfed sweep row (expected the fields "
                    "config_key, method, epsilon)"
                )
            if row["config_key"] not in seen:
                seen.add(row["config_key"])
                rows.append(from_json(row))
    return rows


def append_rows(path: str, rows: list[dict]) -> None:
    """Append ``rows`` to ``path`` as JSON lines, flushed and synced to disk before returning
    (a line torn by an earlier interruption is ended first, so new rows stay whole)."""
    if os.path.exists(path) and os.path.getsize(path) > 0:
        with open(path, "rb") as handle:
            handle.seek(-1, os.SEEK_END)
            torn = handle.read(1) != b"\n"
        if torn:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write("\n")
    with open(path, "a", encoding="utf-8") as handle:
        for row in rows:
            handle.write(dumps_row(row) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
