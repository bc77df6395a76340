"""SCAFFOLD, Ditto and DP-FTRL on the engine's per-client state and schedules.

- SCAFFOLD's server control variate is the mean of the clients' stored ones (no noise), with a
  Poisson cohort that pads every round (where the old -1 padding would have written the last
  client's row); negative control: the same check on a run whose clients forget their control
  variates fails. Another chunk width gives the same states (``-m slow``).
- DP-SCAFFOLD's two releases are both accounted: its certified eps is dp-accounting's for ONE
  sampled Gaussian of the combined multiplier over the rounds; one release alone gives less.
- The FTRL methods' certified eps equals an independent computation: the tree through
  dp-accounting's tree-aggregation event at the node noise that ran, BLT and independent noise
  from their Toeplitz matrices (jax-privacy's coefficients) with the sensitivity found by brute
  force over the schedule's participation patterns, through dp-accounting's RDP.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jfed
from jfed import privacy
from jfed.algorithms import scaffold
from jfed.algorithms.local_training import LocalTraining
from jfed.data import dirichlet_digits
from jfed.engine import ExecutionPlan, Poisson, simulate
from jfed.methods import build_experiment, declared
from jfed.models import DenseClassifier

DIGITS = dict(dataset="digits-dirichlet", clients=30, dirichlet=0.1, batch=10)


@dataclasses.dataclass(frozen=True)
class Forgetful(scaffold.Scaffold):
    """Negative control: a client keeps a control variate of zeros (it forgets its own)."""

    def client(self, broadcast, records, key, control_i):
        messages, new_control = super().client(broadcast, records, key, control_i)
        return messages, jax.tree.map(jnp.zeros_like, new_control)


@functools.cache
def scaffold_run(chunk: int, algorithm=scaffold.Scaffold):
    task = dirichlet_digits(30, 0.1, 0)
    model = DenseClassifier(64, 10)
    training = LocalTraining(int(task.train.features.shape[1]), 10, 1)
    program = algorithm(model, training, Poisson(0.2, capacity=12), privacy.CohortMean(),
                        privacy.PlainSum(), n_clients=30)  # fmt: skip
    f32 = jnp.float32
    hyper = scaffold.Hyperparams(f32(0.1), f32(1.0), f32(0.0), privacy.NoParams(),
                                 privacy.NoParams())  # fmt: skip
    plan = ExecutionPlan(block_size=chunk, chunk_size=chunk)
    return simulate(program, task.train, hyper, jax.random.key(0), 6, plan)


def control_gap(final) -> float:
    """The largest |c - mean_i c_i| over the coordinates, over the largest |c|."""
    gap = jax.tree.map(lambda c, ci: jnp.max(jnp.abs(c - ci.mean(0))), final.server.control,
                       final.clients)  # fmt: skip
    size = jax.tree.map(lambda c: jnp.max(jnp.abs(c)), final.server.control)
    return float(max(jax.tree.leaves(gap))) / float(max(jax.tree.leaves(size)))


def test_scaffolds_control_variate_is_the_mean_of_the_clients_stored_ones():
    """Float rounding: c is a sum of 6 rounds of sums over at most 12 clients, divided by N; the
    mean of 30 stored rows another 30 additions: well within 100 float32 ulps of |c|. Chunks of
    8 pad the cohort of capacity 12 to 16 slots: padding in every round."""
    tolerance = 100 * np.finfo(np.float32).eps
    final, infos = scaffold_run(8)
    sizes = np.asarray(infos["cohort_size"])
    assert np.all(sizes < 12) and sizes.max() > 0  # padding in every round
    assert control_gap(final) < tolerance
    visited = np.any(np.asarray(final.clients["output"]["w"]) != 0, axis=(1, 2))
    assert 0 < visited.sum() < 30  # some clients never drawn: their rows stayed zero
    assert control_gap(scaffold_run(8, Forgetful)[0]) > 0.5  # negative control


# a third compiled program; tests/test_client_state.py checks every block width's states
# bit for bit for the engine in general
@pytest.mark.slow
def test_scaffolds_states_are_the_same_for_another_chunk_width():
    """Chunks of 16 (one chunk, 4 padded slots) give the chunks-of-8 run's states (to float
    rounding of the sums' order) and the same control-variate identity."""
    tolerance = 100 * np.finfo(np.float32).eps
    final, infos = scaffold_run(16)
    assert np.all(np.asarray(infos["cohort_size"]) < 12)
    assert control_gap(final) < tolerance
    for a, b in zip(jax.tree.leaves(scaffold_run(8)[0]), jax.tree.leaves(final), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


SPECIAL = dp_accounting.NeighboringRelation.REPLACE_SPECIAL
"""dp-accounting states the tree's RDP for replacing a client's contributions by zeros: the
Gaussian's add-or-remove sensitivity."""


def _rdp_epsilon(event, delta: float, relation=None) -> float:
    relation = relation or dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    accountant = dp_accounting.rdp.RdpAccountant(neighboring_relation=relation)
    return accountant.compose(event).get_epsilon(delta)


def test_dp_scaffold_accounts_both_releases_together():
    config = declared.DPScaffold(**DIGITS, rounds=20, cohort_size=6, epsilon=4.0, delta=1e-4,
                                 accountant="rdp", noise="float")  # fmt: skip
    experiment = build_experiment(config)
    experiment.prepare([config])
    _, fields = experiment.calibrated(config)
    releases = experiment.ledger().releases
    assert len(releases) == 2
    assert {type(r.aggregator).__name__ for r in releases} == {"FixedDenominatorMean",
                                                               "GaussianSum"}  # fmt: skip
    z = fields["noise_multiplier"]
    rate = releases[0].cohort.rate
    joint = dp_accounting.PoissonSampledDpEvent(
        rate, dp_accounting.GaussianDpEvent(z / math.sqrt(2))
    )
    expected = _rdp_epsilon(
        dp_accounting.SelfComposedDpEvent(joint, 20), fields["delta_accountant"]
    )
    assert fields["epsilon_certified"] == pytest.approx(expected, rel=1e-6)
    assert fields["epsilon_certified"] <= 4.0
    one = dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(z))
    alone = _rdp_epsilon(dp_accounting.SelfComposedDpEvent(one, 20), fields["delta_accountant"])
    assert alone < 0.8 * expected  # a ledger that missed the second release would claim this


