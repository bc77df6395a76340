"""DP-FedAvg (docs/specs/dp_fedavg.md): clipping, noise scale, cohort independence of a client's
update, the guarantee against dp-accounting computed here from the same events, calibration,
adaptive clipping's noise split, the overflow term, and runs through the method API."""

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
from jfed.algorithms.dp_fedavg import (
    DPFedAvg,
    FloatNoise,
    GridNoise,
    Hyperparams,
    aggregator_of,
    tree_norm,
)
from jfed.data import SyntheticFederated
from jfed.engine import Clients, ExecutionPlan, Uniform, simulate
from jfed.methods import build_experiment, declared
from jfed.methods.dp_fedavg import OVERFLOW_SHARE, SAMPLER_SHARE
from jfed.models import DenseClassifier

N, RECORDS = 300, 16


@pytest.fixture(scope="module")
def population():
    return SyntheticFederated.create(jax.random.key(0), N, 1.0, 1.0, n_max=RECORDS,
                                     shared_model=True).materialize()  # fmt: skip


def hyper(adaptive: bool = False, private: bool = True, grid: bool = False,
          **changes) -> Hyperparams:  # fmt: skip
    """A run's numbers: the optimizers', and the aggregator's (fixed or adaptive clip)."""
    values = dict(client_learning_rate=0.5, server_learning_rate=1.0, server_momentum=0.0,
                  clip=0.3, update_noise=1.0, count_noise=5.0, target_quantile=0.5,
                  clip_learning_rate=0.2)  # fmt: skip
    values.update(changes)
    if not private:
        params = privacy.NoParams()
    elif adaptive:
        params = privacy.AdaptiveClipParams(values["clip"], values["update_noise"],
                                            values["count_noise"], values["target_quantile"],
                                            values["clip_learning_rate"])  # fmt: skip
    elif grid:
        params = privacy.DiscreteGaussianSumParams(values["clip"], values["update_noise"])
    else:
        params = privacy.GaussianSumParams(values["clip"], values["update_noise"])
    optimizers = {k: jnp.float32(values[k]) for k in
                  ("client_learning_rate", "server_learning_rate", "server_momentum")}  # fmt: skip
    return Hyperparams(**optimizers, privacy=jax.tree.map(jnp.float32, params))


def program(private: bool = True, per_layer: bool = False, adaptive: bool = False,
            hidden: int = 0, noise=None, **changes) -> DPFedAvg:  # fmt: skip
    noise = noise or FloatNoise()
    aggregator = aggregator_of(private, 40.0, per_layer, adaptive, noise=noise)
    return DPFedAvg(**{"model": DenseClassifier(60, 10, hidden), "n_max": RECORDS,
                       "cohort": Uniform(40), "aggregator": aggregator, "batch": 4,
                       **changes})  # fmt: skip


@functools.partial(jax.jit, static_argnames=("algorithm", "cohort", "chunk"))
def messages(algorithm, population, cohort, h, chunk=8):
    """Every cohort client's contribution (its update as the aggregator preprocessed it: clipped
    under DP-FedAvg), stacked in cohort order, and the cohort's ids: one compiled program per
    (algorithm, cohort, chunk), shared by the tests that ask for the same one."""
    state = algorithm.init(h, jax.random.key(0))
    broadcast = (state.params, h.client_learning_rate)
    plan = ExecutionPlan(block_size=chunk, chunk_size=chunk)

    def contribution(broadcast, record, key):
        update = algorithm.client(broadcast, record, key)
        return algorithm.aggregator.preprocess(h.privacy, state.aggregator, update, key)

    view = Clients(population, jax.random.key(3), plan, jnp.int32(0)).sample(cohort)
    stacked = view.stack(contribution, broadcast)
    return {"update": stacked["value"], "clipped": stacked.get("clipped")}, view.info.ids


@pytest.mark.parametrize("per_layer", [False, True])
def test_clipping_bounds_every_clients_update(population, per_layer):
    """Flat clipping (the update to C) and per-layer clipping (each of the model's two tensors
    to C / sqrt(2)) of the same clients: every update within C, the bound binding for most."""
    h = hyper(clip=0.05)
    stacked, _ = messages(program(per_layer=per_layer), population, Uniform(40), h)
    norms = np.asarray(jax.vmap(tree_norm)(stacked["update"]))
    assert norms.max() <= 0.05 * (1 + 1e-5)
    assert np.asarray(stacked["clipped"]).mean() > 0.5  # the bound was binding
    # negative control: without the clip the same updates exceed it
    raw, _ = messages(program(private=False), population, Uniform(40), hyper(private=False))
    assert np.asarray(jax.vmap(tree_norm)(raw["update"])).max() > 0.05 * 2


