"""Checkpoints of a long run (:mod:`jfed.sweep.checkpoint`): a run stopped after round r of R and
resumed gives the record of the uninterrupted run, bit for bit but for the timings.

- DP-FedAvg (with server momentum: optimizer state in the server state), DP-FTRL (its tree
  aggregator's noise state, and momentum) and SCAFFOLD with its per-client table on disk
  (through ``jfed run``): each stopped right after a checkpoint (a hook raising, or
  ``KeyboardInterrupt`` as Ctrl-C gives it) and resumed; SCAFFOLD's table files are scribbled
  over after the stop (a crash mid-segment leaves rows written past the checkpoint) and the
  resumed run's files equal the uninterrupted run's.
- Segmenting itself changes no bit: the resumed records are compared with the run that never
  checkpointed (one ``lax.scan`` of every round); DP-FTRL's with its run in segments (its
  comparison with the one scan is a slow test: one compile fewer).
- Negative control: a resume from a checkpoint whose server state was altered gives another
  record (the resume reads the saved state; the equality above is not vacuous).
- A checkpoint of another configuration is refused in one line naming the difference; one
  found without ``--resume`` is refused (never overwritten); bad flags are refused before JAX.
- A finished run removes its checkpoint unless kept; a kept one resumes with no round to run.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile

import numpy as np
import pytest

import jfed
from jfed._validation import UsageError
from jfed.methods import build_experiment, method
from jfed.sweep import checkpoint, run_sweep
from jfed.sweep.checkpoint import Checkpoints

SIZES = dict(clients=60, records=8, rounds=4, cohort_size=10, batch=8)
EVERY = 2  # rounds 0-1 and 2-3: one segment program (of length 2) per method
MOMENTUM = {"server_momentum": 0.9}  # the server optimizer's state in the server state
TIMINGS = {"compile_seconds", "run_seconds", "calibration_seconds", "timestamp"}


class StopError(Exception):
    """The simulated kill."""


def stop_after(rounds: int):
    def hook(done: int) -> None:
        if done >= rounds:
            raise StopError

    return hook


def differing(a: dict, b: dict) -> set:
    return {k for k in set(a) | set(b) if a.get(k) != b.get(k)} - TIMINGS


def config_of(name: str, **extra):
    return method(name).config(**SIZES, **extra)


@functools.cache
def uninterrupted(name: str, segmented: bool = False, **extra) -> dict:
    """The record of ``name``'s run that nobody stopped: one ``lax.scan`` of every round, or
    (``segmented``) in the segments of a run checkpointed every EVERY rounds."""
    config = config_of(name, **extra)
    if not segmented:
        return jfed.run(config, progress=False)
    path = os.path.join(tempfile.mkdtemp(), "run.checkpoint.npz")
    return jfed.run(config, progress=False, checkpoint_every=EVERY, checkpoint_path=path)


def stopped(config, path, at: int = EVERY) -> None:
    """``config`` run with checkpoints every EVERY rounds and stopped after round ``at``."""
    with pytest.raises(StopError):
        checkpoints = Checkpoints(str(path), EVERY, on_checkpoint=stop_after(at))
        run_sweep(build_experiment(config), [config], None, share_noise=False, progress=False,
                  checkpoints=checkpoints)  # fmt: skip


def resumed(config, path, **options) -> dict:
    return jfed.run(config, progress=False, checkpoint_every=EVERY, checkpoint_path=str(path),
                    resume=True, **options)  # fmt: skip


# DP-FTRL's resume is compared with its uninterrupted run in segments (one program to compile,
# not two); that those equal its one scan is a slow test (DP-FedAvg and SCAFFOLD check it here)
@pytest.mark.parametrize(
    ("name", "extra", "segmented"),
    [("dp-fedavg", MOMENTUM, False), ("dp-ftrl", {}, True),
     pytest.param("dp-ftrl", {}, False, marks=pytest.mark.slow)],
)  # fmt: skip
def test_a_stopped_run_resumed_gives_the_uninterrupted_record(
    tmp_path, capsys, name, extra, segmented
):
    config = config_of(name, **extra)
    path = tmp_path / "run.checkpoint.npz"
    stopped(config, path)
    saved = checkpoint.read(str(path))
    assert saved is not None and saved.meta["round"] == EVERY
    assert all(leaf.shape[1] == EVERY for leaf in saved.infos)  # the rounds' metrics so far
    record = resumed(config, path)
    assert f"resumed {path} at round {EVERY} of 4" in capsys.readouterr().err
    assert differing(record, uninterrupted(name, segmented, **extra)) == set()
    assert "certificate_refused" not in record  # its releases counted as they ran, resumed too
    assert not path.exists()  # removed once the run finished


def test_a_resume_reads_the_saved_state(tmp_path):
    """Negative control: the server state saved after round 2 altered, the resumed run's
    record differs from the uninterrupted one."""
    config = config_of("dp-fedavg", **MOMENTUM)
    path = tmp_path / "run.checkpoint.npz"
    stopped(config, path)
    saved = checkpoint.read(str(path))
    server = [leaf + 0.5 if leaf.dtype.kind == "f" else leaf for leaf in saved.server]
    checkpoint.write(str(path), saved.meta, server, saved.table, saved.infos)
    record = resumed(config, path)
    assert differing(record, uninterrupted("dp-fedavg", **MOMENTUM))


def test_another_configuration_and_an_unasked_resume_are_refused(tmp_path):
    config = config_of("dp-fedavg", **MOMENTUM)
    path = tmp_path / "run.checkpoint.npz"
    stopped(config, path)
    before = path.read_bytes()
    with pytest.raises(UsageError, match=r"checkpoint of another run \(seed=0 \(this run: 1\)\)"):
        resumed(config.replace(seed=1), path)
    with pytest.raises(UsageError, match=r"pass --resume .* to continue it, or remove it"):
        jfed.run(config, progress=False, checkpoint_every=EVERY, checkpoint_path=str(path))
    assert path.read_bytes() == before  # neither touched it


def test_a_kept_checkpoint_stays_and_resumes_with_no_round_to_run(tmp_path):
    config = config_of("dp-fedavg", **MOMENTUM)
    path = tmp_path / "run.checkpoint.npz"
    record = resumed(config, path, keep_checkpoints=True)  # no checkpoint yet: from round 0
    assert checkpoint.read(str(path)).meta["round"] == 4
    again = resumed(config, path, keep_checkpoints=True)
    assert differing(again, record) == set() == differing(record, uninterrupted(
        "dp-fedavg", **MOMENTUM))  # fmt: skip
    assert path.exists()


SCAFFOLD = ["run", "scaffold", "--clients", "60", "--cohort-size", "10", "--rounds", "4",
            "--records", "8", "--batch", "8", "--no-progress",
            "--client-state", "disk"]  # fmt: skip


def test_scaffold_with_its_table_on_disk_stopped_by_ctrl_c_resumes_as_it_ran(
    tmp_path, monkeypatch, capsys
):
    """Through ``jfed run``: the checkpoint beside ``--json``, a ``KeyboardInterrupt`` after
    the round-2 checkpoint, the table's files damaged, ``--resume``: the record and the table's
    files are the uninterrupted run's."""
    from jfed.cli.main import main

    assert main([*SCAFFOLD, "--client-state-dir", str(tmp_path / "t0"),
                 "--json", str(tmp_path / "plain.json")]) == 0  # fmt: skip
    write = checkpoint.write

    def interrupted(path, meta, *arrays):
        write(path, meta, *arrays)
        if meta["round"] == EVERY:
            raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "write", interrupted)
    run = [*SCAFFOLD, "--client-state-dir", str(tmp_path / "t1"), "--json",
           str(tmp_path / "run.json"), "--checkpoint-every", str(EVERY)]  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        main(run)
    assert (tmp_path / "run.checkpoint.npz").exists() and not (tmp_path / "run.json").exists()
    tables = sorted((tmp_path / "t1").glob("*.npy"))
    for file in tables:  # rows a crash mid-segment wrote past the checkpoint
        np.save(file, np.full_like(np.load(file), 7.0))
    assert main([*run, "--resume"]) == 0
    capsys.readouterr()
    plain = json.loads((tmp_path / "plain.json").read_text())
    assert differing(json.loads((tmp_path / "run.json").read_text()), plain) == set()
    assert tables and not (tmp_path / "run.checkpoint.npz").exists()
    for file in tables:
        np.testing.assert_array_equal(np.load(file), np.load(tmp_path / "t0" / file.name))


