"""``jfed audit``: an empirical privacy audit of a local randomizer, run as the methods run it.

    jfed audit two-point --epsilon 1
    jfed audit randomized-response --epsilon 0.5,1,2 --samples 400000
    jfed audit gaussian --epsilon 1 --delta 1e-5 --json -
    jfed audit modulated --epsilon 2 --delta 1e-5

Each audit draws ``--samples`` outputs on each of two worst-case inputs (the canaries), chooses
a threshold test on half of them and bounds eps from below with Clopper-Pearson intervals on the
other half (:mod:`jfed.privacy.audit`): the bound holds with probability ``--confidence``. A
bound above the claimed eps proves the claim false (verdict VIOLATED); a bound below it is
consistent with the claim, not a proof of it. The samples cap what can be proven: every row
prints the largest eps its samples can detect (about ``ln(N / 2 / ln(2 / (1 - confidence)))``
for N samples per input), and a claim at or above it is "inconclusive", never "consistent".
"""

from __future__ import annotations

import argparse
import math

from jfed._validation import UsageError

RANDOMIZERS = ("two-point", "randomized-response", "gaussian", "modulated")
# methods named by the randomizer they run (their per-report claim is what is audited)
METHOD_RANDOMIZERS = {
    "ldp-fl": "two-point",
    "estimation": "randomized-response",
    "modulated-one-shot": "modulated",
    "modulated-iterative": "modulated",
}
APPROXIMATE = ("gaussian", "modulated")
"""The randomizers whose claim has a delta (the others are pure eps-DP)."""
DEFAULT_DELTA = 1e-5
MAX_SAMPLES = 10**8
MIN_SAMPLES = 100


def add_parser(commands) -> None:
    audit = commands.add_parser(
        "audit",
        help="empirical lower bound on the eps of a local randomizer (Clopper-Pearson), "
        "against its claim",
    )
    audit.add_argument(
        "randomizer", metavar="METHOD", choices=RANDOMIZERS + tuple(METHOD_RANDOMIZERS),
        help=f"the local randomizer: {', '.join(RANDOMIZERS)}; or a method that runs one: "
        + ", ".join(f"{m} ({r})" for m, r in METHOD_RANDOMIZERS.items()),
    )  # fmt: skip
    audit.add_argument(
        "--epsilon", required=True, help="claimed eps per report, or a comma-separated list"
    )
    audit.add_argument(
        "--delta", type=float, default=None,
        help="claimed delta of the (eps, delta)-DP randomizers (gaussian, modulated; 1e-5)",
    )  # fmt: skip
    audit.add_argument(
        "--samples", type=int, default=200_000, help="outputs drawn per input (200000)"
    )
    audit.add_argument(
        "--confidence", type=float, default=0.95, help="confidence of the lower bound (0.95)"
    )
    audit.add_argument("--seed", type=int, default=0, help="PRNG seed (0)")
    audit.add_argument("--json", metavar="PATH", help="write the JSON record ('-': stdout)")


def _named(given: str, randomizer: str) -> str:
    """``two-point``, or ``ldp-fl's two-point randomizer`` for a method's."""
    return given if given == randomizer else f"{given}'s {randomizer} randomizer"


def checked(args: argparse.Namespace) -> list[float]:
    """The claimed eps list; ``UsageError`` naming the first flag out of range."""
    from jfed.cli.checks import parse_numbers

    epsilons = parse_numbers("--epsilon", args.epsilon)
    for epsilon in epsilons:
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise UsageError(f"expected --epsilon > 0 and finite, got {epsilon:g}")
    if len(set(epsilons)) != len(epsilons):
        raise UsageError(f"expected distinct values in --epsilon, got {args.epsilon!r}")
    if not MIN_SAMPLES <= args.samples <= MAX_SAMPLES:
        raise UsageError(
            f"expected --samples in [{MIN_SAMPLES}, {MAX_SAMPLES:g}], got {args.samples}"
        )
    if not 0.0 < args.confidence < 1.0:
        raise UsageError(f"expected --confidence in (0, 1), got {args.confidence:g}")
    randomizer = METHOD_RANDOMIZERS.get(args.randomizer, args.randomizer)
    if args.delta is not None and randomizer not in APPROXIMATE:
        raise UsageError(
            f"--delta applies only to the (eps, delta)-DP randomizers ({', '.join(APPROXIMATE)}):"
            f" {_named(args.randomizer, randomizer)} is pure eps-DP"
        )
    if args.delta is None:
        args.delta = DEFAULT_DELTA
    if not 0.0 < args.delta < 1.0:
        raise UsageError(f"expected --delta in (0, 1), got {args.delta:g}")
    if not 0 <= args.seed < 2**32:
        raise UsageError(f"expected --seed in [0, 2^32), got {args.seed}")
    return epsilons


def audits(args: argparse.Namespace) -> list:
    """Run the audit of every claimed eps: a list of
    :class:`~jfed.privacy.audit.RandomizerAudit`. A claim the randomizer refuses is bad
    input."""
    epsilons = checked(args)
    import jax

    from jfed.privacy import audit

    randomizer = METHOD_RANDOMIZERS.get(args.randomizer, args.randomizer)
    results = []
    for index, epsilon in enumerate(epsilons):
        key = jax.random.fold_in(jax.random.key(args.seed), index)
        common = dict(samples=args.samples, confidence=args.confidence)
        if randomizer == "two-point":
            results.append(audit.audit_two_point(key, epsilon, **common))
        elif randomizer == "randomized-response":
            results.append(audit.audit_randomized_response(key, epsilon, **common))
        elif randomizer == "gaussian":
            results.append(audit.audit_gaussian(key, epsilon, args.delta, **common))
        else:
            from jfed.algorithms import modulated

            try:
                results.append(modulated.audit_report(key, epsilon, args.delta, **common))
            except ValueError as error:
                raise UsageError(f"modulated: {error}") from error
    return results


def table(results: list) -> str:
    """The human answer: one line per audit."""
    header = ("randomizer", "claimed eps", "notion", "adjacency", "unit", "lower bound",
              "detectable up to", "samples/input", "confidence", "verdict")  # fmt: skip
    rows = [header]
    for result in results:
        record = result.record()
        claim = f"{record['claimed_epsilon']:g}"
        notion = record["notion"]
        if record["delta"]:
            notion += f", delta={record['delta']:g}"
        rows.append((
            record["randomizer"], claim, notion, record["adjacency"], record["unit"],
            f"{record['epsilon_lower_bound']:.4f}",
            f"{record['largest_detectable_epsilon']:.4f}", str(record["samples"]),
            f"{record['confidence']:g}", record["verdict"],
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def run(args: argparse.Namespace) -> int:
    """``jfed audit``: print the table (not with ``--json -``) and write the record."""
    results = audits(args)
    if args.json != "-":
        print(table(results))
        print(
            "lower bound: eps proven by the samples (Clopper-Pearson, one-sided, at the given "
            "confidence, half of the samples per input); VIOLATED: above the claim; detectable "
            "up to: the largest eps these samples can prove (outputs never overlapping); "
            "inconclusive: a claim at or above it, which no result of these samples could refute"
        )
    if args.json:
        from jfed.report import write

        record = {
            "command": "audit",
            "method": args.randomizer,
            "seed": args.seed,
            "audits": [result.record() for result in results],
        }
        write(record, args.json)
    return 0