def test_the_grid_rounds_every_clients_update_within_its_exact_bound(population):
    """--noise discrete: each cohort client's record is its clipped update on the integer grid
    (C is L grid units), its squared norm at most B exactly, and within the rounding's reach of
    the float clipped update; a release of zero updates moves the model by the exact noise
    alone, on the grid (every coordinate a multiple of C / L over the denominator)."""
    noise = GridNoise(610, 2**12)
    algorithm = program(noise=noise)
    h = hyper(grid=True, clip=0.05)
    stacked, _ = messages(algorithm, population, Uniform(40), h)
    leaves = jax.tree.leaves(stacked["update"])
    assert all(leaf.dtype == jnp.int32 for leaf in leaves)
    flat = np.concatenate([np.asarray(leaf, np.int64).reshape(40, -1) for leaf in leaves], axis=1)
    bound = noise.sum(False).squared_bound
    assert np.all((flat**2).sum(axis=1) <= bound)
    assert np.asarray(stacked["clipped"]).mean() > 0.5
    floats = program()  # the same clients' float clipped updates
    clipped, _ = messages(floats, population, Uniform(40), hyper(clip=0.05))
    leaves = jax.tree.leaves(clipped["update"])
    reference = np.concatenate([np.asarray(leaf).reshape(40, -1) for leaf in leaves], axis=1)
    assert np.abs(flat * 0.05 / 2**12 - reference).max() <= 0.05 / 2**12 * (1 + 1e-3)
    state, _ = simulate(algorithm, population, hyper(grid=True, client_learning_rate=0.0),
                        jax.random.key(5), 1)  # fmt: skip
    steps = np.asarray(state.params["output"]["w"]) * 40.0 / (0.3 / 2**12)
    assert np.abs(steps).max() > 1000  # noise of about z L = 4096 grid units
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-2 * np.abs(steps).max() * 1e-3)


def test_a_clients_update_does_not_depend_on_its_cohort_or_chunk(population):
    """The first 10 clients of a cohort of 40 in chunks of 8 (the clipping test's program) send
    what they send in a cohort of 10 in one chunk of 16."""
    h = hyper(clip=0.05)
    small, ids_small = messages(program(), population, Uniform(10), h, chunk=16)
    large, ids_large = messages(program(), population, Uniform(40), h, chunk=8)
    assert np.array_equal(np.asarray(ids_small), np.asarray(ids_large)[:10])  # nested cohorts
    a = jax.tree.map(lambda x: np.asarray(x)[:10], small["update"])
    b = jax.tree.map(lambda x: np.asarray(x)[:10], large["update"])
    # the vmap width differs (16 vs 8): equal up to float rounding of the vectorised ops
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7), a, b)
    # negative control: another client's update is not this one's
    other = jax.tree.map(lambda x: np.asarray(x)[1], large["update"])
    first = jax.tree.map(lambda x: np.asarray(x)[0], small["update"])
    assert not np.allclose(other["output"]["w"], first["output"]["w"])


def test_noise_is_exactly_proportional_to_its_scale(population):
    """Zero updates (client step 0): the model moves by the noise alone, and twice the noise
    multiplier moves it exactly twice as far, from the same key."""
    runs = []
    for z in (1.0, 2.0):
        state, _ = simulate(program(), population, hyper(client_learning_rate=0.0,
                            update_noise=z), jax.random.key(5), 2)  # fmt: skip
        runs.append(np.asarray(state.params["output"]["w"]))
    assert np.abs(runs[0]).max() > 0
    np.testing.assert_array_equal(2.0 * runs[0], runs[1])


