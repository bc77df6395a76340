"""Results files: JSON lines, one record per finished run (:mod:`jfed.sweep.schema` says what a
record holds), appended and synced row by row as runs finish.

Reading is strict: a line that is not text, not JSON or not a jfed row is an error naming the
file and the line, with one exception. The last line may have been cut by an interrupted write
(``kill -9`` in the middle of an append): :func:`scan_rows` reports it, :func:`read_rows` says
that it ignores it, and :func:`repair_torn_tail` removes it before a resume appends after it.

Pure JSON and the file system: no JAX, nothing of the sweep, so reports and tables
(:mod:`jfed.report.results`) read what the runner writes without importing it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import NamedTuple

from jfed._io import naming, open_append, read_regular, sync_folder, write_all
from jfed._validation import UsageError
from jfed.report.record import json_safe

ROW_FIELDS = frozenset({"config_key", "method", "epsilon"})  # every row has them


class TornLine(NamedTuple):
    """The last line of a results file, cut by an interrupted write."""

    number: int  # 1-based line number
    offset: int  # byte offset where it starts (the file's whole rows end there)
    size: int  # its bytes


class Scan(NamedTuple):
    """What a results file holds: its rows with their line numbers (the first row of each
    configuration), whether its last line is torn, and whether the file ends with a newline."""

    rows: list[tuple[int, dict]]
    torn: TornLine | None
    ends_with_newline: bool


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


def _text(path: str, number: int, raw: bytes) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\0" in text:
        raise UsageError(
            f"{path} line {number} is binary data, not a JSON line: not a jfed results file"
        )
    return text


def _is_row(row) -> bool:
    """Whether a parsed line has the fields every row has, of the types jfed writes (eps a number,
    or ``"inf"`` for a non-private run)."""
    if not isinstance(row, dict) or not ROW_FIELDS <= set(row):
        return False
    epsilon = row["epsilon"]
    number = isinstance(epsilon, int | float) and not isinstance(epsilon, bool)
    return (
        isinstance(row["config_key"], str)
        and isinstance(row["method"], str)
        and (number or epsilon in ("inf", "nan"))
    )


def _looks_torn(text: str) -> bool:
    """Whether ``text`` can be the start of a row whose write was cut (an unfinished object)."""
    return text.lstrip().startswith("{")


def scan_rows(path: str) -> Scan:
    """Every row of a JSON-lines results file, one per configuration (the first written), with
    its line number. A missing file holds no rows.

    Raises:
      UsageError: ``path`` is not a regular file, or one of its lines (other than a torn last
        one) is binary, not JSON, or not a jfed row; the message names the line.
    """
    if not os.path.lexists(path):
        return Scan([], None, True)
    data = read_regular(path)
    lines = data.split(b"\n")
    last = max((i for i, raw in enumerate(lines) if raw.strip()), default=-1)
    rows, seen, torn, offset = [], set(), None, 0
    for index, raw in enumerate(lines):
        start, offset = offset, offset + len(raw) + 1
        if not raw.strip():
            continue
        number = index + 1
        text = _text(path, number, raw)
        try:
            row = json.loads(text)
        except json.JSONDecodeError as error:
            if index == last and _looks_torn(text):
                torn = TornLine(number, start, len(data) - start)
                break
            raise UsageError(
                f"{path} line {number} is not valid JSON ({error.msg} at column {error.colno}): "
                "the file is damaged there; restore it, or delete that line to re-run its run"
            ) from None
        if not _is_row(row):
            raise UsageError(
                f"{path} line {number} is not a jfed sweep row (expected the fields "
                "config_key and method as text, epsilon as a number)"
            )
        if row["config_key"] not in seen:
            seen.add(row["config_key"])
            rows.append((number, from_json(row)))
    return Scan(rows, torn, not data or data.endswith(b"\n"))


def torn_note(path: str, torn: TornLine, action: str) -> str:
    """One line saying that ``path``'s last line is torn and what is done about it."""
    return (
        f"jfed: note: {path} line {torn.number} was cut off by an interrupted write "
        f"({torn.size} bytes, not a whole row); {action}"
    )


def read_rows(path: str) -> list[dict]:
    """All complete rows of a JSON-lines results file, one per configuration (the first
    written). A torn last line is left out, with a note on stderr (a resume runs it again).

    Raises:
      UsageError: a line that is not a jfed row (:func:`scan_rows`).
    """
    scan = scan_rows(path)
    if scan.torn is not None:
        print(torn_note(path, scan.torn, "ignoring it (a --resume runs it again)"),
              file=sys.stderr)  # fmt: skip
    return [row for _, row in scan.rows]


def repair_torn_tail(path: str, scan: Scan) -> str | None:
    """Cut ``path``'s torn last line (``scan`` of it, :func:`scan_rows`), or end its complete
    last line with the newline it lacks, so that appended rows start on a line of their own.

    Returns:
      A note for the user when a torn line was removed, else ``None``.
    """
    if scan.torn is None and scan.ends_with_newline:
        return None
    descriptor = open_append(path)
    try:
        if scan.torn is not None:
            os.ftruncate(descriptor, scan.torn.offset)
            os.fsync(descriptor)
            ends = scan.torn.offset == 0 or _ends_with_newline(path, scan.torn.offset)
        else:
            ends = False
        if not ends:
            with naming(path):
                write_all(descriptor, b"\n")
    finally:
        os.close(descriptor)
    if scan.torn is None:
        return None
    return torn_note(path, scan.torn, "removed it: its run is run again")


def _ends_with_newline(path: str, size: int) -> bool:
    with open(path, "rb") as handle:
        handle.seek(size - 1)
        return handle.read(1) == b"\n"


def append_rows(path: str, rows: list[dict]) -> None:
    """Append ``rows`` to ``path`` as JSON lines, each written whole and synced to disk before
    the next (a crash loses at most the row being written, which :func:`scan_rows` then
    reports as torn). ``path`` must be a regular file or missing, never a symbolic link."""
    created = not os.path.lexists(path)
    descriptor = open_append(path)
    try:
        with naming(path):
            for row in rows:
                write_all(descriptor, (dumps_row(row) + "\n").encode("utf-8"))
    finally:
        os.close(descriptor)
    if created:
        sync_folder(os.path.dirname(os.path.abspath(path)))
