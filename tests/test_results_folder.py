"""A results folder can be trusted: one writer (an OS lock the kernel releases), files written
whole or not at all, a row cut by a crash repaired with a note, a resume that merges, and one
line (exit 2, nothing changed) for a folder that is damaged."""

import json
import os
import stat
import subprocess
import sys
import textwrap
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jfed._io import read_regular, replacing, write_atomic
from jfed.cli.main import main
from jfed.report.rows import append_rows, dumps_row, read_rows, repair_torn_tail, scan_rows
from jfed.sweep.lock import LOCK_NAME, FolderLockedError, folder_lock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCK_FILE = os.path.join(ROOT, "jfed", "sweep", "lock.py")
# one run per compiled call, each with its own noise: every sweep here runs the one program of
# `jfed run modulated-one-shot` (no program of shared-noise units, no memory analysis)
SWEEP = ["sweep", "modulated-one-shot", "--dataset", "modechoice", "--seeds", "1",
         "--no-progress", "--extend-edges", "0", "--no-shared-noise",
         "--slice-size", "1"]  # fmt: skip


def _row(key: str, **fields) -> dict:
    return {"config_key": key, "method": "dpsgd", "epsilon": 1.0, "test_r2": 0.5, **fields}


def _contents(folder) -> dict[str, bytes]:
    """Every entry of ``folder`` with its bytes (what a refused command must leave as it was)."""
    found = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        found[name] = read_regular(path) if os.path.isfile(path) else b"<not a file>"
    return found


def _one_line_error(capsys) -> str:
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("jfed: error:") and "\n" not in err, err
    assert "Traceback" not in captured.out + captured.err
    return err


# ------------------------------------------------------------------------------------ the lock

RACER = textwrap.dedent(
    """
    import importlib.util, json, os, sys, time
    spec = importlib.util.spec_from_file_location("lock", sys.argv[1])
    lock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lock)
    root, start, trials = sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    held = refused = doubles = 0
    for trial in range(trials):
        folder = os.path.join(root, str(trial))
        time.sleep(max(0.0, start + 0.02 * trial - time.time()))  # both racers start together
        try:
            with lock.folder_lock(folder):
                held += 1
                try:  # a second holder would find the marker of the first
                    os.close(os.open(os.path.join(folder, "holder"), os.O_CREAT | os.O_EXCL))
                except FileExistsError:
                    doubles += 1
                    continue
                time.sleep(0.005)
                os.remove(os.path.join(folder, "holder"))
        except lock.FolderLockedError:
            refused += 1
    print(json.dumps({"held": held, "refused": refused, "doubles": doubles}))
    """
)


def test_two_processes_racing_for_a_lock_never_both_hold_it(tmp_path):
    """100 trials of two processes taking one folder's lock at the same moment (every other
    folder with an empty lock file left behind): never two holders at once."""
    trials = 100
    # a loaded machine may deschedule one racer for a whole attempt (no refusal: no race
    # happened, which proves nothing): up to 3 attempts, each checked for double holders
    for attempt in range(3):
        root = tmp_path / str(attempt)
        for trial in range(0, trials, 2):
            os.makedirs(root / str(trial))
            (root / str(trial) / LOCK_NAME).write_bytes(b"")
        start = time.time() + 1.0
        argv = [sys.executable, "-c", RACER, LOCK_FILE, str(root), str(start), str(trials)]
        racers = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(2)]
        counts = [json.loads(racer.communicate(timeout=60)[0]) for racer in racers]
        assert all(racer.returncode == 0 for racer in racers)
        assert sum(c["doubles"] for c in counts) == 0
        # every trial had a holder (a refusal means the other one held it)
        assert sum(c["held"] for c in counts) >= trials
        assert not any((root / str(t) / LOCK_NAME).exists() for t in range(trials))
        if sum(c["refused"] for c in counts) > 0:
            break
    assert sum(c["refused"] for c in counts) > 0  # they did race