def test_adaptive_clipping_moves_the_clip_towards_the_quantile(population):
    # every update is far above C = 1e-3: almost none unclipped, so C grows each round
    _, infos = simulate(program(adaptive=True), population,
                        hyper(True, clip=1e-3, count_noise=0.1), jax.random.key(2), 6)  # fmt: skip
    clip = np.asarray(infos["clip"])
    assert np.all(np.diff(clip) > 0)
    # the geometric step: C_{t+1} / C_t = exp(-eta_C (b_bar - gamma)) with b_bar ~ 0
    np.testing.assert_allclose(clip[1] / clip[0], math.exp(0.2 * 0.5), rtol=0.05)
    # negative control: with everything unclipped (huge C) the clip shrinks
    _, infos = simulate(program(adaptive=True), population,
                        hyper(True, clip=1e3, count_noise=0.1), jax.random.key(2), 6)  # fmt: skip
    assert np.all(np.diff(np.asarray(infos["clip"])) < 0)


def small(**changes):
    base = dict(clients=N, records=RECORDS, rounds=5, cohort_size=30, batch=8)
    base.update(changes)
    return base


def experiment(config):
    built = build_experiment(config)
    built.prepare([config])
    return built


def zhu_wang_rdp(z: float, rate: float, orders: np.ndarray) -> np.ndarray:
    """RDP of a Poisson-sampled mechanism whose Renyi curve is the Gaussian's, alpha / (2 z^2)
    (the discrete Gaussian's, Canonne et al. Thm 14), by Zhu and Wang's (2019, Thm 6) general
    bound written out here term by term (exact integer binomials, summed in log space)."""
    result = []
    for alpha in (int(a) for a in orders):
        logs = [(alpha - 1) * math.log1p(-rate) + math.log(alpha * rate - rate + 1),
                math.log(math.comb(alpha, 2)) + 2 * math.log(rate)
                + (alpha - 2) * math.log1p(-rate) + 1 / z**2]  # fmt: skip
        for level in range(3, alpha + 1):
            logs.append(math.log(3 * math.comb(alpha, level)) + (alpha - level) * math.log1p(-rate)
                        + level * math.log(rate) + (level - 1) * level / (2 * z * z))  # fmt: skip
        top = max(logs)
        bound = (top + math.log(math.fsum(math.exp(v - top) for v in logs))) / (alpha - 1)
        result.append(min(bound, alpha / (2 * z * z)))
    return np.array(result)


def independent_discrete_epsilon(config, z: float, delta: float) -> float:
    """eps of R rounds of a Poisson-sampled discrete Gaussian of multiplier z, from the Renyi
    curve above and dp-accounting's RDP-to-(eps, delta) conversion."""
    from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

    orders = np.arange(2, 129)
    curve = config.rounds * zhu_wang_rdp(z, config.cohort_size / config.clients, orders)
    return float(rdp_lib.compute_epsilon(orders, curve, delta)[0])


def independent_epsilon(config, z: float, delta: float) -> float:
    """eps of the run's events, built here with dp-accounting's own classes."""
    if config.cohort == "uniform":
        accountant = dp_accounting.rdp.RdpAccountant(
            neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE
        )
        # swapping one client's clipped update moves the sum by 2C: std / (2C) = z / 2
        step = dp_accounting.SampledWithoutReplacementDpEvent(
            config.clients, config.cohort_size, dp_accounting.GaussianDpEvent(z / 2)
        )
    else:
        accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
        step = dp_accounting.PoissonSampledDpEvent(
            config.cohort_size / config.clients, dp_accounting.GaussianDpEvent(z)
        )
    accountant.compose(step, config.rounds)
    return accountant.get_epsilon(delta)