@pytest.mark.parametrize(
    ("flags", "answer"),
    [
        (["--checkpoint-every", "0", "--json", "r.json"], "expected --checkpoint-every >= 1"),
        (["--resume"], "--resume works with checkpoints: add --checkpoint-every K"),
        (["--keep-checkpoints"], "--keep-checkpoints works with checkpoints"),
        (["--checkpoint-every", "5"], "needs a place for its checkpoint: --checkpoint-dir"),
        (["--checkpoint-every", "5", "--json", "-"], "needs a place for its checkpoint"),
    ],
)
def test_checkpoint_flags_that_cannot_work_are_refused_in_one_line(flags, answer, capsys):
    from jfed.cli.main import main_checks_only

    assert main_checks_only(["run", "dp-fedavg", *flags]) == 2
    err = capsys.readouterr().err
    assert answer in err and err.count("\n") == 1


def test_a_checkpoint_folder_under_a_file_is_refused(tmp_path, capsys):
    from jfed.cli.main import main_checks_only

    (tmp_path / "file").write_text("")
    folder = str(tmp_path / "file" / "sub")
    assert main_checks_only(["run", "dp-fedavg", "--checkpoint-every", "5", "--checkpoint-dir",
                             folder]) == 2  # fmt: skip
    assert "not a folder" in capsys.readouterr().err
