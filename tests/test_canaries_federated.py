"""Canary clients inside a federated run (jfed.privacy.canary_aggregator.WithCanaries).

A small algorithm built on the engine's clients API, as DP-FedAvg's round is: a Poisson cohort
(q = 0.1 of N = 1,000 clients) sends clipped updates (C = 1), the aggregator adds N(0, (z C)^2)
to their sum and divides by the fixed denominator q N, the server adds the average to its model.
Its certified eps is the one the engine's ledger composes (PLD over R = 10 rounds); the audit
wraps the same aggregator with M = 500 canaries sampled at q. The broken run's aggregator adds
z / 10 of noise while its event states z (a deliberate bug, written here only:
``MisScaledGaussianSum`` at noise scale 0.1). Seeds are fixed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant

from jfed import random as jfed_random
from jfed.data.population import ArrayClients
from jfed.engine import Poisson, simulate, trace_releases
from jfed.privacy import canaries, canary_aggregator
from jfed.privacy.aggregators import FixedDenominatorMean, GaussianSum, GaussianSumParams
from jfed.privacy.canary_aggregator import CanaryState, WithCanaries, audit

N, DIM, RATE, ROUNDS, CANARIES = 1000, 2000, 0.1, 10, 500
NOISE, CLIP, DELTA = 1.5, 1.0, 1e-5  # certified eps 1.30


class Hyper(NamedTuple):
    privacy: Any


class State(NamedTuple):
    model: jax.Array
    aggregator: Any


@dataclass(frozen=True)
class MeanUpdates:
    """The server adds the private average of its cohort's updates ``x_i y_i`` to its model."""

    aggregator: Any

    def init(self, hyper: Hyper, key: jax.Array) -> State:
        model = jnp.zeros((DIM,), jnp.float32)
        return State(model, self.aggregator.init(hyper.privacy, model))

    def client(self, model, record, key):
        x, y = record
        return x * y

    def round(self, state: State, hyper: Hyper, key: jax.Array, clients: Any):
        cohort = clients.sample(Poisson(RATE))
        average, aggregator_state, diagnostics = cohort.aggregate(
            self.aggregator, hyper.privacy, state.aggregator, self.client, state.model, key
        )
        return State(state.model + average, aggregator_state), diagnostics


class ScaledParams(NamedTuple):
    clip_norm: Any
    noise_multiplier: Any
    noise_scale: Any


@dataclass(frozen=True)
class MisScaledGaussianSum(GaussianSum):
    """GaussianSum with a bug when ``noise_scale != 1``: it adds ``noise_scale z C`` of noise
    and states z in its event (at ``noise_scale = 1`` its release is GaussianSum's, number for
    number). The scale is a hyper-parameter so that the correct and the broken run share one
    compiled program."""

    Params: ClassVar[type] = ScaledParams

    def release(self, params, state, summed, key):
        noise = GaussianSumParams(params.clip_norm, params.noise_multiplier * params.noise_scale)
        return super().release(noise, state, summed, key)

    def event(self, params):
        return super().event(GaussianSumParams(params.clip_norm, params.noise_multiplier))


def population() -> ArrayClients:
    rng = np.random.default_rng(0)
    features = rng.normal(size=(N, DIM)) * (2.0 / np.sqrt(DIM))  # norms near 2: all clipped
    return ArrayClients.from_numpy(features, rng.choice([-1.0, 1.0], N))


def hyper(noise_scale: float | None = None, numbers=jnp.float32) -> Hyper:
    """The run's hyper-parameters: GaussianSum's, or the mis-scaled sum's with ``noise_scale``
    (``numbers=float``: as the host reads them)."""
    if noise_scale is None:
        return Hyper(GaussianSumParams(numbers(CLIP), numbers(NOISE)))
    return Hyper(ScaledParams(numbers(CLIP), numbers(NOISE), numbers(noise_scale)))


def run_event(algorithm, clients, noise_scale=None):
    """What the run states: the ledger's releases and the cohort's sampling over R rounds."""
    host = hyper(noise_scale, float)
    return trace_releases(algorithm, clients, hyper(noise_scale)).event(host, ROUNDS)


def certified_epsilon(event) -> float:
    """What the run claims: its event under PLD at DELTA."""
    accountant = pld_privacy_accountant.PLDAccountant()
    accountant.compose(event)
    return accountant.get_epsilon(DELTA)


PLAIN = MeanUpdates(FixedDenominatorMean(GaussianSum(), RATE * N))
AUDITED = MeanUpdates(WithCanaries(FixedDenominatorMean(MisScaledGaussianSum(), RATE * N),
                                   CANARIES, RATE))  # fmt: skip