@pytest.mark.parametrize("cohort", ["poisson", "uniform"])
def test_guarantee_equals_dp_accounting_and_calibration_round_trips(cohort):
    config = declared.DPFedAvg(**small(cohort=cohort), epsilon=3.0, delta=1e-4, noise="float")
    built = experiment(config)
    _, fields = built.calibrated(config)
    z = fields["noise_multiplier"]
    reference = independent_epsilon(config, z, fields["delta_accountant"])
    assert fields["epsilon_certified"] == pytest.approx(reference, rel=1e-9)
    assert fields["epsilon_certified"] <= 3.0
    # the least z: a little less noise spends more than the target
    assert independent_epsilon(config, z * 0.99, fields["delta_accountant"]) > 3.0
    adjacency = "replace-one" if cohort == "uniform" else "add-or-remove"
    assert f"{adjacency} adjacency" in fields["notion"] and fields["adjacency"] == adjacency
    assert fields["accountant"] == ("rdp" if cohort == "uniform" else "pld")
    if cohort == "poisson":  # RDP as a cross-check: an upper bound too, looser than PLD's
        rdp = dp_accounting.rdp.RdpAccountant()
        rdp.compose(dp_accounting.PoissonSampledDpEvent(30 / N, dp_accounting.GaussianDpEvent(z)),
                    config.rounds)  # fmt: skip
        assert fields["epsilon_certified"] <= rdp.get_epsilon(fields["delta_accountant"]) < 4.5
    # the stated delta: the target, the accountant's share, the overflow term and the share kept
    # for the float normals' bounded reach (which the reach's term does not exceed)
    assert fields["delta"] == 1e-4
    kept = SAMPLER_SHARE * 1e-4
    assert fields["delta_accountant"] + fields["delta_overflow"] + kept == pytest.approx(1e-4)
    assert 0 < fields["delta_sampler"] <= kept
    assert "ideal real-valued mechanism; floating-point sampling not modelled" in fields["notion"]
    assert fields["mechanism_model"].startswith("ideal real-valued mechanism")


def test_the_grids_discrete_rdp_is_certified_as_an_independent_computation():
    """--noise discrete (the default) with --accountant discrete-rdp: the integer grid's
    discrete Gaussian, its Poisson-sampled Renyi curve by Zhu and Wang's bound computed in the
    test, the least z (1% less exceeds the target); the record names the exact mechanism, its
    grid and accountant. (The default accountant, PLD through the coupling:
    tests/test_grid_coupled.py.)"""
    config = declared.DPFedAvg(**small(), epsilon=3.0, delta=1e-4, accountant="discrete-rdp")
    assert config.noise == "discrete"
    built = experiment(config)
    hyper, fields = built.calibrated(config)
    assert isinstance(hyper.privacy, privacy.DiscreteGaussianSumParams)
    z, delta = fields["noise_multiplier"], fields["delta_accountant"]
    reference = independent_discrete_epsilon(config, z, delta)
    assert fields["epsilon_certified"] == pytest.approx(reference, rel=1e-6) and reference <= 3.0
    assert independent_discrete_epsilon(config, z * 0.99, delta) > 3.0
    assert fields["accountant"] == "discrete-rdp"
    assert fields["mechanism_model"].startswith("exact") and "not modelled" not in fields["notion"]
    assert fields["grid_norm"] == 2**12 and 1.0 < fields["noise_inflation"] < 1.001
    # sigma: the grid's integer variance as the device draws it, never below z C sqrt(B) / L
    assert fields["sigma"] >= z * 1.0 * fields["noise_inflation"]
    assert fields["sigma"] == pytest.approx(z * fields["noise_inflation"], rel=1e-4)
    # negative control: the continuous Gaussian's own (Mironov) subsampled curve is tighter,
    # so the same z would certify a smaller eps: the comparison sees which analysis ran
    assert independent_epsilon(config, z, delta) < 0.95 * fields["epsilon_certified"]


def test_float_noise_states_its_bounded_reach_in_delta():
    """--noise float at a large eps: the private normals reach 9 standard deviations and one
    client moves the sum by 1 / z of them, so outputs beyond the other input's reach add
    R q Q(9 - 1 / z) to delta (computed here from the normal tail); it exceeds the share kept
    for it, so z is searched again at what is left, and the parts add up to the target. The
    exact grid adds no such term. (Under RDP: the terms are the accountant's alike, and PLD's
    search near z = 0.2 takes about ten times as long.)"""
    from scipy import stats

    config = declared.DPFedAvg(**small(), epsilon=45.0, delta=1e-4, noise="float",
                               accountant="rdp")  # fmt: skip
    _, fields = experiment(config).calibrated(config)
    z = fields["noise_multiplier"]
    rate = config.cohort_size / config.clients
    expected = config.rounds * rate * stats.norm.sf(9.0 - 1.0 / z)
    assert fields["delta_sampler"] == pytest.approx(expected, rel=1e-9)
    assert fields["delta_sampler"] > SAMPLER_SHARE * 1e-4  # searched again
    parts = fields["delta_accountant"] + fields["delta_overflow"] + fields["delta_sampler"]
    assert parts <= 1e-4 * (1 + 1e-12) and fields["epsilon_certified"] <= 45.0
    grid = declared.DPFedAvg(**small(), epsilon=45.0, delta=1e-4)
    assert experiment(grid).calibrated(grid)[1]["delta_sampler"] == 0.0
    with pytest.raises(ValueError, match="bounded reach alone"):
        far = config.replace(epsilon=100.0)
        experiment(far).calibrated(far)


