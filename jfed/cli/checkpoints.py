"""``jfed run``'s checkpoint flags: ``--checkpoint-every K``, ``--checkpoint-dir DIR``,
``--resume`` and ``--keep-checkpoints`` (:mod:`jfed.sweep.checkpoint` says what is saved).

Checked here without JAX, before any work: K is a whole number of rounds >= 1, the run has a
place for its checkpoint (``--checkpoint-dir``, else beside the ``--json`` file), and that
place is a folder jfed may write.
"""

from __future__ import annotations

import argparse
import os

from jfed._validation import UsageError

SUFFIX = ".checkpoint.npz"  # jfed.sweep.checkpoint.SUFFIX (not imported: it loads JAX)


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The checkpoint flags of ``jfed run``, in a group of their own."""
    group = parser.add_argument_group("checkpoints (a long run survives an interruption)")
    group.add_argument(
        "--checkpoint-every", type=int, metavar="K", default=None,
        help="save the run's state every K rounds (beside --json PATH as PATH's name + "
        f"'{SUFFIX}', or in --checkpoint-dir); the results are the same bits",
    )  # fmt: skip
    group.add_argument(
        "--checkpoint-dir", metavar="DIR", default=None,
        help=f"folder of the checkpoint (as METHOD{SUFFIX}; created if missing)",
    )  # fmt: skip
    group.add_argument(
        "--resume", action="store_true",
        help="continue a stopped run from its checkpoint (the same arguments; refused for "
        "another configuration); starts at round 0 when there is none",
    )  # fmt: skip
    group.add_argument(
        "--keep-checkpoints", action="store_true",
        help="keep the checkpoint of the finished run (default: removed)",
    )  # fmt: skip


def place(args: argparse.Namespace) -> str | None:
    """The checkpoint file of a run (``None`` when its flags give it no place)."""
    if args.checkpoint_dir:
        return os.path.join(args.checkpoint_dir, f"{args.algorithm}{SUFFIX}")
    results = args.json
    if not results or results == "-" or results.startswith(("/dev/", "/proc/")):
        return None
    return os.path.splitext(results)[0] + SUFFIX


def check(args: argparse.Namespace) -> None:
    """``UsageError`` (one line naming the flag) for checkpoint flags that cannot work."""
    every = getattr(args, "checkpoint_every", None)
    if every is None:
        flags = {"--resume": args.resume, "--keep-checkpoints": args.keep_checkpoints,
                 "--checkpoint-dir": args.checkpoint_dir}  # fmt: skip
        given = [flag for flag, on in flags.items() if on]
        if given:
            raise UsageError(
                f"{given[0]} works with checkpoints: add --checkpoint-every K (rounds between "
                "two checkpoints)"
            )
        return
    if every < 1:
        raise UsageError(f"expected --checkpoint-every >= 1 (rounds), got {every}")
    path = place(args)
    if path is None:
        raise UsageError(
            "--checkpoint-every needs a place for its checkpoint: --checkpoint-dir DIR, or "
            "--json PATH to a file (the checkpoint goes beside it)"
        )
    folder = os.path.dirname(os.path.abspath(path))
    existing = folder
    while not os.path.exists(existing):  # the folder is created by the run
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UsageError(f"the checkpoint's folder {folder} is under {existing}, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"the checkpoint's folder {existing} is not writable: name another")


def arguments(args: argparse.Namespace) -> dict:
    """The checkpoint arguments of :func:`jfed.run` from checked flags (``{}``: none)."""
    if getattr(args, "checkpoint_every", None) is None:
        return {}
    return {
        "checkpoint_every": args.checkpoint_every,
        "checkpoint_path": place(args),
        "resume": args.resume,
        "keep_checkpoints": args.keep_checkpoints,
    }
