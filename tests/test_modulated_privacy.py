"""Sensitivity of the client map, checked empirically; the modulated calibration; and what the
regression methods' records certify, against dp-accounting for the events of their releases."""

import math
import pathlib

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfed import privacy
from jfed.algorithms import modulated

_EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"

ALPHA, BETA, OMEGA, DIM = 0.7, 1.1, 2.5, 6


def _broadcast(V):
    hp = modulated.hyperparams(alpha=ALPHA, beta=BETA, omega=OMEGA, clip_norm=1.0)
    return modulated.Broadcast(jnp.asarray(V, jnp.float32), hp.alpha, hp.beta, hp.omega, 0.0, 1.0)


def _noise_free_map(V):
    broadcast = _broadcast(V)
    zero_noise = jnp.zeros(V.shape[0])
    return jax.jit(jax.vmap(lambda x, phases: modulated.encode(broadcast, x, phases, zero_noise)))


@pytest.mark.parametrize("k", [1, 3, 6])
def test_random_pairs_respect_lipschitz_bound(k):
    rng = np.random.default_rng(k)
    V = np.linalg.qr(rng.normal(size=(DIM, k)))[0]
    f = _noise_free_map(V)
    L = modulated.lipschitz_constant(ALPHA, BETA, OMEGA, k)
    x = rng.normal(size=(20_000, DIM)) * rng.uniform(0, 1, (20_000, 1)) / math.sqrt(DIM)
    x_other = x + rng.normal(size=x.shape) * rng.choice([1e-3, 1e-1, 1.0], size=(20_000, 1))
    phases = rng.uniform(0, 2 * np.pi, size=(20_000, k))
    fx, fy = np.asarray(f(x, phases), np.float64), np.asarray(f(x_other, phases), np.float64)
    distance = np.linalg.norm(x - x_other, axis=1)
    ratio = np.linalg.norm(fx - fy, axis=1) / distance
    # float32 rounding of each message (a few ulps of its norm, dot products of length d) is
    # magnified by 1 / ||x - x'|| for close pairs: the bound allows exactly that, pair by pair
    rounding = 4 * DIM * np.finfo(np.float32).eps
    slack = rounding * (np.linalg.norm(fx, axis=1) + np.linalg.norm(fy, axis=1)) / distance
    assert np.all(ratio <= L + slack), float(np.max(ratio - L - slack))


@pytest.mark.parametrize("k", [1, 2, 4])
def test_adversarial_pairs_along_directions_reach_the_bound(k):
    """Along u = sum_j v_j / sqrt(k) with every sin(omega <v_j, x> + phi_j) = -1, the map stretches
    by exactly L: the bound is tight, so an understated L (or sensitivity) would be caught."""
    V = np.linalg.qr(np.random.default_rng(7).normal(size=(DIM, k)))[0]
    f = _noise_free_map(V)
    L = modulated.lipschitz_constant(ALPHA, BETA, OMEGA, k)
    u = V.sum(1) / math.sqrt(k)
    x = 0.1 * u
    phases = (-np.pi / 2 - OMEGA * (V.T @ x)) % (2 * np.pi)
    step = 1e-3
    difference = np.asarray(f((x + step * u)[None], phases[None]) - f(x[None], phases[None]))
    ratio = np.linalg.norm(difference) / step
    assert ratio == pytest.approx(L, rel=2e-3)
    assert ratio > 0.99 * L  # negative control: a claimed L of 0.99 L is violated here


def test_sensitivity_is_lipschitz_times_diameter():
    s = modulated.sensitivity(ALPHA, BETA, OMEGA, 2, clip_norm=3.0)
    assert s == pytest.approx((ALPHA + BETA * OMEGA / math.sqrt(2)) * 6.0)
    assert modulated.sensitivity(
        ALPHA, BETA, OMEGA, 2, 3.0, adjacency_diameter=1.0
    ) == pytest.approx(ALPHA + BETA * OMEGA / math.sqrt(2))
    with pytest.raises(ValueError, match="adjacency_diameter"):
        modulated.sensitivity(ALPHA, BETA, OMEGA, 2, 3.0, adjacency_diameter=7.0)


@pytest.mark.parametrize("rounds", [1, 10])
def test_calibration_spends_the_target(rounds):
    sensitivity = modulated.sensitivity(1.0, 0.5, 1.0, 1, 3.0)
    sigma = modulated.calibrated_noise_std(2.0, 1e-6, rounds, sensitivity)
    assert _zcdp_epsilon(rounds, sensitivity, sigma, 1e-6) == pytest.approx(2.0, rel=1e-10)
    assert privacy.epsilon_of_gaussian(sensitivity, sigma, 1e-6, rounds) == pytest.approx(2.0)