def test_poisson_overflow_is_in_delta():
    config = declared.DPFedAvg(**small(), epsilon=4.0, delta=1e-5)
    built = experiment(config)
    _, fields = built.calibrated(config)
    assert 0 < fields["delta_overflow"] <= OVERFLOW_SHARE * 1e-5
    # the overflow term at the target eps, which bounds it at the certified one
    expected = (1 + math.exp(4.0)) * 5 * fields["overflow_probability_per_round"]
    assert fields["delta_overflow"] == pytest.approx(expected, rel=1e-9)
    assert fields["delta"] == 1e-5
    assert fields["delta_accountant"] + fields["delta_overflow"] == pytest.approx(1e-5, rel=1e-12)
    # a bigger eps in the same sweep asks for a larger capacity
    capacity = built.cohort.capacity
    built.prepare([config, config.replace(epsilon=30.0)])
    assert built.cohort.capacity > capacity


def test_adaptive_clipping_splits_the_noise_as_andrew_et_al():
    config = declared.DPFedAvg(**small(), epsilon=3.0, delta=1e-4, adaptive_clip=True,
                               noise="float")  # fmt: skip
    hp, fields = experiment(config).calibrated(config)
    z, z_delta, sigma_b = (fields["noise_multiplier"], fields["update_noise_multiplier"],
                           fields["count_noise_std"])  # fmt: skip
    assert sigma_b == pytest.approx(30 / 20)
    assert (z_delta**-2 + (2 * sigma_b) ** -2) ** -0.5 == pytest.approx(z, rel=1e-9)
    assert float(hp.privacy.noise_multiplier) == pytest.approx(z_delta, rel=1e-6)
    with pytest.raises(ValueError, match="2 sigma_b > z"):
        tiny = config.replace(count_noise=0.05)
        experiment(tiny).calibrated(tiny)


def test_adaptive_clipping_on_the_grid_is_certified_for_both_releases():
    """With the default grid noise both of adaptive clipping's releases are exact discrete
    Gaussians (the update sum at z_delta, the count at 2 sigma_b): under --accountant
    discrete-rdp (the default where the count's noise is too small to couple, as here: 2
    sigma_b = 3) the certified eps is the discrete RDP accountant's for the Poisson-sampled
    pair, R rounds, built here from the aggregator's parameters (rel 1e-9); the record's joint
    z is the float pair's rule.
    Negative control: the update sum alone certifies less."""
    from jfed.privacy.discrete_accounting import DiscreteGaussianDpEvent, DiscreteRdpAccountant

    config = declared.DPFedAvg(**small(), epsilon=3.0, delta=1e-4, adaptive_clip=True,
                               accountant="discrete-rdp")  # fmt: skip
    built = experiment(config)
    hp, fields = built.calibrated(config)
    z_delta, sigma_b = float(hp.privacy.noise_multiplier), float(hp.privacy.count_noise)
    assert fields["accountant"] == "discrete-rdp" and fields["grid_norm"] >= 1
    assert fields["mechanism_model"].startswith("exact")
    assert (z_delta**-2 + (2 * sigma_b) ** -2) ** -0.5 == pytest.approx(
        fields["noise_multiplier"], rel=1e-9
    )
    inner = built._aggregator()
    bound = inner.squared_bound
    update = DiscreteGaussianDpEvent(z_delta, math.sqrt(bound),
                                     min(bound, math.sqrt(inner.dimension * bound)),
                                     inner.dimension)  # fmt: skip
    count = DiscreteGaussianDpEvent(2 * sigma_b, 1.0, 1.0, 1)
    q = config.cohort_size / N

    def certified(*releases) -> float:
        accountant = DiscreteRdpAccountant()
        event = dp_accounting.ComposedDpEvent(list(releases))
        accountant.compose(dp_accounting.PoissonSampledDpEvent(q, event), config.rounds)
        return accountant.get_epsilon(fields["delta_accountant"])

    assert fields["epsilon_certified"] == pytest.approx(certified(update, count), rel=1e-9)
    assert certified(update) < fields["epsilon_certified"] * (1 - 1e-3)


