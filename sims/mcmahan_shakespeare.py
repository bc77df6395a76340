"""McMahan et al. 2017, Shakespeare (non-IID by role): FedAvg (E = 5 and E = 1, B = 10) and FedSGD,
rounds to reach 54% test accuracy, beside the paper's Table 2.

    nice python sims/mcmahan_shakespeare.py --out results/mcmahan_shakespeare       # hours
    python sims/mcmahan_shakespeare.py --out results/mcmahan_quick --quick          # minutes

The study is long: every ``--eval-every`` rounds each setup is checkpointed in
``OUT/checkpoints`` (atomically), and the same command resumes it where it stopped (segment ``i``
draws from the seed and ``i`` alone, so a resumed run is the uninterrupted one; other settings
are refused). A setup stops at 54% (``--past-target`` runs all ``--rounds``); ``--setups`` picks
and orders them. ``OUT/results.json`` and ``OUT/accuracy.png`` (the curves, the paper's rounds
marked) are rewritten after every segment (the running setup's row has ``"finished": false``).

The data are jfed's Shakespeare with McMahan et al.'s records (``load_shakespeare("lines",
min_lines=2)``: a client per speaking role, each line a record, the first 80% of a role's lines
train and the rest test); the model is their character LSTM (:class:`jfed.models.CharLSTM`: 8-dim
embedding, two LSTM layers of 256, a softmax over the vocabulary, every next character of a line
predicted, padding not scored). ``--vocabulary leaf`` (LEAF's 80 characters, 83 tokens, the
default) or ``tff`` (TensorFlow Federated's 86, 89 tokens); the paper gives no vocabulary.
Each round a uniform cohort of ``C K`` roles (C = 0.1); the server averages the clients' results
weighted by their record counts n_k (the paper's ``sum_k n_k / m_t``):

- FedSGD (E = 1, B = infinity): each client's gradient over all its training lines, one server
  step ``w -= eta * sum_k n_k g_k / sum_k n_k``;
- FedAvg (E, B): each client runs E epochs of minibatch SGD (batches of B lines, a fresh order
  each epoch) and the server takes the weighted mean of the models.

Test accuracy is the fraction of correctly predicted characters over every test line of every
role, evaluated every ``--eval-every`` rounds; "rounds to 54%" follows the paper: the best
accuracy so far (a monotone curve), linearly interpolated where it crosses the target.

The engine runs the rounds directly (:func:`jfed.engine.simulate`, a small algorithm written here),
in segments of ``--eval-every`` rounds between which the host evaluates. ``--quick`` (the first
``--clients`` roles, at most ``--max-lines`` training lines each, a few rounds) checks the code
path: both algorithms run end to end and are evaluated. Its accuracy is not a result: after 6
rounds the model predicts a space everywhere, and its accuracy is the share of spaces in the test
text (``space_share`` in results.json). The tests run it smaller still.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jfed._io import replacing, write_atomic
from jfed.data.clients import FederatedData, FederatedTask
from jfed.data.shakespeare import VOCABULARIES, load_shakespeare
from jfed.engine import ExecutionPlan, Uniform, simulate
from jfed.models import CharLSTM
from jfed.sweep import checkpoint

TARGET = 0.54
PAPER = {  # Table 2 of McMahan et al. 2017 (arXiv 1602.05629 v4), Shakespeare LSTM, 54%
    ("FedSGD", 1, None): {"u": 1.0, "iid": 2488, "non_iid": 3906},
    ("FedAvg", 1, 50): {"u": 1.5, "iid": 1635, "non_iid": 549},
    ("FedAvg", 5, None): {"u": 5.0, "iid": 613, "non_iid": 597},
    ("FedAvg", 1, 10): {"u": 7.4, "iid": 460, "non_iid": 164},
    ("FedAvg", 5, 50): {"u": 7.4, "iid": 401, "non_iid": 152},
    ("FedAvg", 5, 10): {"u": 37.1, "iid": 192, "non_iid": 41},
}


class Hyper(NamedTuple):
    learning_rate: jax.Array
    start: dict  # the model the segment starts from


@dataclass(frozen=True)
class Round:
    """One round of FedSGD (``batch=None``) or FedAvg (``epochs`` epochs of batches of
    ``batch``) on a uniform cohort, the server weighting clients by their record counts."""

    model: CharLSTM
    cohort: Uniform
    n_max: int
    epochs: int = 1
    batch: int | None = 10

    def init(self, hyper: Hyper, key: jax.Array) -> dict:
        return hyper.start

    def client(self, broadcast, view, key):
        params, hyper = broadcast
        count = view.count.astype(jnp.float32)
        if self.batch is None:  # FedSGD: one gradient over all the client's records
            rows = jnp.arange(self.n_max)
            X, y = view.rows(rows)
            gradient = jax.grad(self.model.loss)(params, X, y, (rows < view.count) * 1.0)
            return {"weighted": jax.tree.map(lambda g: count * g, gradient), "count": count}
        steps = -(-self.n_max // self.batch)

        def epoch(local, epoch_key):
            # real records first in a random order; minibatches past the client's own are no-ops
            real = jnp.arange(self.n_max) < view.count
            order = jnp.argsort(jnp.where(real, jax.random.uniform(epoch_key, (self.n_max,)), 2))
            order = jnp.pad(order, (0, steps * self.batch - self.n_max))

            def step(s, local):
                position = s * self.batch + jnp.arange(self.batch)
                X, y = view.rows(jax.lax.dynamic_slice(order, (s * self.batch,), (self.batch,)))
                weights = (position < view.count).astype(jnp.float32)
                grads = jax.grad(self.model.loss)(local, X, y, weights)
                return jax.tree.map(lambda p, g: p - hyper.learning_rate * g, local, grads)

            # the client's own minibatches only (a loop of as many steps as it has batches:
            # with clients run one at a time, a role of 20 lines does not pay for the longest
            # role's 120 batches)
            own = (view.count + self.batch - 1) // self.batch
            return jax.lax.fori_loop(0, jnp.minimum(own, steps), step, local), None

        local, _ = jax.lax.scan(epoch, params, jax.random.split(key, self.epochs))
        delta = jax.tree.map(jnp.subtract, local, params)
        return {"weighted": jax.tree.map(lambda d: count * d, delta), "count": count}

    def round(self, params, hyper: Hyper, key, clients):
        sums = clients.sample(self.cohort).sum(self.client, (params, hyper))
        mean = jax.tree.map(lambda s: s / jnp.maximum(sums["count"], 1.0), sums["weighted"])
        if self.batch is None:
            params = jax.tree.map(lambda p, g: p - hyper.learning_rate * g, params, mean)
        else:
            params = jax.tree.map(jnp.add, params, mean)
        return params, {"records": sums["count"]}


def capped(population: FederatedData, clients: int, max_lines: int | None) -> FederatedData:
    """The first ``clients`` roles, each with at most ``max_lines`` records."""
    counts = np.asarray(population.counts)[:clients]
    if max_lines is not None:
        counts = np.minimum(counts, max_lines)
    return FederatedData.create(population.store, np.asarray(population.offsets)[:clients], counts)


@functools.cache
def _counter(model: CharLSTM):
    """``(params, X, y) -> (correct, scored)`` for a batch, jitted once a model (every
    evaluation of every algorithm reuses it)."""

    @jax.jit
    def counts(params, X, y):
        logits = model.logits(params, X)
        scored = y != model.pad_label
        right = (jnp.argmax(logits, -1) == y) & scored
        return jnp.sum(right), jnp.sum(scored)

    return counts


def test_accuracy(model: CharLSTM, params, test: FederatedData, batch: int = 2048) -> float:
    """Correct characters over all scored (non-padding) test positions."""
    positions = test.positions()
    pad, counts = model.pad_label, _counter(model)
    right = scored = 0
    for start in range(0, len(positions), batch):
        chunk = positions[start : start + batch]
        chunk = np.pad(chunk, (0, batch - len(chunk)), constant_values=chunk[-1])
        X, y = test.store.gather(jnp.asarray(chunk))
        valid = np.arange(batch) < len(positions) - start
        y = jnp.where(jnp.asarray(valid)[:, None], y, pad)
        r, s = counts(params, X, y)
        right, scored = right + int(r), scored + int(s)
    return right / max(scored, 1)


def space_share(test: FederatedData, space: int, pad: int) -> float:
    """The share of scored test positions whose target is a space: the accuracy of a model that
    predicts a space everywhere (the first thing a character model learns)."""
    _, y = test.store.gather(jnp.asarray(test.positions()))
    y = np.asarray(y)
    return float(np.sum(y == space) / max(np.sum(y != pad), 1))


def rounds_to_target(curve: list[tuple[int, float]], target: float = TARGET) -> float | None:
    """The paper's measure: the round where the best-so-far accuracy crosses ``target``,
    linearly interpolated between evaluations (None if it never does)."""
    best, previous = 0.0, (0, 0.0)
    for round_, accuracy in curve:
        best = max(best, accuracy)
        if best >= target:
            r0, a0 = previous
            return r0 + (target - a0) / (best - a0) * (round_ - r0) if best > a0 else round_
        previous = (round_, best)
    return None


class Checkpoint(NamedTuple):
    """Where a setup's run stands after a segment: the model, the curve so far and the seconds
    its rounds took (evaluation excluded)."""

    params: dict
    curve: list
    seconds: float


def _identity(name: str, args: argparse.Namespace) -> dict:
    """What a checkpoint of ``name`` must have been run with to be resumed."""
    keys = ("clients", "max_lines", "fraction", "eval_every", "fedavg_lr", "fedsgd_lr", "hidden",
            "vocabulary", "chunk", "seed")  # fmt: skip
    return {"setup": name, **{k: getattr(args, k) for k in keys}}


def save_checkpoint(path: str, identity: dict, state: Checkpoint) -> None:
    """``state`` written to ``path`` whole or not at all (:func:`jfed.sweep.checkpoint.write`:
    the model's leaves as its server state, the curve and seconds in its meta)."""
    meta = {"round": state.curve[-1][0], "identity": identity, "curve": state.curve,
            "seconds": state.seconds}  # fmt: skip
    checkpoint.write(path, meta, [np.asarray(leaf) for leaf in jax.tree.leaves(state.params)],
                     [], [])  # fmt: skip


def load_checkpoint(path: str, identity: dict, params: dict) -> Checkpoint | None:
    """The checkpoint at ``path`` (``params`` gives the tree's structure), or None if there is
    none; ``SystemExit`` naming the difference if it was run with other settings."""
    saved = checkpoint.read(path)
    if saved is None:
        return None
    if saved.meta["identity"] != identity:
        raise SystemExit(f"{path} was run with {saved.meta['identity']}, not {identity}: "
                         "use the same settings or another --out")  # fmt: skip
    leaves = [jnp.asarray(leaf) for leaf in saved.server]
    curve = [(int(r), float(a)) for r, a in saved.meta["curve"]]
    return Checkpoint(jax.tree.unflatten(jax.tree.structure(params), leaves), curve,
                      float(saved.meta["seconds"]))  # fmt: skip


def run(name, algorithm, population, test, learning_rate, rounds, eval_every, seed, chunk,
        checkpoint_path=None, identity=None, stop_at=None, on_segment=None):  # fmt: skip
    """``(curve, seconds)``: test accuracy ``[(round, accuracy)]`` every ``eval_every`` rounds
    and the seconds the rounds took. With ``checkpoint_path`` the run is saved after every
    segment and resumed from its last one (segment ``i`` draws from ``(seed, i)`` alone, so a
    resumed run is the uninterrupted one); it stops once the accuracy reaches ``stop_at``;
    ``on_segment(curve, seconds)`` is called after every segment."""
    model = algorithm.model
    params = model.init(jax.random.key(seed))
    plan = ExecutionPlan(block_size=chunk, chunk_size=chunk)
    state = load_checkpoint(checkpoint_path, identity, params) if checkpoint_path else None
    if state is None:
        state = Checkpoint(params, [(0, test_accuracy(model, params, test))], 0.0)
    else:
        print(f"{name}: resumed at round {state.curve[-1][0]}", flush=True)
    params, curve, seconds = state
    for segment, start in enumerate(range(0, rounds, eval_every)):
        if start < curve[-1][0]:
            continue  # done before the checkpoint
        if stop_at is not None and max(a for _, a in curve) >= stop_at:
            break
        length = min(eval_every, rounds - start)
        hyper = Hyper(jnp.float32(learning_rate), params)
        key = jax.random.fold_in(jax.random.key(seed + 1), segment)
        tic = time.perf_counter()
        params, _ = simulate(algorithm, population, hyper, key, length, plan)
        params = jax.block_until_ready(params)
        seconds += time.perf_counter() - tic
        curve.append((start + length, test_accuracy(model, params, test)))
        print(f"{name}: round {start + length}: test accuracy {curve[-1][1]:.4f} "
              f"({seconds / (start + length):.1f} s a round)", flush=True)  # fmt: skip
        if checkpoint_path:
            save_checkpoint(checkpoint_path, identity, Checkpoint(params, curve, seconds))
        if on_segment is not None:
            on_segment(curve, seconds)
    return curve, seconds


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true", help="the code path, reduced (minutes)")
    parser.add_argument("--clients", type=int, default=None, help="the first N roles (all)")
    parser.add_argument("--max-lines", type=int, default=None, help="cap a role's train lines")
    parser.add_argument("--fraction", type=float, default=0.1, help="C")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--eval-every", type=int, default=None)
    parser.add_argument("--fedavg-lr", type=float, default=1.47, help="the paper's Figure 3 rate")
    parser.add_argument("--fedsgd-lr", type=float, default=1.47)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--vocabulary", choices=sorted(VOCABULARIES), default="leaf",
                        help="LEAF's 80 characters or TFF's 86 (the paper gives none)")  # fmt: skip
    parser.add_argument("--chunk", type=int, default=1, help="clients vmapped at once")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--setups", default=",".join(SETUPS),
                        help=f"which to run, in order (of {', '.join(SETUPS)})")  # fmt: skip
    parser.add_argument("--past-target", action="store_true",
                        help="run every round of --rounds (default: stop at 54%%)")  # fmt: skip
    args = parser.parse_args(argv)
    args.setups = [name.strip() for name in args.setups.split(",") if name.strip()]
    unknown = [name for name in args.setups if name not in SETUPS]
    if unknown or not args.setups:
        parser.error(f"--setups: {unknown or 'none given'}; choose from {', '.join(SETUPS)}")
    if args.quick:
        args.clients = args.clients or 60
        args.max_lines = args.max_lines or 40
        args.rounds = args.rounds or 6
        args.eval_every = args.eval_every or 2
    args.rounds = args.rounds or 4_000
    args.eval_every = args.eval_every or 20
    return args