def test_classic_accountant_needs_more_noise_than_zcdp_over_rounds():
    sensitivity = 4.5
    zcdp_sigma = modulated.calibrated_noise_std(5.0, 1e-5, 10, sensitivity, privacy.Zcdp())
    classic_sigma = modulated.calibrated_noise_std(5.0, 1e-5, 10, sensitivity, privacy.Classic())
    assert classic_sigma > zcdp_sigma
    classic = privacy.certify(
        privacy.rounds_of(dp_accounting.GaussianDpEvent(classic_sigma / sensitivity), 10), 1e-5,
        accountant=privacy.Classic(), adjacency="bounded", notion="n", protected="p",
        trust_model="t",
    )  # fmt: skip
    assert classic.epsilon == pytest.approx(5.0, rel=1e-9)
    assert classic.accountant == privacy.Classic.name


def _zcdp_epsilon(rounds, sensitivity, noise_std, delta):
    """eps of T Gaussian releases by the zCDP closed form, written out independently."""
    rho = rounds * sensitivity**2 / (2 * noise_std**2)
    return rho + 2 * math.sqrt(rho * math.log(1 / delta))


# ------------------------------------------------------- what a run certifies: its releases


@pytest.fixture(scope="module")
def fair():
    from jfed.data import load_regression

    return load_regression("fair")


def _experiment(config, task):
    from jfed.methods import build_experiment

    return build_experiment(config, task=task)


def _f32(value) -> float:
    """A traced number as the device ran it."""
    return float(np.float32(value))


def _map_multiplier(hp, directions: int) -> float:
    """sigma / (L D) of the map, from the float32 numbers of ``hp``, written out independently
    (L = alpha + beta omega / sqrt(k), D = 2 C)."""
    alpha, beta, omega = _f32(hp.alpha), _f32(hp.beta), _f32(hp.omega)
    lipschitz = alpha + beta * omega / math.sqrt(directions)
    return _f32(hp.noise_std) / (lipschitz * 2 * _f32(hp.clip_norm))


def _dp_accounting_epsilon(event, delta: float, accountant: str) -> float:
    """eps of ``event`` at ``delta`` by dp-accounting itself (bounded adjacency: its
    add-or-remove reading of a Gaussian's multiplier), or by the zCDP closed form."""
    if accountant == "zcdp":
        rho = sum(count / (2 * z**2) for z, count in _gaussians(event))
        return rho + 2 * math.sqrt(rho * math.log(1 / delta))
    if accountant == "pld":
        made = dp_accounting.pld.PLDAccountant(
            dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE, 1e-4
        )
    else:
        made = dp_accounting.rdp.RdpAccountant()
    return made.compose(event).get_epsilon(delta)


def _gaussians(event, count=1):
    """``(multiplier, count)`` of every Gaussian in a composed event."""
    if isinstance(event, dp_accounting.GaussianDpEvent):
        return [(event.noise_multiplier, count)]
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return _gaussians(event.event, count * event.count)
    return [pair for child in event.events for pair in _gaussians(child, count)]


