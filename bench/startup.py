"""Start-up cost of the jfed command: `jfed --help`, a refused argument, and `jfed demo` cold.

    python bench/startup.py [--baseline PATH] [--repeats 5] [--json bench/results/startup_cpu.json]
                            [--no-demo] [--smoke]

Each command runs in a fresh process (what a user waits for), ``--repeats`` times, alternating
with the baseline when one is given (a checkout of an older jfed, run through PYTHONPATH with the
same interpreter), so both see the same machine load; the table gives medians and the ratio.
``jfed demo`` runs once per tree with an empty compilation cache (the README's first command on
a fresh machine), imports included. ``--smoke`` times each command once and skips the demo.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from _common import parse_args, uptime, write_json  # bench/ is on the path when run

HELP = ["--help"]
REFUSED = ["run", "modulated", "--epsilon", "-1"]


def _time(tree: str | None, argv: list[str], cache: str | None = None) -> float:
    environment = dict(os.environ, JFED_COMPILATION_CACHE=cache or "off")
    if tree is not None:
        environment["PYTHONPATH"] = tree
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "jfed", *argv], env=environment, capture_output=True, check=False,
        cwd=tree or os.getcwd(),
    )  # fmt: skip
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=None, help="an older jfed checkout to compare with")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default="bench/results/startup_cpu.json")
    parser.add_argument("--no-demo", action="store_true")
    args = parse_args(parser, argv, __file__, repeats=1, no_demo=True)
    load_before = uptime()
    trees = {"current": None, **({"baseline": args.baseline} if args.baseline else {})}
    rows = []
    for name, argv in (("jfed --help", HELP), ("refused argument", REFUSED)):
        times: dict = {tree: [] for tree in trees}
        for _ in range(args.repeats):
            for tree, path in trees.items():
                times[tree].append(_time(path, argv))
        for tree in trees:
            rows.append({"command": name, "tree": tree, "seconds": statistics.median(times[tree]),
                         "all_seconds": times[tree]})  # fmt: skip
    if not args.no_demo:
        with tempfile.TemporaryDirectory() as scratch:
            seconds = _time(None, ["demo", "--out", os.path.join(scratch, "demo")],
                            cache=os.path.join(scratch, "xla"))  # fmt: skip
        rows.append({"command": "jfed demo (cold cache)", "tree": "current", "seconds": seconds,
                     "all_seconds": [seconds]})  # fmt: skip
    print(f"{'command':24s} {'tree':9s} {'median s':>9s} {'baseline / current':>19s}")
    for row in rows:
        base = next((r for r in rows if r["command"] == row["command"] and r["tree"] == "baseline"),
                    None)  # fmt: skip
        ratio = (
            f"{base['seconds'] / row['seconds']:.1f}x" if base and row["tree"] == "current" else ""
        )
        print(f"{row['command']:24s} {row['tree']:9s} {row['seconds']:9.3f} {ratio:>19s}")
    write_json(args.json, {"benchmark": "startup", "rows": rows, "repeats": args.repeats,
                           "python": sys.version.split()[0],
                           "uptime": {"before": load_before, "after": uptime()}})  # fmt: skip
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
