"""Sweep results as tables: ``runs.parquet`` beside ``runs.jsonl`` (native list columns for the
curves, structs for the nested fields), and :func:`load_results`, which merges the runs of one or
several sweep folders into one pandas DataFrame.

    import jfed
    frame = jfed.load_results(["results/iterative", "results/one-shot"])
    frame.groupby(["method", "epsilon"]).test_r2.median()
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from jfed._io import replacing
from jfed._validation import UsageError
from jfed.report.rows import read_rows

PARQUET = "runs.parquet"
JSONL = "runs.jsonl"


def write_parquet(rows: list[dict], path: str) -> None:
    """Write the rows (records of :mod:`jfed.sweep.schema`) as a Parquet table, whole or not at
    all (:func:`jfed._io.replacing`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = list(dict.fromkeys(k for row in rows for k in row))
    table = pa.Table.from_pylist(rows)
    table = table.select([c for c in columns if c in table.column_names])
    with replacing(path, "wb") as handle:
        pq.write_table(table, handle)


def _files(source: str) -> list[str]:
    if os.path.isdir(source):
        for name in (PARQUET, JSONL):
            if os.path.exists(os.path.join(source, name)):
                return [_regular(os.path.join(source, name))]
        raise UsageError(f"no {PARQUET} or {JSONL} in the folder {source}")
    if not os.path.exists(source):
        raise UsageError(f"no such sweep folder or results file: {source}")
    if not source.endswith((".jsonl", ".parquet")):
        raise UsageError(f"expected a sweep folder, a .jsonl or a .parquet file, got {source}")
    return [_regular(source)]


def _regular(path: str) -> str:
    if not os.path.isfile(path):  # a FIFO would block the reader
        raise UsageError(f"{path} is not a regular file: jfed reads only files")
    return path


def load_results(sources: str | Iterable[str]):
    """The runs of one or several sweeps as one ``pandas.DataFrame``, a row per run.

    Args:
      sources: sweep folders (their ``runs.parquet``, else ``runs.jsonl``) or result files.

    Returns:
      Every record field as a column (curves as lists), plus ``source``: the folder or file the
      row came from. Columns a sweep lacks are missing values in its rows.

    Raises:
      UsageError: no source, or one that is missing, not a sweep's, or not a regular file.
    """
    import pandas as pd

    sources = [sources] if isinstance(sources, str) else list(sources)
    if not sources:
        raise UsageError("expected at least one sweep folder or results file")
    frames = []
    for source in sources:
        for path in _files(source):
            if path.endswith(".parquet"):
                frame = pd.read_parquet(path)
            else:
                frame = pd.DataFrame(read_rows(path))
            frames.append(frame.assign(source=source))
    return pd.concat(frames, ignore_index=True, sort=False)