RUNS = {"plain": (PLAIN, None), "audited": (AUDITED, 1.0), "broken": (AUDITED, 0.1)}


@pytest.fixture(scope="module")
def runs():
    """Each run once: ``{name: (algorithm, clients, final state, infos, noise scale)}``."""
    clients = population()
    found = {}
    for name, (algorithm, scale) in RUNS.items():
        state, infos = simulate(algorithm, clients, hyper(scale), jax.random.key(0), ROUNDS)
        found[name] = (algorithm, clients, state, infos, scale)
    return found


@pytest.fixture(scope="module")
def claim(runs):
    """The audited run's certified eps (computed once; a run stating the same event claims
    the same)."""
    algorithm, clients, _, _, scale = runs["audited"]
    return certified_epsilon(run_event(algorithm, clients, scale))


def test_canaries_leave_the_guarantee_and_the_real_clients_draws_as_they_are(runs, claim):
    plain_algorithm, clients, plain, _, _ = runs["plain"]
    audited_algorithm, _, audited, infos, scale = runs["audited"]
    # the same releases, the same event: what the accountant certifies does not change
    assert run_event(audited_algorithm, clients, scale) == run_event(plain_algorithm, clients)
    np.testing.assert_allclose(claim, 1.295, atol=1e-3)
    release = trace_releases(audited_algorithm, clients, hyper(scale)).releases[0]
    assert release.event(hyper(scale, float)) == dp_accounting.PoissonSampledDpEvent(
        RATE, dp_accounting.GaussianDpEvent(NOISE)
    )
    # the canaries are the only difference: the model moved by the same real clients' average
    # and the same noise, plus (C / (q N)) u_i for every release canary i took part in
    state = audited.aggregator
    assert isinstance(state, CanaryState)
    difference = np.asarray(audited.model - plain.model, np.float64)
    directions = np.asarray(
        jax.vmap(lambda i: canaries._flat_direction(jax.random.key(0), i, DIM))(
            jnp.arange(CANARIES)
        ),
        np.float64,
    )
    # least squares by the normal equations (the directions are nearly orthogonal)
    coefficients = np.linalg.solve(directions @ directions.T, directions @ difference)
    residual = difference - directions.T @ coefficients
    # a difference outside the canaries' span (any real client's draw changed) would leave
    # about sqrt(1 - M / d) = 87% of its norm; float32 rounding leaves ~1e-6
    assert np.linalg.norm(residual) < 1e-4 * np.linalg.norm(difference)
    participations = coefficients * RATE * N / CLIP
    np.testing.assert_allclose(participations, np.round(participations), atol=1e-3)
    included = np.asarray(state.included)
    assert np.all(np.round(participations)[~included] == 0)
    assert np.all(np.round(participations) >= 0)
    taking_part = np.asarray(infos["canaries_taking_part"])
    assert np.round(participations).sum() == taking_part.sum()
    # every canary that took part was clipped (sent at norm 10^6), yet the diagnostics are the
    # real clients' alone: the clipped count is the plain run's, canaries left out
    _, _, _, plain_infos, _ = runs["plain"]
    assert taking_part.sum() > 0
    np.testing.assert_array_equal(infos["clipped_count"], plain_infos["clipped_count"])
    # about 250 included, each taking part with q = 0.1: 25 a round; 4 sd of the mean of R
    # rounds of Binomial(500, 0.05)
    sd = np.sqrt(CANARIES * 0.05 * 0.95 / ROUNDS)
    assert abs(taking_part.mean() - CANARIES * 0.5 * RATE) < 4 * sd
    assert int(state.scores.rounds) == ROUNDS


def test_audit_of_a_correct_run_stays_below_its_claim_and_refutes_a_broken_one(runs, claim):
    """Measured: the correct run's bound 0, the broken run's 2.59, against a claim of 1.30."""
    algorithm, clients, correct, _, scale = runs["audited"]
    bound = audit(correct.aggregator, DELTA, 0.95)
    assert bound.canaries == CANARIES and bound.epsilon < claim
    broken_algorithm, _, broken, _, broken_scale = runs["broken"]
    # what the broken run claims: the same event as the correct run's, so the same eps
    assert run_event(broken_algorithm, clients, broken_scale) == run_event(
        algorithm, clients, scale
    )
    caught = audit(broken.aggregator, DELTA, 0.95)
    assert caught.epsilon > claim