def test_bad_combinations_are_refused():
    with pytest.raises(ValueError, match="--accountant rdp"):
        declared.DPFedAvg(**small(cohort="uniform"), accountant="pld").check()
    with pytest.raises(ValueError, match="--cohort-size"):
        declared.DPFedAvg(**small(cohort_size=N + 1)).check()
    with pytest.raises(ValueError, match="--target-quantile"):
        declared.DPFedAvg(**small(), target_quantile=0.3).check()
    # where the exact grid does not apply: one line naming the flags
    for changes, flags in (
        (dict(adaptive_clip=True, noise="skellam"), "--adaptive-clip.*--noise discrete or float"),
        (dict(cohort="uniform"), "--cohort uniform.*--noise float"),
        (dict(noise="float", accountant="discrete-rdp"), "--accountant discrete-rdp"),
        (dict(noise="ddgauss", accountant="pld"), "--noise ddgauss.*--accountant discrete-rdp"),
        (dict(noise="ddgauss", clipping="per-layer"), "--clipping flat"),
        (dict(noise="skellam", audit_canaries=10), "--audit-canaries"),
        (dict(bits=16), "--bits.*only with --noise ddgauss or skellam"),
        (dict(noise="float", min_clients=5), "--min-clients.*only with --noise"),
    ):
        with pytest.raises(ValueError, match=flags):
            declared.DPFedAvg(**small(), **changes).check()
    declared.DPFedAvg(**small(), adaptive_clip=True, noise="float").check()
    declared.DPFedAvg(**small(), adaptive_clip=True).check()  # both releases on the grid
    declared.DPFedAvg(**small(), clipping="per-layer").check()  # the grid clips per layer too
    declared.DPFedAvg(**small(), accountant="pld").check()  # the grid through the coupling


LEARNING = small(rounds=20, cohort_size=60)


@pytest.fixture(scope="module")
def learning():
    """The non-private baseline's record and DP-FedAvg's rows at eps 0.5 and 50 (one program),
    through jfed.run and jfed.run_grid: run once, read by the tests below."""
    baseline = jfed.run(declared.FedAvgSampled(**LEARNING))
    config = declared.DPFedAvg(**LEARNING, update_clip=1.0, delta=1e-4)
    return baseline, config, jfed.run_grid(config, [0.5, 50.0], seeds=1)


def test_runs_learn_and_privacy_costs_accuracy(learning):
    """The non-private baseline learns the shared model, DP-FedAvg at a large eps is close to
    it, and at a small eps it is worse."""
    baseline, _, rows = learning
    assert baseline["epsilon_certified"] == math.inf
    assert baseline["test_accuracy"] > 0.45  # majority class: about 0.2
    by_eps = {row["epsilon"]: row for row in rows}
    assert by_eps[50.0]["test_accuracy"] > baseline["test_accuracy"] - 0.1
    assert by_eps[0.5]["test_accuracy"] < by_eps[50.0]["test_accuracy"]
    assert all(row["overflowed_clients"] == 0 for row in rows)
    assert {row["capacity"] for row in rows} == {rows[0]["capacity"]}  # one program