# -- the FTRL family ---------------------------------------------------------------------------

FTRL = dict(DIGITS, clients=40, cohort_size=10, rounds=12, epsilon=3.0, delta=1e-4,
            accountant="rdp")  # fmt: skip
BLT = privacy.BltNoise(buf_decay=(0.9, 0.4), output_scale=(0.2, 0.3))


def _certified(config):
    experiment = build_experiment(config)
    experiment.prepare([config])
    return experiment, *experiment.calibrated(config)


def _brute_force_sensitivity(coefficients: np.ndarray, rounds: int, period: int) -> float:
    """max over the cyclic patterns (a residue class s mod b, every b-th round from s) of
    sqrt(sum_{i,j in p} |X_ij|), X = C^T C of the lower-triangular Toeplitz C."""
    lags = np.subtract.outer(np.arange(rounds), np.arange(rounds))
    strategy = np.where(lags >= 0, coefficients[np.clip(lags, 0, None)], 0.0)
    gram = np.abs(strategy.T @ strategy)
    return max(math.sqrt(gram[np.ix_(p, p)].sum())
               for p in (np.arange(s, rounds, period) for s in range(period)))  # fmt: skip


def test_tree_dp_ftrl_certifies_dp_accountings_tree_aggregation_eps():
    """Cyclic groups of 10 out of 40 (b = 4), a tree restarted every pass of 4 rounds: k = 3
    trees, one participation each. dp-accounting's SingleEpochTreeAggregationDpEvent at the node
    noise that ran (sigma / C), composed over the 3 trees, gives the record's eps. Negative
    control: a tree over all 12 rounds (deeper) spends more at the same node noise."""
    for honaker in (True, False):
        config = declared.DPFTRL(**FTRL, honaker=honaker, noise="float")
        fields = _certified(config)[-1]
        assert fields["participations"] == 3 and fields["min_separation"] == 4
        node = fields["sigma"] / config.update_clip
        tree = dp_accounting.SingleEpochTreeAggregationDpEvent(node, [4])
        # at the accountant's share of delta (the float noise's reach takes the rest)
        expected = _rdp_epsilon(dp_accounting.SelfComposedDpEvent(tree, 3),
                                fields["delta_accountant"], SPECIAL)  # fmt: skip
        assert fields["epsilon_certified"] == pytest.approx(expected, rel=1e-6)
        assert fields["epsilon_certified"] <= config.epsilon
        # negative control: a tree without restarts is deeper, the same noise spends more
        deeper = dp_accounting.SingleEpochTreeAggregationDpEvent(node, [12])
        assert _rdp_epsilon(dp_accounting.SelfComposedDpEvent(deeper, 3), 1e-4, SPECIAL) > expected