def test_the_wrapper_is_its_inner_aggregator_to_the_engine_and_refuses_bad_settings():
    from jfed.privacy.aggregators import LocalNoiseParams, LocalRandomizerSum

    local = WithCanaries(LocalRandomizerSum(), 4)
    assert local.Params is LocalNoiseParams and local.local and local.adjacency.value == "bounded"
    params = LocalNoiseParams(1.0, 1.0)
    assert local.event(params) == LocalRandomizerSum().event(params)
    with pytest.raises(ValueError, match="sampling_rate"):
        WithCanaries(GaussianSum(), 8, sampling_rate=0.0)
    with pytest.raises(Exception, match="canaries"):
        WithCanaries(GaussianSum(), 1)


PREPROCESSED: list = []


@dataclass(frozen=True)
class CountedIntegerSum:
    """A clipped sum of integer records (exact whatever the order of the sum): a record is the
    update clipped to C, scaled by 64 and rounded at random from its key; each call of
    ``preprocess`` is reported to ``PREPROCESSED`` from inside the program. Its release is the
    sum itself as floats, without noise (a test's window on what was summed)."""

    Params: ClassVar[type] = GaussianSumParams

    def init(self, params, template):
        return ()

    def preprocess(self, params, state, update, key):
        jax.debug.callback(lambda update: PREPROCESSED.append(np.shape(update)), update)
        return integer_record(params, update, key)

    def release(self, params, state, summed, key):
        return summed.astype(jnp.float32), state, {}  # exact below 2^24


def integer_record(params, update, key):
    clipped = update * jnp.minimum(1.0, params.clip_norm / jnp.linalg.norm(update))
    return jnp.floor(64 * clipped + jax.random.uniform(key, update.shape)).astype(jnp.int32)


def canary_sum_reference(wrapper, params, state, real, template, key):
    """What the wrapper releases, recomputed here: every canary's record, drawn as the wrapper
    draws it (its update through the inner aggregator, from the preprocessing stream folded with
    its id), summed where the canary takes part, plus the real record: ``(canaries taking part,
    the sum)``."""
    participation = jfed_random.named(key, canary_aggregator.PARTICIPATION_STREAM)
    preprocess = jfed_random.named(key, canary_aggregator.PREPROCESS_STREAM)
    ids = jnp.arange(wrapper.canaries)
    sampled = jax.vmap(lambda i: jfed_random.uniform(jax.random.fold_in(participation, i)))(ids)
    weights = (state.included & (sampled < wrapper.sampling_rate)).astype(jnp.int32)
    records = jax.vmap(lambda i: integer_record(
        params, canaries.canary_update(wrapper.audit_key(), i, template, 1e6),
        jax.random.fold_in(preprocess, i)))(ids)  # fmt: skip
    return weights.sum(), real + jnp.tensordot(weights, records, 1)


@pytest.mark.parametrize("capacity", [None, 8])
def test_a_release_preprocesses_only_its_canaries_taking_part_and_sums_their_records(
    monkeypatch, capacity
):
    """One release of 400 canaries at q = 0.2 (about 40 take part), vmapped as a sweep runs its
    runs: the canaries' records are preprocessed in one chunk of ``canary_capacity`` slots
    (120), or with a capacity of 8, in as many chunks of 8 as hold those taking part (a
    vmapped ``lax.cond`` between the slots and every canary preprocessed 120 + 400 records);
    their sum is the one computed here canary by canary, exactly (integer records)."""
    if capacity is not None:
        monkeypatch.setattr(canary_aggregator, "canary_capacity", lambda *_: capacity)
    dimension, count, rate = 16, 400, 0.2
    wrapper = WithCanaries(CountedIntegerSum(), count, rate)
    params = GaussianSumParams(jnp.float32(1.0), jnp.float32(1.0))
    template = jnp.zeros((dimension,), jnp.float32)
    state = wrapper.init(params, template)
    real = jnp.arange(dimension, dtype=jnp.int32)
    key = jax.random.key(3)
    PREPROCESSED.clear()
    release = jax.jit(jax.vmap(lambda k: wrapper.release(params, state, real, k)))
    value, _, diagnostics = release(key[None])
    jax.effects_barrier()
    taking_part = int(diagnostics["canaries_taking_part"][0])
    slots = capacity or canary_aggregator.canary_capacity(count, rate)
    assert slots == (capacity or 120) and (capacity is None or taking_part > 3 * capacity)
    assert len(PREPROCESSED) == slots * -(-taking_part // slots)
    reference = jax.jit(canary_sum_reference, static_argnums=0)
    expected_taking_part, expected = reference(wrapper, params, state, real, template, key)
    assert int(expected_taking_part) == taking_part
    np.testing.assert_array_equal(value[0], expected)
