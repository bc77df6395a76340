"""The ``jfed`` command.

    jfed demo                               # the regression methods on Fair at three eps, and scale
    jfed run modulated --dataset fair --epsilon 1 --delta 1e-5 --rounds 10 --estimator iterative
    jfed run dpsgd --dataset fair --epsilon 1
    jfed run ols --synthetic --clients 1000000 --dim 10
    jfed datasets
    jfed sweep modulated-one-shot --dataset fair --epsilon 0.1,1,10 --seeds 5 --grid ridge=0.5,1,2
    jfed plot results/sweep
    jfed account gaussian --noise-multiplier 1.1 --sampling-rate 0.01 --steps 1000 --delta 1e-5

Bad input prints one line (``jfed: error: ...``) and exits with status 2, before JAX is imported
or any device is touched (:mod:`jfed.cli.checks`); heavy modules load only for the command that
needs them, so ``jfed --help`` answers at once.
"""

from __future__ import annotations

import argparse
import sys

from jfed.catalog import ROUNDS_ACCOUNTANTS, SILO_ALGORITHMS, SYNTHETIC_CLIENTS, SYNTHETIC_DIM
from jfed.cli import account, options, sweep
from jfed.cli.checks import check_arguments

DEFAULTS = dict(epsilon=1.0, delta=1e-5, rounds=10, seed=0)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (no usage block) and exit 2."""

    def error(self, message: str):
        self.exit(2, f"jfed: error: {message} (see `{self.prog} --help`)\n")


def _common(parser: argparse.ArgumentParser, private: bool = True) -> None:
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", default="fair", help="real task name (see `jfed datasets`)")
    data.add_argument(
        "--synthetic", action="store_true", help="procedural linear clients generated on device"
    )
    data.add_argument(
        "--clients", type=int, default=None, help=f"--synthetic: number n ({SYNTHETIC_CLIENTS})"
    )
    data.add_argument(
        "--dim", type=int, default=None, help=f"--synthetic: dimension d ({SYNTHETIC_DIM})"
    )
    run = parser.add_argument_group("run")
    if private:
        run.add_argument("--epsilon", type=float, default=DEFAULTS["epsilon"], help="target eps")
        run.add_argument("--delta", type=float, default=DEFAULTS["delta"], help="target delta")
        run.add_argument("--rounds", type=int, default=DEFAULTS["rounds"], help="rounds T")
        run.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="run seed")
    run.add_argument(
        "--block-size", type=int, default=None,
        help="clients per streaming step (65536 on CPU, 1048576 on GPU / TPU)",
    )  # fmt: skip
    run.add_argument(
        "--chunk-size", type=int, default=None,
        help="clients vmapped at once (4096 on CPU, 262144 on GPU / TPU)",
    )  # fmt: skip
    run.add_argument("--json", metavar="PATH", help="write the JSON record to PATH ('-': stdout)")
    options.progress_flag(run)
    options.cache_flag(run)


SILO_HELP = {
    "noisy-mbsgd": "ISRL-DP Noisy MB-SGD across data silos (seed 004, Algorithm 2)",
    "mbsgd": "non-private minibatch SGD across silos",
    "accel-mbsgd": "accelerated (AC-SA) Noisy MB-SGD: one-pass, ERM, multi-stage",
    "shuffle-mbsgd": "shuffle-DP Noisy MB-SGD (per-record messages, amplification by shuffling)",
    "local-sgd": "ISRL-DP Local SGD (K noisy local steps per silo)",
    "fedavg": "non-private Local SGD (FedAvg)",
}


def _silo_parser(parser: argparse.ArgumentParser) -> None:
    data = parser.add_argument_group("data")
    data.add_argument(
        "--dataset", default="digits-evenodd",
        help="digits-evenodd (default), digits-bylabel, <regression task>-sorted, synthetic",
    )  # fmt: skip
    data.add_argument("--silos", type=int, default=None, help="silos for -sorted / synthetic")
    data.add_argument("--mixing", type=float, default=0.0, help="p: 0 heterogeneous .. 1 iid")
    data.add_argument("--data-seed", type=int, default=0, help="split / assignment seed")
    run = parser.add_argument_group("run (defaults in parentheses)")
    run.add_argument("--epsilon", type=float, default=1.0, help="per-silo eps (1)")
    run.add_argument("--delta", type=float, default=None, help="per-silo delta (1/n_min^2)")
    run.add_argument("--rounds", type=int, default=25, help="R (25)")
    run.add_argument("--batch", type=int, default=10, help="K records (or local steps) (10)")
    run.add_argument("--step-size", type=float, default=1.0, help="eta or AC-SA gamma (1.0)")
    run.add_argument("--clip", type=float, default=1.0, help="per-example gradient clip L (1)")
    run.add_argument("--radius", type=float, default=10.0, help="parameter ball radius B (10)")
    run.add_argument(
        "--accountant", choices=("exact", "theorem", "experiments"), default="exact",
        help="noise calibration: exact (PLD, Poisson sampling), or the seed's formulas",
    )  # fmt: skip
    run.add_argument("--availability", choices=("all", "fixed", "bernoulli"), default="all")
    run.add_argument("--available", type=int, default=None, help="M for fixed / bernoulli")
    run.add_argument(
        "--sampling", default=None,
        choices=("with-replacement", "without-replacement", "poisson", "one-pass"),
    )  # fmt: skip
    run.add_argument("--ridge", type=float, default=None, help="accel ERM regulariser lambda (0)")
    run.add_argument("--multistage", action="store_true", help="accel: multi-stage restarts")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--json", metavar="PATH", help="write the JSON record ('-': stdout)")
    options.progress_flag(run)
    options.cache_flag(run)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="jfed", description="Differentially private federated learning simulator."
    )
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
    run = commands.add_parser("run", help="run one configuration of an algorithm")
    algorithms = run.add_subparsers(dest="algorithm", required=True)

    mod = algorithms.add_parser(
        "modulated", help="modulated single-sample regression (local DP on features)"
    )
    _common(mod)
    method = mod.add_argument_group("method (defaults in parentheses)")
    method.add_argument("--estimator", choices=("iterative", "one-shot"), default="iterative")
    method.add_argument("--alpha", type=float, default=1.0, help="signal amplitude (1.0)")
    method.add_argument("--beta", type=float, default=0.5, help="modulation amplitude (0.5)")
    method.add_argument("--omega", type=float, default=1.0, help="modulation frequency (1.0)")
    method.add_argument(
        "--directions", type=int, default=1, help="number k of modulation directions (1)"
    )
    method.add_argument(
        "--clip", type=float, default=None,
        help="feature clip radius C (3.0 on the real tasks; with --synthetic the 95%% quantile "
        "of the clients' feature norm)",
    )  # fmt: skip
    method.add_argument(
        "--adjacency-diameter", type=float, default=None, help="adjacency diameter D (2C)"
    )
    method.add_argument("--radius", type=float, default=10.0, help="projection radius B (10)")
    method.add_argument(
        "--ridge", type=float, default=None,
        help="one-shot ridge lambda (default: scaled with the noise in S_hat, see --ridge-scale)",
    )  # fmt: skip
    method.add_argument(
        "--ridge-scale", type=float, default=None,
        help="one-shot: lambda = scale * (sigma / alpha)^2 * 2 sqrt(d / n) when --ridge is not "
        "given (1.0)",
    )  # fmt: skip
    method.add_argument(
        "--step-scale", type=float, default=None, help="iterative step scale c (0.8)"
    )
    method.add_argument("--psd", action="store_true", help="one-shot: solve with PSD part")
    method.add_argument(
        "--accountant", choices=ROUNDS_ACCOUNTANTS, default="zcdp", help="noise calibration (zcdp)"
    )

    sgd = algorithms.add_parser("dpsgd", help="DP-SGD FedAvg, one sample per client")
    _common(sgd)
    method = sgd.add_argument_group("method (defaults in parentheses)")
    method.add_argument("--clip", type=float, default=2.0, help="gradient clip norm G (2.0)")
    method.add_argument("--learning-rate", type=float, default=0.1, help="server step (0.1)")
    method.add_argument("--radius", type=float, default=10.0, help="projection radius B (10)")
    method.add_argument(
        "--accountant", choices=ROUNDS_ACCOUNTANTS, default="zcdp", help="noise calibration (zcdp)"
    )

    least = algorithms.add_parser("ols", help="non-private least squares (reference)")
    _common(least, private=False)

    for name, help_text in SILO_HELP.items():
        _silo_parser(algorithms.add_parser(name, help=help_text))

    commands.add_parser("datasets", help="list the built-in real data sets")
    account.add_parser(commands)
    sweep.add_parsers(commands)
    return parser


def _given(**values) -> dict:
    """The flags the user gave (``None`` means: the method's own default)."""
    return {name: value for name, value in values.items() if value is not None}


def _run_silo(args: argparse.Namespace) -> dict:
    from jfed import run_silo

    task = run_silo.load_task(args.dataset, args.mixing, args.silos, args.data_seed)
    settings = run_silo.SiloSettings(
        **_given(
            batch=args.batch,
            rounds=args.rounds,
            step_size=args.step_size,
            clip=args.clip,
            radius=args.radius,
            calibration=args.accountant,
            availability=args.availability,
            available=args.available,
            sampling=args.sampling,
            ridge=args.ridge,
            multistage=args.multistage,
        )
    )
    return run_silo.run_silo(
        args.algorithm, task, args.epsilon, args.delta, settings, args.seed,
        progress=options.show_progress(args),
    )  # fmt: skip


def _run(args: argparse.Namespace) -> dict:
    from jfed import run as runner
    from jfed.engine import ExecutionPlan

    if args.algorithm in SILO_ALGORITHMS:
        return _run_silo(args)

    default = ExecutionPlan.for_backend()
    plan = ExecutionPlan(
        block_size=args.block_size or default.block_size,
        chunk_size=args.chunk_size or default.chunk_size,
    )
    task = runner.load_task(
        args.dataset, args.synthetic, args.clients or SYNTHETIC_CLIENTS, args.dim or SYNTHETIC_DIM
    )
    if args.algorithm == "ols":
        return runner.run_ols(task, plan)
    if args.algorithm == "dpsgd":
        return runner.run_dpsgd(
            task,
            args.epsilon,
            args.delta,
            args.rounds,
            args.clip,
            args.learning_rate,
            args.radius,
            args.seed,
            plan,
            accountant=args.accountant,
            progress=options.show_progress(args),
        )
    settings = runner.ModulatedSettings(
        **_given(
            estimator=args.estimator,
            alpha=args.alpha,
            beta=args.beta,
            omega=args.omega,
            directions=args.directions,
            clip=args.clip,
            radius=args.radius,
            ridge=args.ridge,
            ridge_scale=args.ridge_scale,
            step_scale=args.step_scale,
            psd=args.psd,
            accountant=args.accountant,
            adjacency_diameter=args.adjacency_diameter,
        )
    )
    return runner.run_modulated(
        task, args.epsilon, args.delta, args.rounds, settings, args.seed, plan,
        progress=options.show_progress(args),
    )  # fmt: skip


def _datasets() -> None:
    from jfed.data import available_datasets
    from jfed.data.regression import _LOADERS

    for name in available_datasets():
        _, _, info = _LOADERS[name]()
        print(f"{name:16s} target={info.target:12s} d={len(info.features):2d}  {info.description}")


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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help (0) or a refused argument (2, one line already printed)
        return int(stop.code or 0)
    try:
        check_arguments(args)
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
        if args.command in ("sweep", "plot"):
            sweep.run(args)
            return 0
        if args.command == "account":
            record, line = account.run(args)
            if args.json != "-":
                print(line)
            return _write_record(record, args.json)
        record = _run(args)
    except ValueError as error:
        print(f"jfed: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # the file system refused, after the checks passed
        print(f"jfed: error: {error.strerror or error}: {error.filename}", file=sys.stderr)
        return 1
    from jfed import run as runner

    warning = options.certification_warning(record)
    if warning:
        print(f"jfed: warning: {warning} (both are in the record)", file=sys.stderr)
    if args.json != "-":
        if args.algorithm in SILO_ALGORITHMS:
            from jfed.run_silo import summary_line

            print(summary_line(record))
        else:
            print(runner.summary_line(record))
    return _write_record(record, args.json)


if __name__ == "__main__":
    sys.exit(main())