@pytest.mark.parametrize("name", ["sgd", "adam", "adagrad", "yogi"])
def test_server_optimizer_steps_on_minus_delta_as_optax(name):
    """One server step with the run's traced learning rate and momentum is optax's own step of
    the named optimizer on the pseudo-gradient -Delta."""
    import optax

    from jfed.algorithms.dp_fedavg import ADAPTIVE_EPSILON, server_optimizer

    params = {"output": {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}}
    delta = {"output": {"w": jnp.full((3, 2), 0.5), "b": jnp.array([0.1, -0.2])}}
    pseudo_gradient = jax.tree.map(jnp.negative, delta)
    h = hyper(server_learning_rate=0.3, server_momentum=0.9)
    reference = {
        "sgd": optax.sgd(0.3, momentum=0.9),
        "adam": optax.adam(0.3, b1=0.9, b2=0.99, eps=ADAPTIVE_EPSILON),
        "adagrad": optax.adagrad(0.3, initial_accumulator_value=0.0, eps=ADAPTIVE_EPSILON),
        "yogi": optax.yogi(0.3, b1=0.9, b2=0.99, eps=ADAPTIVE_EPSILON),
    }[name]
    ours = server_optimizer(name, h)
    state, expected_state = ours.init(params), reference.init(params)
    for _ in range(2):
        step, state = ours.update(pseudo_gradient, state, params)
        expected, expected_state = reference.update(pseudo_gradient, expected_state, params)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), step, expected)
    # with SGD at learning rate 1 and no momentum the server adds Delta: FedAvg
    fedavg = server_optimizer("sgd", hyper(server_learning_rate=1.0, server_momentum=0.0))
    step, _ = fedavg.update(pseudo_gradient, fedavg.init(params), params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), step, delta)


def test_dirichlet_digits_population():
    """The Dirichlet digits population a run's record names (its data section, built without
    compiling the round: DP-SCAFFOLD, DP-FTRL and DP-Ditto run on this population through the
    same loader in tests/test_federated_methods.py)."""
    config = declared.DPFedAvg(dataset="digits-dirichlet", clients=50, dirichlet=0.3, rounds=3,
                               cohort_size=10, epsilon=4.0)  # fmt: skip
    experiment = build_experiment(config)
    record = experiment.identity()
    assert record["dataset"] == "digits-dirichlet(0.3)"
    assert record["n_clients"] == 50 == experiment.population.n_clients
    with pytest.raises(ValueError, match="--model-heterogeneity"):
        dataclasses.replace(config, model_heterogeneity=2.0).check()


def real_data(name: str, folder) -> declared.DPFedAvg:
    """A small DP-FedAvg run on data set ``name`` read from the files written here in the new
    folder ``folder``: CIFAR-10's python batches (iid clients, logistic regression) or FEMNIST's
    LEAF files (a client per writer, an MLP)."""
    from data_files import write_cifar, write_leaf

    common = dict(data_dir=str(folder), cohort="uniform", epsilon=8.0, delta=1e-3, noise="float")
    if name == "cifar10":
        write_cifar(folder, per_batch=8)
        return declared.DPFedAvg(dataset="cifar10", clients=8, cohort_size=4, rounds=2, batch=5,
                                 model="logistic", **common)  # fmt: skip
    write_leaf(folder, ["f0000_14", "f0001_41", "f0002_07", "f0003_11"])
    return declared.DPFedAvg(dataset="femnist", cohort_size=2, rounds=1, batch=2, model="mlp",
                             hidden=4, **common)  # fmt: skip


def test_real_data_from_the_users_files_builds_the_named_model(tmp_path):
    """CIFAR-10 from --data-dir (iid clients) and FEMNIST's LEAF files (a client per writer)
    build the model the flag names, and a missing --data-dir is one line naming where to get
    the data."""
    built = build_experiment(real_data("cifar10", tmp_path / "cifar"))
    assert built.n_clients == 8 and built.model.dim == 32 * 32 * 3 and built.model.classes == 10
    built = build_experiment(real_data("femnist", tmp_path / "leaf"))
    assert built.n_clients == 4 and built.model.hidden == 4  # one client per writer
    with pytest.raises(ValueError, match=r"--data-dir.*cs\.toronto\.edu"):
        declared.DPFedAvg(dataset="cifar10").check()
    with pytest.raises(ValueError, match=r"--clients.*not with --dataset shakespeare"):
        declared.DPFedAvg(dataset="shakespeare", clients=50).check()


# both runs take the same path (files read into FederatedData clients, the accuracy measured on
# the held-out records); CIFAR-10's (the faster to compile) covers it in the default run,
# FEMNIST's runs with -m slow
@pytest.mark.parametrize("name, label, clients", [
    ("cifar10", "cifar10(iid)", 8),
    pytest.param("femnist", "femnist", 4, marks=pytest.mark.slow),
])  # fmt: skip
def test_real_data_from_the_users_files_trains_the_named_model(tmp_path, name, label, clients):
    """The run's record: the data set, its clients, an accuracy measured on the held-out
    records, the guarantee within the target."""
    record = jfed.run(real_data(name, tmp_path / name))
    assert record["dataset"].startswith(label) and record["n_clients"] == clients
    assert 0.0 <= record["test_accuracy"] <= 1.0 and record["epsilon_certified"] <= 8.0