def _hold(folder: str) -> subprocess.Popen:
    code = textwrap.dedent(
        """
        import importlib.util, sys, time
        spec = importlib.util.spec_from_file_location("lock", sys.argv[1])
        lock = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(lock)
        with lock.folder_lock(sys.argv[2]):
            print("locked", flush=True)
            time.sleep(60)
        """
    )
    holder = subprocess.Popen([sys.executable, "-c", code, LOCK_FILE, folder],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_a_second_writer_is_refused_naming_the_pid_until_the_holder_dies(tmp_path):
    folder = str(tmp_path / "out")
    holder = _hold(folder)
    try:
        with pytest.raises(FolderLockedError) as refused, folder_lock(folder):
            pass
        message = str(refused.value)
        assert f"in use by process {holder.pid}" in message and "\n" not in message
    finally:
        holder.kill()  # kill -9: no cleanup runs in the holder
        holder.wait()
    assert os.path.exists(os.path.join(folder, LOCK_NAME))  # left behind ...
    with folder_lock(folder) as path:  # ... and blocking nothing: the kernel released the lock
        assert json.loads(open(path).read())["pid"] == os.getpid()


@pytest.mark.parametrize("content", [b"", b'{"pid": 1, "host": "elsewhere"}', b"\x00garbage"])
def test_a_leftover_lock_file_never_blocks(tmp_path, content, recwarn):
    (tmp_path / LOCK_NAME).write_bytes(content)
    with folder_lock(str(tmp_path)):
        pass
    # warnings the lock itself raised: an unclosed object of an earlier test that the garbage
    # collector finalises meanwhile (one was counted here in a full run) is not the lock's
    collected = (ResourceWarning, pytest.PytestUnraisableExceptionWarning)
    from_lock = [w for w in recwarn if not issubclass(w.category, collected)]
    assert not (tmp_path / LOCK_NAME).exists() and from_lock == []


# ------------------------------------------------------------------------------ atomic writes


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "tuned.csv"
    path.write_text("old\n")
    with pytest.raises(RuntimeError), replacing(str(path)) as handle:
        handle.write("half of the new")
        raise RuntimeError("crash")
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["tuned.csv"]
    write_atomic(str(path), "new\n")
    assert path.read_text() == "new\n" and os.listdir(tmp_path) == ["tuned.csv"]
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask  # as open() would have made it


def test_a_full_disk_names_the_file_it_could_not_write(tmp_path, monkeypatch):
    """ENOSPC names no file; the error that reaches the user names the one being written."""
    import errno

    def full(descriptor):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    path = tmp_path / "tuned.csv"
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as raised:
        write_atomic(str(path), "table\n")
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(path)
    assert os.listdir(tmp_path) == []  # nor a temporary file left behind


def test_writes_refuse_a_symbolic_link_and_never_write_through_it(tmp_path):
    target = tmp_path / "elsewhere.csv"
    target.write_text("keep me\n")
    link = tmp_path / "runs.csv"
    link.symlink_to(target)
    with pytest.raises(ValueError, match=r"runs\.csv is a symbolic link, not a regular file"):
        write_atomic(str(link), "table\n")
    assert link.is_symlink() and target.read_text() == "keep me\n"
    rows = tmp_path / "runs.jsonl"
    rows.symlink_to(target)
    with pytest.raises(ValueError, match="symbolic link"):
        append_rows(str(rows), [_row("a")])
    assert target.read_text() == "keep me\n"


def test_a_fifo_named_runs_jsonl_is_refused_not_waited_on(tmp_path, capsys):
    os.mkfifo(tmp_path / "runs.jsonl")
    with pytest.raises(ValueError, match="is a FIFO, not a regular file"):
        read_rows(str(tmp_path / "runs.jsonl"))
    assert main(["plot", str(tmp_path)]) == 2
    assert "runs.jsonl is a FIFO" in _one_line_error(capsys)
    assert main([*SWEEP, "--epsilon", "1", "--out", str(tmp_path), "--resume"]) == 2
    assert "runs.jsonl is a FIFO" in _one_line_error(capsys)
    assert sorted(os.listdir(tmp_path)) == ["runs.jsonl"]


def test_update_readme_writes_whole_or_not_at_all(tmp_path, capsys):
    from jfed.cli.methods import BEGIN, END

    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{BEGIN}\nold tables\n{END}\ntail\n")
    assert main(["methods", "--update-readme", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith(f"intro\n{BEGIN}") and "old tables" not in text and "| flag |" in text
    assert os.listdir(tmp_path) == ["README.md"]
    readme.write_text("no markers\n")
    assert main(["methods", "--update-readme", str(readme)]) == 2
    assert readme.read_text() == "no markers\n" and os.listdir(tmp_path) == ["README.md"]


# ----------------------------------------------------------------------------- torn last line


def test_a_torn_last_line_is_reported_and_repaired_never_dropped_silently(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    whole = dumps_row(_row("a")) + "\n" + dumps_row(_row("b")) + "\n"
    path.write_text(whole + dumps_row(_row("c"))[:17])
    assert [r["config_key"] for r in read_rows(str(path))] == ["a", "b"]
    note = capsys.readouterr().err
    assert "line 3 was cut off by an interrupted write" in note and "ignoring it" in note
    assert path.read_text().startswith(whole) and len(path.read_text()) > len(whole)  # untouched
    message = repair_torn_tail(str(path), scan_rows(str(path)))
    assert "line 3 was cut off" in message and "removed it" in message
    assert path.read_text() == whole
    append_rows(str(path), [_row("c")])
    assert [r["config_key"] for r in read_rows(str(path))] == ["a", "b", "c"]
    # a whole last row that only lacks its newline is kept, and the newline added
    path.write_text(whole + dumps_row(_row("c")))
    assert repair_torn_tail(str(path), scan_rows(str(path))) is None
    assert path.read_text() == whole + dumps_row(_row("c")) + "\n"


def _rows_text(count: int) -> bytes:
    rows = [_row(f"k{i}", curve=[0.1 * i, float("inf")], seed=i) for i in range(count)]
    return "".join(dumps_row(r) + "\n" for r in rows).encode()


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(count=st.integers(1, 6), data=st.data())
def test_a_file_cut_anywhere_reads_as_its_whole_rows(tmp_path, count, data):
    """Truncated at any byte: the rows whose line is complete, and the cut line (if any) reported
    as torn; after the repair the file is exactly those rows."""
    text = _rows_text(count)
    cut = data.draw(st.integers(0, len(text)))
    path = tmp_path / "runs.jsonl"
    path.write_bytes(text[:cut])
    scan = scan_rows(str(path))
    whole = text[:cut].count(b"\n")
    partial = text[:cut].rsplit(b"\n", 1)[-1]
    try:
        json.loads(partial)
        complete_tail = bool(partial)
    except ValueError:
        complete_tail = False
    assert len(scan.rows) == whole + complete_tail
    assert (scan.torn is not None) == (bool(partial) and not complete_tail)
    repair_torn_tail(str(path), scan)
    expected = text[:cut] + b"\n" if complete_tail else text[: cut - len(partial)]
    assert path.read_bytes() == expected


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(junk=st.binary(min_size=1, max_size=200), where=st.integers(0, 3))
def test_random_bytes_give_one_line_errors_or_rows(tmp_path, junk, where):
    """Random bytes spliced into a results file: the reader returns rows or raises one
    ValueError line naming the file, nothing else."""
    lines = _rows_text(3).splitlines(keepends=True)
    path = tmp_path / "runs.jsonl"
    path.write_bytes(b"".join(lines[:where]) + junk + b"".join(lines[where:]))
    try:
        scan = scan_rows(str(path))
    except ValueError as error:
        assert str(path) in str(error) and "\n" not in str(error) and " line " in str(error)
    else:
        assert len(scan.rows) <= 4


# --------------------------------------------------------------------- resume is a merge


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A sweep folder run at eps 1 and then resumed at eps 4 with other grid values (tuned per
    eps: one setting for both eps would need every setting at both)."""
    out = tmp_path_factory.mktemp("merge") / "sweep"
    assert main([*SWEEP, "--epsilon", "1", "--grid", "ridge=0.5,1", "--out", str(out)]) == 0
    resumed = [*SWEEP, "--epsilon", "4", "--grid", "ridge=1,2", "--out", str(out), "--resume",
               "--tune", "per-eps"]  # fmt: skip
    assert main(resumed) == 0
    return out


def test_a_resume_rebuilds_the_tables_from_every_row(folder):
    import pandas as pd

    rows = read_rows(str(folder / "runs.jsonl"))
    assert len(rows) == 4 and {(r["epsilon"], r["ridge"]) for r in rows} == {
        (1.0, 0.5), (1.0, 1.0), (4.0, 1.0), (4.0, 2.0),
    }  # fmt: skip
    assert len(pd.read_csv(folder / "runs.csv")) == 4
    assert len(pd.read_parquet(folder / "runs.parquet")) == 4
    assert sorted(pd.read_csv(folder / "tuned.csv").epsilon) == [1.0, 4.0]
    assert not [name for name in os.listdir(folder) if name.endswith(".tmp")]


def _refused(argv: list[str], folder, capsys, *pieces: str) -> None:
    before = _contents(folder)
    assert main(argv) == 2
    err = _one_line_error(capsys)
    for piece in pieces:
        assert piece in err, err
    assert _contents(folder) == before


def _resume(folder) -> list[str]:
    return [*SWEEP, "--epsilon", "1", "--grid", "ridge=0.5,1", "--out", str(folder), "--resume"]


def _damaged(folder, tmp_path, name: str, content: bytes):
    """A copy of ``folder`` with ``name`` replaced by ``content``."""
    copy = tmp_path / "copy"
    copy.mkdir()
    for entry, data in _contents(folder).items():
        (copy / entry).write_bytes(content if entry == name else data)
    return copy


def test_rows_of_another_method_or_configuration_are_refused(folder, tmp_path, capsys):
    lines = (folder / "runs.jsonl").read_text().splitlines()
    row = json.loads(lines[1])
    other = dict(row, method="dpsgd", config_key=row["config_key"].replace("one-shot", "x"))
    copy = _damaged(
        folder,
        tmp_path,
        "runs.jsonl",
        "\n".join([lines[0], lines[1], json.dumps(other), *lines[2:]]).encode() + b"\n",
    )
    _refused(_resume(copy), copy, capsys, "runs.jsonl line 3 is a run of dpsgd")
    key = json.loads(row["config_key"])
    moved = dict(row, config_key=json.dumps(dict(key, dataset="fair"), sort_keys=True))
    (copy / "runs.jsonl").write_text("\n".join([*lines, json.dumps(moved)]) + "\n")
    _refused(_resume(copy), copy, capsys, "line 5 is a run with --dataset fair, not modechoice")


# ------------------------------------------------------------------ damaged input: one line


@pytest.mark.parametrize(
    "name, content, pieces",
    [
        ("runs.sweep.json", b"[]\n", ("runs.sweep.json holds a JSON list",)),
        ("runs.sweep.json", b'{"schema_version": 1, "meth', ("runs.sweep.json is not valid JSON",)),
        ("runs.jsonl", bytes(range(256)) * 4, ("runs.jsonl line 1 is binary data",)),
    ],
    ids=["manifest []", "truncated manifest", "binary runs.jsonl"],
)
def test_a_damaged_file_is_one_line_and_changes_nothing(folder, tmp_path, capsys, name, content,
                                                        pieces):  # fmt: skip
    copy = _damaged(folder, tmp_path, name, content)
    _refused(_resume(copy), copy, capsys, *pieces)


def test_a_corrupt_line_in_the_middle_is_named(folder, tmp_path, capsys):
    lines = (folder / "runs.jsonl").read_text().splitlines()
    lines[1] = lines[1][:40] + lines[1][60:]
    copy = _damaged(folder, tmp_path, "runs.jsonl", ("\n".join(lines) + "\n").encode())
    _refused(_resume(copy), copy, capsys, "runs.jsonl line 2 is not valid JSON")
    _refused(["plot", str(copy)], copy, capsys, "runs.jsonl line 2 is not valid JSON")


def test_plotting_rows_without_their_metric_is_one_line(folder, tmp_path, capsys):
    lines = (folder / "runs.jsonl").read_text().splitlines()
    row = json.loads(lines[2])
    del row["test_r2"]
    lines[2] = json.dumps(row)
    copy = _damaged(folder, tmp_path, "runs.jsonl", ("\n".join(lines) + "\n").encode())
    _refused(["plot", str(copy)], copy, capsys, "runs.jsonl line 3 lacks the metric test_r2")


# ------------------------------------------------------------- random field types, full disk

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
CHECKED_FIELDS = ["config_key", "method", "epsilon", "test_r2", "validation_r2",
                  "selection_metric", "report_metric"]  # fmt: skip


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(field=st.sampled_from(CHECKED_FIELDS), value=JSON_VALUES, line=st.integers(0, 3))
def test_a_field_of_any_type_gives_rows_and_tables_or_one_line(folder, tmp_path, field, value,
                                                               line):  # fmt: skip
    """A row whose field holds any JSON value: the reader and the tables either take it, or
    refuse with one UsageError line naming the file and the line; never another exception."""
    from jfed._validation import UsageError
    from jfed.cli.sweep import reported_rows, tune_rows

    lines = (folder / "runs.jsonl").read_text().splitlines()
    lines[line] = json.dumps(dict(json.loads(lines[line]), **{field: value}))
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    try:
        rows = reported_rows(str(path))
    except UsageError as error:
        assert str(path) in str(error) and f"line {line + 1}" in str(error)
        assert "\n" not in str(error)
        return
    table, _ = tune_rows(rows, "per-eps", "median")
    assert table


@pytest.mark.parametrize("value", [-(2**63) - 1, 2**64, 10**400, True, "0.5", [1.0], None])
def test_a_metric_of_any_size_or_type_tunes_or_is_one_line(folder, tmp_path, value):
    """A validation value beyond int64 (-2^63 - 1 broke numpy's isfinite), beyond a float, or
    of another type: the tables take it as no score, or the reader refuses it in one line."""
    from jfed._validation import UsageError
    from jfed.cli.sweep import reported_rows, tune_rows

    lines = (folder / "runs.jsonl").read_text().splitlines()
    lines[0] = json.dumps(dict(json.loads(lines[0]), validation_r2=value))
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    try:
        rows = reported_rows(str(path))
    except UsageError as error:
        assert "line 1" in str(error) and "\n" not in str(error)
        return
    assert tune_rows(rows, "per-eps", "median")[0]


def test_a_full_disk_mid_sweep_loses_no_row_leaves_no_lock_and_resumes(tmp_path, capsys,
                                                                       monkeypatch):  # fmt: skip
    """The disk fills while the second of two rows is written (half of it reaches the file):
    exit 1 with one line, the first row intact, the lock released, and a resume repairs the cut
    row and runs the missing one, leaving each run once. Negative control: the same sweep
    without the fault writes both at once."""
    import errno

    import jfed.report.rows as rows_module

    out = tmp_path / "sweep"
    argv = [*SWEEP, "--epsilon", "1,2", "--out", str(out)]
    real_write_all = rows_module.write_all
    written = []

    def filling_disk(descriptor: int, data: bytes) -> None:
        if written:  # the second row: half of it lands, then the disk is full
            os.write(descriptor, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(data)
        real_write_all(descriptor, data)

    monkeypatch.setattr(rows_module, "write_all", filling_disk)
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    runs = out / "runs.jsonl"  # the path, and what was kept (the rows before it, resumable)
    assert err == (f"jfed: error: No space left on device: {runs}; the runs finished before it "
                   f"are kept in {runs} (the same command with --resume continues from them "
                   "once there is room)"), err  # fmt: skip
    first = written[0]
    assert (out / "runs.jsonl").read_bytes().startswith(first)  # the finished row is kept
    with folder_lock(str(out)):  # released: a second writer gets it at once
        pass
    monkeypatch.setattr(rows_module, "write_all", real_write_all)
    assert main([*argv, "--resume"]) == 0
    assert "was cut off by an interrupted write" in capsys.readouterr().err
    text = (out / "runs.jsonl").read_bytes()
    assert text.startswith(first)
    rows = read_rows(str(out / "runs.jsonl"))
    assert sorted(r["epsilon"] for r in rows) == [1.0, 2.0]
    assert len({r["config_key"] for r in rows}) == 2 == text.count(b"\n")
    control = tmp_path / "control"
    assert main([*SWEEP, "--epsilon", "1,2", "--out", str(control)]) == 0
    assert len(read_rows(str(control / "runs.jsonl"))) == 2


def test_a_resume_with_nothing_left_says_so(tmp_path, capsys):
    """Negative control: a resume that adds a run says nothing of the kind."""
    out = str(tmp_path / "sweep")
    assert main([*SWEEP, "--epsilon", "1", "--out", out]) == 0
    capsys.readouterr()
    assert main([*SWEEP, "--epsilon", "1", "--out", out, "--resume"]) == 0
    err = capsys.readouterr().err
    assert "nothing left to run" in err and "(1 runs)" in err
    assert main([*SWEEP, "--epsilon", "1,2", "--out", out, "--resume"]) == 0
    assert "nothing left" not in capsys.readouterr().err


def test_load_results_refuses_what_is_not_a_sweep_as_bad_input(tmp_path):
    from jfed import load_results
    from jfed._validation import UsageError

    (tmp_path / "notes.txt").write_text("x\n")
    for source in ([], str(tmp_path / "missing"), str(tmp_path / "notes.txt"), str(tmp_path)):
        with pytest.raises(UsageError):
            load_results(source)
