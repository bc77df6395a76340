"""``jfed account``: privacy questions answered on the host.

    jfed account gaussian --noise-multiplier 1.1 --sampling-rate 0.01 --steps 1000 --delta 1e-5
    jfed account calibrate --epsilon 1 --delta 1e-5 --sampling-rate 0.01 --steps 1000
    jfed account calibrate --epsilon 0.5,1,2,4 --delta 1e-5 --accountant zcdp --steps 10
    jfed account last-iterate --eta 0.5 --lipschitz 1 --radius 1 --sigma 1.5 --n 100 \
        --sampling-rate 0.1 --epsilon 1
    jfed account shuffle --epsilon0 1 --n 10000 --delta 1e-6
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from jfed.catalog import CALIBRATION_ACCOUNTANTS

if TYPE_CHECKING:
    from jfed.privacy import PrivacyGuarantee

ACCOUNTANT_HELP = (
    "pld (tight, dp-accounting), rdp (dp-accounting), zcdp (closed form, no subsampling), "
    "analytic (exact Gaussian, one release), classic (Dwork-Roth, one release, eps < 1)"
)


def _sampled(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sampling-rate", type=float, default=1.0, help="q per step (1)")
    parser.add_argument("--steps", type=int, default=1, help="composed steps (1)")
    parser.add_argument(
        "--accountant", default="pld", choices=CALIBRATION_ACCOUNTANTS,
        help=ACCOUNTANT_HELP,
    )  # fmt: skip
    parser.add_argument(
        "--sampling", default=None, choices=("poisson", "without-replacement"),
        help="how each step's sample is drawn, with --sampling-rate below 1 (default: poisson)",
    )  # fmt: skip
    parser.add_argument(
        "--dataset-size", type=int, default=None, help="n, for --sampling without-replacement"
    )
    parser.add_argument(
        "--neighboring", default="add-or-remove", choices=("add-or-remove", "replace-one")
    )
    parser.add_argument("--json", metavar="PATH", help="write the JSON record ('-': stdout)")


def add_parser(commands) -> None:
    account = commands.add_parser("account", help="privacy accounting and calibration")
    questions = account.add_subparsers(dest="question", required=True)

    gaussian = questions.add_parser("gaussian", help="eps of (subsampled) Gaussian steps")
    gaussian.add_argument("--noise-multiplier", type=float, required=True)
    gaussian.add_argument("--delta", type=float, default=1e-5)
    _sampled(gaussian)

    calibrate = questions.add_parser("calibrate", help="noise multiplier for a target eps")
    calibrate.add_argument(
        "--epsilon", required=True, help="target eps, or a comma-separated grid of them"
    )
    calibrate.add_argument("--delta", type=float, default=1e-5)
    calibrate.add_argument(
        "--sensitivity", type=float, default=1.0, help="L2 sensitivity (sigma = multiplier * it)"
    )
    _sampled(calibrate)

    last = questions.add_parser(
        "last-iterate",
        help="delta (or eps) of releasing only the last iterate (Asoodeh and Calmon, "
        "Differentially Private Federated Learning: An Information-Theoretic Perspective)",
    )
    for name, help_text in (
        ("--eta", "step size"),
        ("--lipschitz", "L"),
        ("--radius", "projection radius rho"),
        ("--sigma", "noise multiplier per user"),
        ("--sampling-rate", "q = m / n"),
    ):
        last.add_argument(name, type=float, required=True, help=help_text)
    last.add_argument("--n", type=int, required=True, help="number of users")
    target = last.add_mutually_exclusive_group(required=True)
    target.add_argument("--epsilon", type=float, help="report delta at this eps")
    target.add_argument("--delta", type=float, help="report eps at this delta")
    last.add_argument(
        "--compare-accountant", default="rdp", choices=("rdp",),
        help="accountant of the every-iterate comparison",
    )  # fmt: skip
    last.add_argument("--json", metavar="PATH")

    shuffled = questions.add_parser("shuffle", help="amplification by shuffling (FMT Thm 3.1)")
    shuffled.add_argument("--epsilon0", type=float, required=True, help="local eps0")
    shuffled.add_argument("--n", type=int, required=True, help="number of shuffled reports")
    shuffled.add_argument("--delta", type=float, default=1e-6)
    shuffled.add_argument("--delta0", type=float, default=0.0, help="local delta0 (0)")
    shuffled.add_argument("--json", metavar="PATH")


def _sampling(args) -> str:
    return args.sampling or "poisson"


# What each question's accounting assumes of who sees what: the record's ``trust_model``.
CENTRAL_TRUST = (
    "the party that samples the steps and adds the noise is trusted (it sees the unnoised sums "
    "and keeps the samples secret); only the noised releases are public"
)
LAST_ITERATE_TRUST = (
    "the party that runs the noisy projected SGD is trusted; only the last iterate is public "
    "(the intermediate iterates and the batches stay secret)"
)
SHUFFLE_TRUST = (
    "each unit randomizes its own report; the shuffler is trusted to hide which report came "
    "from whom; only the shuffled reports are public"
)


def _sampled_guarantee(args, epsilon: float) -> PrivacyGuarantee:
    """The guarantee of ``args.steps`` (subsampled) Gaussian steps at ``epsilon``."""
    from jfed.privacy import Adjacency, PrivacyGuarantee

    return PrivacyGuarantee(
        epsilon=float(epsilon),
        delta=args.delta,
        accountant=args.accountant,
        notion="(eps, delta)-DP of the composed Gaussian steps",
        protected="one sampled unit (a record; a user's data in user-level DP)",
        trust_model=CENTRAL_TRUST,
        adjacency=Adjacency.of(args.neighboring),
    )


def _sampling_fields(args) -> dict:
    return {
        "sampling_rate": args.sampling_rate,
        "steps": args.steps,
        "sampling": _sampling(args) if args.sampling_rate < 1 else "none",
    }


def stated(record: dict) -> str:
    """What every answer says beside its number: the notion, the adjacency, the protected unit
    and the sensitivity it assumes."""
    return (
        f" | {record['notion']}; adjacency: {record['adjacency']}; protected unit: "
        f"{record['protected']}; sensitivity: {record['sensitivity']}"
    )


def run(args) -> tuple[dict, str]:
    """Answer the question; return ``(record, human line)``."""
    import numpy as np

    from jfed.privacy import Adjacency, PrivacyGuarantee, calibration, last_iterate, shuffle

    if args.question == "gaussian":
        epsilon = calibration.epsilon_for_noise(
            args.noise_multiplier, args.delta, args.sampling_rate, args.steps, args.accountant,
            _sampling(args), args.dataset_size, args.neighboring,
        )  # fmt: skip
        record = {
            "quantity": "epsilon",
            "epsilon": epsilon,
            **_sampled_guarantee(args, epsilon).record_fields(),
            "noise_multiplier": args.noise_multiplier,
            **_sampling_fields(args),
            "sensitivity": "L2 of one step's sum (the noise std is the multiplier times it)",
        }
        line = (
            f"epsilon = {epsilon:.6g} at delta = {args.delta:g} [accountant: {args.accountant}] "
            f"for {args.steps} Gaussian step(s), noise multiplier {args.noise_multiplier:g}, "
            f"sampling rate {args.sampling_rate:g}"
        )
        return record, line + stated(record)
    if args.question == "calibrate":
        epsilons = [float(e) for e in str(args.epsilon).split(",")]
        repeated = sorted({e for e in epsilons if epsilons.count(e) > 1})
        if repeated:
            raise ValueError(f"--epsilon lists {', '.join(f'{e:g}' for e in repeated)} twice")
        multipliers, info = calibration.calibrate_noise_multipliers(
            np.asarray(epsilons), args.delta, args.sampling_rate, args.steps, args.accountant,
            _sampling(args), args.dataset_size, args.neighboring,
        ) if len(epsilons) > 1 else (
            [calibration.calibrate_noise_multiplier(
                epsilons[0], args.delta, args.sampling_rate, args.steps, args.accountant,
                _sampling(args), args.dataset_size, args.neighboring,
            )],
            {},
        )  # fmt: skip
        multipliers = [float(m) for m in multipliers]
        sigmas = [m * args.sensitivity for m in multipliers]
        single = len(epsilons) == 1
        # Each multiplier is the least whose steps are (target, delta)-DP, so the target is
        # what the accountant certifies for it.
        privacy = _sampled_guarantee(args, epsilons[0]).record_fields(sigmas[0])
        if not single:  # the grid's guarantees differ only in their eps and noise
            privacy |= {"epsilon_certified": epsilons, "sigma": sigmas}
        record = {
            "quantity": "noise_multiplier",
            "epsilon": epsilons[0] if single else epsilons,
            **privacy,
            "noise_multiplier": multipliers[0] if single else multipliers,
            **_sampling_fields(args),
            "sensitivity": f"{args.sensitivity:g}, L2 of one step's sum (sigma is the "
            "multiplier times it)",
            **({"grid": info} if info else {}),
        }
        line = "; ".join(
            f"eps={e:g}: noise multiplier {m:.6g} (sigma {m * args.sensitivity:.6g})"
            for e, m in zip(epsilons, multipliers, strict=True)
        )
        line += f" at delta={args.delta:g} [accountant: {args.accountant}]"
        return record, line + stated(record)
    if args.question == "last-iterate":
        setting = last_iterate.LastIterateSetting(
            args.eta, args.lipschitz, args.radius, args.sigma, args.n, args.sampling_rate
        )
        inputs = {
            "eta": args.eta, "lipschitz": args.lipschitz, "radius": args.radius,
            "sigma": args.sigma, "n": args.n, "sampling_rate": args.sampling_rate,
            "steps": setting.iterations, "batch_size": setting.batch_size,
        }  # fmt: skip
        if args.epsilon is not None:
            delta = float(last_iterate.last_iterate_delta(setting, args.epsilon))
            standard = last_iterate.standard_composition_delta(
                setting, args.epsilon, args.compare_accountant
            )
            partition = float(last_iterate.partition_delta(setting, args.epsilon))
            epsilon = args.epsilon
            answers = {
                "quantity": "delta",
                "partition_every_iterate_delta": partition,
                "poisson_every_iterate_delta": last_iterate.poisson_delta(setting, args.epsilon),
                "every_iterate_delta": standard,
                "every_iterate_accountant": f"{args.compare_accountant} (replace-one)",
            }  # fmt: skip
            line = (
                f"delta = {delta:.6g} at eps = {args.epsilon:g} releasing only the last iterate "
                "[accountant: last-iterate contraction (Asoodeh and Calmon)]; releasing every "
                "iterate of "
                f"the partition: delta = {partition:.6g} [one analytic Gaussian release]; as "
                f"independent without-replacement batches: {standard:.6g} "
                f"[{args.compare_accountant}]"
            )
        else:
            epsilon = float(last_iterate.last_iterate_epsilon(setting, args.delta))
            delta = args.delta
            standard = last_iterate.standard_composition_epsilon(
                setting, args.delta, args.compare_accountant
            )
            partition = last_iterate.partition_epsilon(setting, args.delta)
            answers = {
                "quantity": "epsilon",
                "partition_every_iterate_epsilon": partition,
                "poisson_every_iterate_epsilon": last_iterate.poisson_epsilon(setting, args.delta),
                "every_iterate_epsilon": standard,
                "every_iterate_accountant": f"{args.compare_accountant} (replace-one)",
            }  # fmt: skip
            line = (
                f"eps = {epsilon:.6g} at delta = {args.delta:g} releasing only the last iterate "
                "[accountant: last-iterate contraction (Asoodeh and Calmon)]; releasing every "
                "iterate of "
                f"the partition: eps = {partition:.6g} [one analytic Gaussian release]; as "
                f"independent without-replacement batches: {standard:.6g} "
                f"[{args.compare_accountant}]"
            )
        guarantee = PrivacyGuarantee(
            epsilon=epsilon,
            delta=delta,
            accountant="last-iterate-contraction",
            notion="(eps, delta)-DP of the released model (replace-one adjacency)",
            protected="one user's data (one of the n users)",
            trust_model=LAST_ITERATE_TRUST,
            adjacency=Adjacency.REPLACE_ONE,
        )
        record = {
            "quantity": answers.pop("quantity"),
            "epsilon": epsilon,
            **guarantee.record_fields(),
            **answers,
            **inputs,
            "sensitivity": (
                "a user's gradient is L-Lipschitz: one step moves the iterate by at most 2 eta L"
            ),
        }
        return record, line + stated(record)
    epsilon, delta_total = shuffle.shuffle_epsilon(args.epsilon0, args.n, args.delta, args.delta0)
    guarantee = PrivacyGuarantee(
        epsilon=float(epsilon),
        delta=float(delta_total),
        accountant="shuffle-fmt21-thm3.1",
        notion="central (eps, delta)-DP of n shuffled local reports",
        protected="one of the n reporting units (its one report's input, replaced by any other)",
        trust_model=SHUFFLE_TRUST,
        adjacency=Adjacency.REPLACE_ONE,
    )
    record = {
        "quantity": "epsilon", "epsilon": guarantee.epsilon, **guarantee.record_fields(),
        "epsilon0": args.epsilon0, "delta0": args.delta0, "n": args.n,
        "sensitivity": f"each report from an ({args.epsilon0:g}, {args.delta0:g})-LDP randomizer "
        "(any two inputs)",
    }  # fmt: skip
    line = (
        f"epsilon = {epsilon:.6g}, delta = {delta_total:.3g} (central, after shuffling {args.n} "
        f"reports of a {args.epsilon0:g}-LDP randomizer) [accountant: shuffle, FMT21 Thm 3.1]"
    )
    return record, line + stated(record)