def test_shakespeare_trains_the_char_lstm_by_default():
    config = declared.DPFedAvg(dataset="shakespeare", epsilon=10.0)
    built = build_experiment(config)
    assert built.model.name == "char-lstm" and built.model.vocabulary == 83
    assert built.n_clients > 1000  # the plays' speaking roles
    assert built.algorithm.n_max == config.records  # a role trains on its first lines


# Every field of a private DP-FedAvg record, classified. A field in none of the three sets fails
# the test below: a new field must say whether the guarantee covers it.
INSIDE = {
    # post-processing of the noised releases (the model, its accuracy on held-out clients that
    # are not in the protected population, an adaptive clip norm moved by the noised count)
    "test_accuracy", "test_error", "clip_per_round",
}  # fmt: skip
PUBLIC = {
    # the guarantee's own statement and the noise it calibrated (functions of the settings)
    "epsilon_certified", "delta", "delta_accountant", "delta_overflow", "accountant", "notion",
    "protected", "trust_model", "adjacency", "sigma", "noise_multiplier",
    "update_noise_multiplier", "count_noise_std", "sampling_rate", "mechanism_model",
    "overflow_probability_per_round", "grid_norm", "noise_inflation", "min_clients",
    "noise_std_per_round", "not_private_fields", "secret_fields", "delta_sampler",
    "delta_coupling",
    # the method, its selection rule, the population's public size and the static program
    "method", "algorithm", "paper", "report_metric", "selection_metric", "selection_maximize",
    "n_clients", "capacity", "plan", "slice", "slice_size", "shared_noise", "device",
    "compile_seconds", "calibration_seconds",  # (calibration reads the settings, no data)
    # provenance
    "timestamp", "git_commit", "jfed_version", "versions", "config_key", "schema_version",
}  # fmt: skip
OUTSIDE = {
    "clipped_fraction", "clipped_fraction_per_round", "mean_update_norm", "mean_cohort_size",
    "overflowed_clients", "train_accuracy", "run_seconds", "rounding_fallbacks",
    "mean_survivors", "withheld_rounds", "wrapped_coordinates",
}  # fmt: skip


def _classify(record: dict, config) -> None:
    configuration = {field.name for field in dataclasses.fields(config)}
    unclassified = sorted(set(record) - INSIDE - PUBLIC - OUTSIDE - configuration)
    assert not unclassified, f"unclassified record fields: {unclassified}"
    labelled = set(record["not_private_fields"])
    assert OUTSIDE & set(record) <= labelled <= OUTSIDE, (OUTSIDE & set(record)) ^ labelled


def test_every_field_of_a_record_is_inside_public_or_labelled_outside(learning):
    """A private record (the default grid noise; a row of the learning sweep) holds only fields
    classified here: inside the guarantee, a public setting, or outside it and listed in its own
    ``not_private_fields`` (the clip counts, the norms before clipping, the realised cohort
    sizes, the training accuracy, the grid's rounding fallbacks, the wall-clock time). Negative
    control: a field the classification does not know fails it."""
    _, config, rows = learning
    record = rows[0]
    assert record["noise"] == "discrete" and record["epsilon_certified"] <= record["epsilon"]
    _classify(record, config)
    assert {"mean_update_norm", "train_accuracy", "clipped_fraction"} <= set(
        record["not_private_fields"]
    )
    with pytest.raises(AssertionError, match="unclassified record fields: \\['leaky'\\]"):
        _classify({**record, "leaky": 1.0}, config)
    with pytest.raises(AssertionError):
        _classify({**record, "not_private_fields": ["clipped_fraction"]}, config)


@pytest.mark.slow
@pytest.mark.parametrize("changes", [dict(noise="ddgauss", dropout_rate=0.1),
                                     dict(noise="float", adaptive_clip=True)])  # fmt: skip
def test_every_field_of_other_noises_records_is_classified(changes):
    config = declared.DPFedAvg(**small(rounds=2), epsilon=3.0, delta=1e-4, **changes)
    _classify(jfed.run(config), config)