def test_blt_and_independent_noise_certify_the_brute_force_sensitivity(monkeypatch):
    """BLT (a fixed strategy: jax-privacy's coefficients for it) and independent noise: the
    Gaussian of multiplier sigma / (C sens), sens found by brute force over the 4 cyclic
    patterns, gives the record's eps. Negative control: the sensitivity of one participation."""
    from jax_privacy.matrix_factorization import buffered_toeplitz

    import jfed.methods.dp_ftrl as ftrl_methods

    monkeypatch.setattr(ftrl_methods, "optimized_blt", lambda participation, buffers: BLT)
    with jax.enable_x64():
        reference = buffered_toeplitz.BufferedToeplitz.build(
            buf_decay=list(BLT.buf_decay), output_scale=list(BLT.output_scale)
        )
        blt_coefficients = np.asarray(reference.toeplitz_coefs(12), np.float64)
    cases = [
        (declared.BltDPFTRL(**FTRL), blt_coefficients),
        (declared.DPFTRL(**FTRL, noise_strategy="independent", noise="float"), np.eye(12)[0]),
    ]
    for config, coefficients in cases:
        _, _, fields = _certified(config)
        sens = _brute_force_sensitivity(coefficients, 12, 4)
        assert fields["sensitivity"] == pytest.approx(sens, rel=1e-9)
        event = dp_accounting.GaussianDpEvent(fields["sigma"] / (config.update_clip * sens))
        expected = _rdp_epsilon(event, fields["delta_accountant"])
        assert fields["epsilon_certified"] == pytest.approx(expected, rel=1e-6)
        once = dp_accounting.GaussianDpEvent(fields["sigma"] / config.update_clip)
        assert _rdp_epsilon(once, fields["delta_accountant"]) < 0.9 * expected


def test_dp_ditto_reports_personal_and_global_accuracy():
    record = jfed.run(declared.DPDitto(**DIGITS, rounds=3, cohort_size=6, epsilon=8.0))
    for name in ("test_accuracy", "personal_test_accuracy", "global_test_accuracy_reweighted"):
        assert 0.0 <= record[name] <= 1.0, name
    assert 0 < record["clients_personalised"] <= 30
    assert record["epsilon_certified"] <= 8.0


# -- the float noise's bounded reach ---------------------------------------------------------


@pytest.mark.parametrize("name", ["DPDitto", "DPScaffold", "DPFTRL"])
def test_the_float_noises_bounded_reach_is_reserved_from_delta_and_large_eps_refused(name):
    """The float32 normals never leave 9 standard deviations, so an output whose noise would
    have to lie beyond them under a neighbouring input is impossible there: that mass is added
    to delta. Its value equals the union bound computed here from the normal tail (Q(9 - s), s
    the shift in standard deviations per release: 1 / z for each sampled release at rate K / N
    over R rounds; for DP-FTRL every fresh draw of the run at rate 1); the accountant's delta
    plus it stays within the stated delta. Negative control: at a noise multiplier of 0.12 the
    reach alone needs more than half the delta, which the calibration refuses (DP-FTRL: at eps
    100; the sampled methods' small populations refuse that eps for their cohort's overflow
    first)."""
    from scipy.stats import norm

    from jfed._validation import UsageError

    ftrl = name == "DPFTRL"
    config = declared.DPFTRL(**FTRL, noise="float") if ftrl else getattr(declared, name)(
        **DIGITS, rounds=5, cohort_size=6, epsilon=4.0, delta=1e-4, accountant="rdp",
        noise="float")  # fmt: skip
    experiment, hyper, fields = _certified(config)

    def union_bound(z: float) -> float:
        if ftrl:
            noise = experiment.algorithm.aggregator.inner.noise
            return sum(noise.draws(t) for t in range(config.rounds)) * norm.sf(9.0 - 1.0 / z)
        releases = len(experiment.ledger().releases)
        return config.rounds * (6 / 30) * releases * norm.sf(9.0 - 1.0 / z)

    assert fields["delta_sampler"] == pytest.approx(
        union_bound(float(hyper.privacy.noise_multiplier) if ftrl else fields["noise_multiplier"]),
        rel=1e-6,
    )
    assert fields["delta_accountant"] + fields["delta_overflow"] + fields["delta_sampler"] \
        <= fields["delta"] * (1 + 1e-12)  # fmt: skip
    small = experiment.reach_delta(experiment.hyperparams(config, 0.12), config)
    assert small == pytest.approx(min(1.0, union_bound(0.12)), rel=1e-6) and small > 0.5e-4
    if ftrl:
        with pytest.raises(UsageError, match="bounded reach alone adds delta"):
            _certified(config.replace(epsilon=100.0))