SETUPS = {  # name: (algorithm, E, B), in the order the study runs them
    "fedavg-e5-b10": ("FedAvg", 5, 10),
    "fedavg-e1-b10": ("FedAvg", 1, 10),
    "fedsgd": ("FedSGD", 1, None),
}


def plot(rows: list[dict], path: str) -> None:
    """Test accuracy against rounds for every setup run, the 54% target and the paper's rounds to
    it (non-IID) marked, written to ``path`` (PNG)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4.2), layout="constrained")
    axes = figure.subplots()
    for index, row in enumerate(rows):
        color = f"C{index}"
        rounds, accuracy = zip(*row["curve"], strict=True)
        label = f"{row['algorithm']} E={row['E']} B={row['B'] or 'inf'}"
        axes.plot(rounds, accuracy, color=color, label=f"jfed {label}")
        axes.axvline(row["paper_rounds_to_54_non_iid"], color=color, linestyle=":",
                     label=f"paper: 54% at round {row['paper_rounds_to_54_non_iid']}")  # fmt: skip
    axes.axhline(TARGET, color="grey", linewidth=0.8)
    last = max(max(row["rounds_run"], row["paper_rounds_to_54_non_iid"]) for row in rows)
    axes.set_xscale("symlog", linthresh=1.0)  # matplotlib's default is linear to 2
    axes.set(xlim=(0, last * 1.2), ylim=(0, 0.65),
             xlabel="communication rounds (linear to 1, then logarithmic)",
             ylabel="test accuracy (characters)",
             title="Shakespeare LSTM, non-IID by role (McMahan et al. 2017, Table 2)")  # fmt: skip
    axes.legend(fontsize=7)
    with replacing(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=120)


def study(args: argparse.Namespace, task: FederatedTask) -> list[dict]:
    """The setups of ``args.setups`` (FedAvg E = 5 and E = 1 with B = 10, FedSGD) on ``task``
    (:func:`load_shakespeare`'s lines): their curves, rounds to 54% and seconds a round written
    to ``args.out``/results.json (after each setup, atomically) and plotted in
    ``args.out``/accuracy.png; every segment checkpointed in ``args.out``/checkpoints, from
    where a second call resumes. Returns the table's rows."""
    vocabulary = VOCABULARIES[task.details["vocabulary"]]
    clients = args.clients or task.n_clients
    population = capped(task.train, clients, args.max_lines)
    test = task.test.subset(np.arange(clients))
    cohort = Uniform(max(1, round(args.fraction * clients)))
    model = CharLSTM(vocabulary=vocabulary.size, hidden=args.hidden, pad_label=vocabulary.pad)
    counts = np.asarray(population.counts)
    spaces = space_share(test, vocabulary.letters.index(" "), vocabulary.pad)
    print(f"{clients} roles, {counts.sum()} training lines (mean {counts.mean():.1f}, max "
          f"{counts.max()}), {test.n_records} test lines ({spaces:.3f} of their characters are "
          f"spaces); cohort {cohort.size}; u(E=1, B=10) = {counts.mean() / 10:.1f}",
          flush=True)  # fmt: skip
    checkpoints = os.path.join(args.out, "checkpoints")
    os.makedirs(checkpoints, exist_ok=True)
    rows: list[dict] = []

    def row_of(setup: str, curve: list, seconds: float, finished: bool) -> dict:
        name, epochs, batch = SETUPS[setup]
        paper = PAPER[(name, epochs, batch)]
        rounds_run = curve[-1][0]
        return {"algorithm": name, "E": epochs, "B": batch,
                "learning_rate": args.fedsgd_lr if batch is None else args.fedavg_lr,
                "finished": finished, "rounds_run": rounds_run,
                "seconds_per_round": seconds / max(rounds_run, 1),
                "rounds_to_54": rounds_to_target(curve), "final_accuracy": curve[-1][1],
                "paper_rounds_to_54_non_iid": paper["non_iid"], "paper_u": paper["u"],
                "curve": curve}  # fmt: skip

    def write(current: list[dict]) -> None:
        summary = {"setup": vars(args), "clients": clients, "cohort": cohort.size,
                   "train_lines": int(counts.sum()), "space_share": spaces,
                   "rows": current}  # fmt: skip
        write_atomic(os.path.join(args.out, "results.json"), json.dumps(summary, indent=1))
        plot(current, os.path.join(args.out, "accuracy.png"))

    for setup in args.setups:
        _, epochs, batch = SETUPS[setup]
        algorithm = Round(model, cohort, population.n_max, epochs, batch)
        curve, seconds = run(
            setup, algorithm, population, test,
            args.fedsgd_lr if batch is None else args.fedavg_lr, args.rounds, args.eval_every,
            args.seed, args.chunk, os.path.join(checkpoints, f"{setup}.npz"),
            _identity(setup, args), None if args.past_target else TARGET,
            lambda curve, seconds, setup=setup: write([*rows, row_of(setup, curve, seconds,
                                                                     False)]),
        )  # fmt: skip
        rows.append(row_of(setup, curve, seconds, True))
        write(rows)
    print("\n| algorithm | E | B | rounds to 54% (jfed) | paper, non-IID | rounds run | "
          "accuracy at end | s / round |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        reached = "not reached" if row["rounds_to_54"] is None else f"{row['rounds_to_54']:.0f}"
        print(f"| {row['algorithm']} | {row['E']} | {row['B'] or 'inf'} | {reached} | "
              f"{row['paper_rounds_to_54_non_iid']} | {row['rounds_run']} | "
              f"{row['final_accuracy']:.4f} | {row['seconds_per_round']:.1f} |")  # fmt: skip
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    study(args, load_shakespeare("lines", min_lines=2, vocabulary=args.vocabulary))


if __name__ == "__main__":
    main()