def _assert_certifies(fields, event, accountant):
    expected = _dp_accounting_epsilon(event, fields["delta"], accountant)
    assert fields["epsilon_certified"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("accountant", ["zcdp", "pld"])
@pytest.mark.parametrize("method", ["iterative", "one-shot"])
def test_modulated_record_certifies_the_releases_it_made(fair, method, accountant):
    """The record's eps is dp-accounting's (PLD) or the zCDP closed form's for the events built
    here from the numbers that ran: R Gaussian messages per client at sigma / (L D), bounded
    adjacency, no sampling. Negative control: the event of a map whose modulation is forgotten
    (L = alpha), or of one round fewer, is told apart."""
    from jfed.methods import ModulatedIterative, ModulatedOneShot

    common = dict(dataset="fair", epsilon=3.0, accountant=accountant, beta=0.7, omega=2.0,
                  feature_clip=2.0)  # fmt: skip
    rounds = 4 if method == "iterative" else 1
    config = {
        "iterative": lambda: ModulatedIterative(rounds=rounds, **common),
        "one-shot": lambda: ModulatedOneShot(**common),
    }[method]()
    experiment = _experiment(config, fair)
    hp, fields = experiment.calibrated(config)
    z = _map_multiplier(hp, 1)
    event = privacy.rounds_of(dp_accounting.GaussianDpEvent(z), rounds)
    _assert_certifies(fields, event, accountant)
    assert fields["epsilon_certified"] == pytest.approx(3.0, rel=1e-6)
    assert fields["adjacency"] == "bounded" and fields["accountant"] == accountant
    assert "x_i" in fields["protected"] and fields["noise_multiplier"] == pytest.approx(z)
    unmodulated = _f32(hp.noise_std) / (_f32(hp.alpha) * 2 * _f32(hp.clip_norm))
    for wrong in (
        privacy.rounds_of(dp_accounting.GaussianDpEvent(unmodulated), rounds),
        privacy.rounds_of(dp_accounting.GaussianDpEvent(z), rounds + 1),
    ):
        with pytest.raises(AssertionError):
            _assert_certifies(fields, wrong, accountant)


@pytest.mark.parametrize("accountant", ["zcdp", "pld"])
def test_dpsgd_record_certifies_the_releases_it_made(fair, accountant):
    """DP-SGD: T Gaussian messages per client at multiplier sigma / 2G (a record moves its
    clipped gradient by up to 2G), as built here. Negative control: the event of a gradient
    stated to move by G only (multiplier 2z) is told apart."""
    from jfed.methods import DPSGD

    config = DPSGD(dataset="fair", epsilon=2.0, rounds=5, accountant=accountant,
                   gradient_clip=0.7)  # fmt: skip
    hp, fields = _experiment(config, fair).calibrated(config)
    z = _f32(hp.noise_std) / (2 * _f32(hp.clip_norm))
    event = privacy.rounds_of(dp_accounting.GaussianDpEvent(z), 5)
    _assert_certifies(fields, event, accountant)
    assert fields["sigma"] == pytest.approx(_f32(hp.noise_std), rel=1e-6)
    assert fields["epsilon_certified"] == pytest.approx(2.0, rel=1e-6)
    with pytest.raises(AssertionError):
        _assert_certifies(fields, privacy.rounds_of(dp_accounting.GaussianDpEvent(2 * z), 5),
                          accountant)  # fmt: skip


def test_a_plugged_in_randomizer_is_certified_by_its_own_event(fair):
    """The Laplace randomizer of examples/custom_randomizer.py: the record's eps is
    dp-accounting's PLD of T Laplace messages at the multiplier that ran (its L1 sensitivity,
    sqrt(d) 2G, times z). Negative control: the Gaussian event at the same multiplier."""
    import runpy

    from jfed.methods import METHODS

    example = runpy.run_path(str(_EXAMPLES / "custom_randomizer.py"))
    try:
        config = example["LaplaceDPSGD"](dataset="fair", epsilon=4.0, rounds=3,
                                         accountant="pld")  # fmt: skip
        experiment = example["LaplaceDPSGDExperiment"](config, task=fair)
        hp, fields = experiment.calibrated(config)
    finally:
        # the example registers its method: forgotten, so that no later test of this process
        # (the examples' own, which register it again) finds the name taken
        METHODS.remove("dpsgd-laplace")
    z = _f32(hp.noise_std) / (math.sqrt(fair.dim) * 2 * _f32(hp.clip_norm))
    laplace = privacy.rounds_of(dp_accounting.LaplaceDpEvent(z), 3)
    _assert_certifies(fields, laplace, "pld")
    assert fields["sensitivity"] == pytest.approx(math.sqrt(fair.dim) * 2 * config.gradient_clip)
    with pytest.raises(AssertionError):
        _assert_certifies(fields, privacy.rounds_of(dp_accounting.GaussianDpEvent(z), 3), "pld")


def test_the_certificate_follows_the_clip_that_ran(fair):
    """The ledger reads the map's numbers from the run's hyper-parameters: the noise calibrated
    for a clip of 1 certifies the target with that clip, and far more if the run used a clip of 3
    (the drift a bundled plan once prevented is now stated, not hidden)."""
    from jfed.methods import ModulatedIterative

    config = ModulatedIterative(dataset="fair", epsilon=2.0, delta=1e-6, rounds=10,
                                feature_clip=1.0)  # fmt: skip
    experiment = _experiment(config, fair)
    hp, fields = experiment.calibrated(config)
    lipschitz = 1.0 + 0.5 * 1.0 / 1.0
    assert float(hp.clip_norm) == 1.0 and float(hp.beta) == 0.5
    certified = _zcdp_epsilon(10, lipschitz * 2 * 1.0, _f32(hp.noise_std), 1e-6)
    assert certified == pytest.approx(fields["epsilon_certified"], rel=1e-9)
    assert certified == pytest.approx(2.0, rel=1e-6)
    drifted = experiment.certify_run(hp._replace(clip_norm=np.float32(3.0)), 1e-6, privacy.Zcdp())
    assert drifted.epsilon == pytest.approx(
        _zcdp_epsilon(10, lipschitz * 2 * 3.0, _f32(hp.noise_std), 1e-6), rel=1e-9
    )
    assert drifted.epsilon > 3 * fields["epsilon_certified"]


def test_a_shared_noise_sweep_certifies_every_eps_from_its_own_level(fair, tmp_path):
    """A sweep whose eps share one pass over the clients (SharedNoise): every row certifies its
    own eps, dp-accounting's for ITS noise level (the other levels' events are told apart)."""
    from jfed.methods import ModulatedOneShot
    from jfed.sweep import configurations, run_sweep

    base = ModulatedOneShot(dataset="fair")
    experiment = _experiment(base, fair)
    configs = configurations(base, [0.5, 5.0], 1)
    rows = run_sweep(experiment, configs, str(tmp_path / "runs.jsonl"))
    assert all(row["shared_noise"] for row in rows)
    events = {}
    for row, config in zip(rows, configs, strict=True):
        hp = experiment.calibrated(config)[0]
        events[row["epsilon"]] = dp_accounting.GaussianDpEvent(_map_multiplier(hp, 1))
    for row in rows:
        _assert_certifies(row, events[row["epsilon"]], "zcdp")
        other = next(event for eps, event in events.items() if eps != row["epsilon"])
        with pytest.raises(AssertionError):
            _assert_certifies(row, other, "zcdp")
