"""Per-client state kept off the device (:class:`jfed.engine.HostTable`): in host memory or in
``.npy`` files on disk, the cohort's rows read and written from inside the compiled rounds.

- The same bits as the device table: the engine's Visits algorithm (a Poisson cohort padded in
  every round) at two chunk widths, and SCAFFOLD, give every output and every stored row equal to
  the device run's, in host memory and on disk.
- A client's row survives between its participations: each final row is what the cohort ids of
  the rounds predict (visits counted, last round, features summed in visit order), padding
  wrote nothing (the last client's row moved only in the rounds that drew it). Negative
  control: a table that forgets its writes fails the same check.
- The files are written where the user says and are a valid table afterwards (``np.load``).
- On a mesh of 8 devices the rows are the 1-device run's.
- Runs mapped one after another (a sweep's vector width 1) each get the table in turn; runs
  vmapped together are refused in one line.
"""

from __future__ import annotations

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_client_state import N_CLIENTS, POPULATION, ROUNDS, Visits, _first_features, run

from jfed import privacy
from jfed.algorithms import scaffold
from jfed.algorithms.local_training import LocalTraining
from jfed.data import dirichlet_digits
from jfed.engine import ExecutionPlan, HostTable, Poisson, client_mesh, run_rounds, simulate
from jfed.engine.client_state import ONE_RUN, choose_client_state, store_named, table_bytes
from jfed.models import DenseClassifier

COHORT = Poisson(0.1, capacity=12)


class Forgetful(HostTable):
    """Negative control: a table that counts its writes but never stores them."""

    def write(self, ids, valid, writes, rows):
        return np.uint32(writes + 1)


@functools.cache
def device_run(chunk: int):
    return run(Visits(COHORT), ExecutionPlan(block_size=chunk, chunk_size=chunk))


def rows_follow_the_cohorts(clients: dict, infos: dict) -> bool:
    """Every client's final row as the rounds' cohorts predict: its visits, the last round that
    drew it (-1: none, its initial row) and its first three features added once per visit
    (float32, in order)."""
    x = _first_features()
    visits = np.zeros(N_CLIENTS, np.int32)
    last = np.full(N_CLIENTS, -1, np.int32)
    total = np.zeros((N_CLIENTS, 3), np.float32)
    for t in range(ROUNDS):
        members = np.asarray(infos["ids"][t])[: int(infos["size"][t])]
        visits[members] += 1
        last[members] = t
        total[members] = (total[members] + x[members]).astype(np.float32)
    return (np.array_equal(np.asarray(clients["visits"]), visits)
            and np.array_equal(np.asarray(clients["last"]), last)
            and np.array_equal(np.asarray(clients["total"]), total))  # fmt: skip


def assert_same_bits(a, b) -> None:
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("chunk", [8, 16], ids=["chunks of 8", "chunks of 16"])
def test_host_and_disk_tables_give_the_device_tables_bits(chunk, tmp_path):
    """A Poisson cohort of capacity 12 pads every round (to 16 slots); with the table in host
    memory and on disk, the server state, the cohorts and every client's row are the device
    run's bits, and the rows are what the cohorts predict (padding wrote nothing)."""
    (device, device_infos) = device_run(chunk)
    sizes = np.asarray(device_infos["size"])
    assert np.all(sizes < 12) and sizes.max() > 0  # padding in every round
    assert rows_follow_the_cohorts(device.clients, device_infos)
    for store in (HostTable(), HostTable(tmp_path / "table")):
        plan = ExecutionPlan(block_size=chunk, chunk_size=chunk, client_state=store)
        final, infos = run(Visits(COHORT), plan)
        assert_same_bits(final.server, device.server)
        assert_same_bits(final.clients, device.clients)
        for name in ("ids", "size"):
            np.testing.assert_array_equal(np.asarray(infos[name]), device_infos[name])
        np.testing.assert_array_equal(np.asarray(infos["table"].writes), np.arange(1, ROUNDS + 1))
    last = N_CLIENTS - 1
    drawn = sum(last in np.asarray(device_infos["ids"][t])[: sizes[t]] for t in range(ROUNDS))
    assert int(final.clients["visits"][last]) == drawn < ROUNDS  # padding id n never wrote it


def test_a_table_that_forgets_its_writes_is_caught():
    """Negative control: the check of the rows against the cohorts rejects a table whose writes
    are lost (every client still at its initial row)."""
    final, infos = run(Visits(COHORT), ExecutionPlan(block_size=8, chunk_size=8,
                                                     client_state=Forgetful()))  # fmt: skip
    assert not rows_follow_the_cohorts(final.clients, infos)
    assert int(np.asarray(final.clients["visits"]).max()) == 0


def test_the_files_are_written_where_the_user_says_and_are_a_valid_table(tmp_path):
    """One ``.npy`` per leaf of the state, named by its path, in the folder named (created);
    ``np.load`` reads the population's rows, the device run's. The next run makes new files;
    the rows of the run before, mapped, stay as they were."""
    folder = tmp_path / "runs" / "visits"
    store = HostTable(folder)
    plan = ExecutionPlan(block_size=8, chunk_size=8, client_state=store)
    first, _ = run(Visits(COHORT), plan)
    assert sorted(p.name for p in folder.iterdir()) == ["last.npy", "total.npy", "visits.npy"]
    assert sorted(store.files()) == sorted(str(p) for p in folder.iterdir())
    device, _ = device_run(8)
    for name, leaf in device.clients.items():
        loaded = np.load(folder / f"{name}.npy")
        assert loaded.shape == (N_CLIENTS, *leaf.shape[1:]) and loaded.dtype == leaf.dtype
        np.testing.assert_array_equal(loaded, np.asarray(leaf))
    assert repr(store) == f"HostTable({str(folder)!r})" and store.kind == "disk"
    again, _ = run(Visits(COHORT), plan, reset=True)  # the same program: its table made anew
    assert int(np.load(folder / "visits.npy").max()) == int(again.clients["visits"].max()) == 1
    np.testing.assert_array_equal(first.clients["visits"], device.clients["visits"])  # kept


@pytest.mark.usefixtures("on_cpu")  # bit for bit against the 8-device mesh: the CPU's claim
def test_a_host_table_serves_a_mesh_of_8_devices():
    """The cohort's rows read once and handed to the 8 devices, the new rows gathered back:
    the 1-device run's rows, bit for bit."""
    mesh = client_mesh(8, backend="cpu")
    plan = ExecutionPlan(block_size=8, chunk_size=8, mesh=mesh, client_state=HostTable())
    final, _ = run(Visits(COHORT), plan)
    assert_same_bits(final.clients, device_run(8)[0].clients)


def scaffold_run(plan: ExecutionPlan):
    task = dirichlet_digits(30, 0.1, 0)
    training = LocalTraining(int(task.train.features.shape[1]), 10, 1)
    program = scaffold.Scaffold(DenseClassifier(64, 10), training, COHORT, privacy.CohortMean(),
                                privacy.PlainSum(), n_clients=30)  # fmt: skip
    f32 = jnp.float32
    hyper = scaffold.Hyperparams(f32(0.1), f32(1.0), f32(0.0), privacy.NoParams(),
                                 privacy.NoParams())  # fmt: skip
    return simulate(program, task.train, hyper, jax.random.key(0), 6, plan)


def test_scaffold_on_a_host_table_is_the_device_runs_bits():
    device = scaffold_run(ExecutionPlan(block_size=8, chunk_size=8))
    host = scaffold_run(ExecutionPlan(block_size=8, chunk_size=8, client_state=HostTable()))
    assert_same_bits(host, device)
    assert np.any(np.asarray(jax.tree.leaves(host[0].clients)[0]) != 0)  # some state was kept


def test_runs_one_after_another_share_the_table_in_turn_and_vmapped_runs_are_refused():
    """``lax.map`` over two run keys (a sweep's slice at vector width 1): each run's server
    state is its own run's, and the rows left are the last run's; at width 2 the one-line
    refusal."""
    store = HostTable()
    plan = ExecutionPlan(block_size=8, chunk_size=8, client_state=store).fitted(N_CLIENTS)
    hyper = {"reset": jnp.bool_(False)}
    keys = jax.random.split(jax.random.key(3), 2)

    def one(key):
        state, _ = run_rounds(Visits(COHORT), POPULATION, hyper, key, 3, plan)
        return state.server

    def mapped(width):
        return jax.jit(lambda keys: jax.lax.map(one, keys, batch_size=width))(keys)

    servers = np.asarray(mapped(1))
    last = simulate(Visits(COHORT), POPULATION, hyper, keys[1], 3, plan)[0]
    first = simulate(Visits(COHORT), POPULATION, hyper, keys[0], 3, plan)[0]
    np.testing.assert_array_equal(servers, [float(first.server), float(last.server)])
    assert int(store.rows()["visits"].sum()) == float(first.server)
    with pytest.raises(ValueError, match="one run at a time") as refused:
        mapped(2)
    assert ONE_RUN in str(refused.value)


def test_the_place_of_a_table_is_chosen_or_refused_in_one_line():
    """10^6 clients x 10^5 float32 parameters: 400 GB, on no device, host or disk here."""
    row = jax.ShapeDtypeStruct((10**5,), jnp.float32)
    table = table_bytes({"control": row}, 10**6)
    assert table == 4 * 10**11
    GB = 10**9
    assert choose_client_state(table, 80 * GB, 128 * GB, 1000 * GB) == "disk"
    assert choose_client_state(4 * GB, 80 * GB, 128 * GB) == "device"
    assert choose_client_state(4 * GB, 80 * GB, 128 * GB, requested="host") == "host"
    with pytest.raises(ValueError) as refused:
        choose_client_state(table, 80 * GB, 23 * GB, 75 * GB)
    message = str(refused.value)
    assert "\n" not in message
    for size in ("400 GB", "80 GB", "23 GB", "75 GB"):
        assert size in message
    with pytest.raises(ValueError, match="name a folder"):
        choose_client_state(table, 80 * GB, 23 * GB)
    with pytest.raises(ValueError, match="client_state"):
        store_named("disk")
    assert store_named("device") is None
    assert ExecutionPlan(client_state=store_named("host")).describe()["client_state"] == "host"
    assert "client_state" not in ExecutionPlan().describe()  # device records unchanged


# ------------------------------------------------------------------- the command line and sweeps

SCAFFOLD_RUN = ["run", "scaffold", "--clients", "200", "--cohort-size", "20", "--rounds", "3"]


def test_the_command_line_runs_a_table_off_the_device_as_on_it(tmp_path, capsys):
    """``--client-state host`` and ``disk`` (with its folder) run SCAFFOLD's table off the device
    through the sweep runner (one run at a time): the record is the device run's, field by
    field, but for the plan and the timings; the disk table's files are in the folder."""
    from jfed.cli.main import main

    records = {}
    for place, extra in (("device", []), ("host", ["--client-state", "host"]),
                         ("disk", ["--client-state", "disk", "--client-state-dir",
                                   str(tmp_path / "table")])):  # fmt: skip
        path = tmp_path / f"{place}.json"
        assert main([*SCAFFOLD_RUN, *extra, "--json", str(path)]) == 0
        records[place] = json.loads(path.read_text())
    capsys.readouterr()
    timing = {"plan", "compile_seconds", "run_seconds", "calibration_seconds", "timestamp"}
    for place in ("host", "disk"):
        differing = {k for k in records["device"] if records["device"][k] != records[place][k]}
        assert differing <= timing, differing
        assert records[place]["plan"]["client_state"] == place
    files = sorted((tmp_path / "table").iterdir())
    assert files and all(f.suffix == ".npy" for f in files)  # a control variate per leaf
    assert all(np.load(f).shape[0] == 200 for f in files)  # a row per client


@pytest.mark.parametrize(
    ("arguments", "answer"),
    [
        (["run", "dp-fedavg", "--client-state", "host"], "method dp-fedavg keeps no per-client"),
        (
            ["run", "ditto", "--clients", "200", "--client-state", "host"],
            "argument --client-state: invalid choice: 'host' (choose from 'device')",
        ),
        (["run", "scaffold", "--client-state", "disk"], "--client-state disk keeps the table"),
        (["run", "scaffold", "--client-state-dir", "x"], "--client-state-dir is the folder"),
    ],
)
def test_what_a_table_off_the_device_cannot_serve_is_refused_in_one_line(arguments, answer,
                                                                         capsys):  # fmt: skip
    from jfed.cli.main import main

    assert main(arguments) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"jfed: error: {answer}") and err.count("\n") == 1, err


def test_the_cost_check_counts_the_table_where_it_lives(monkeypatch, capsys):
    """On the device the table counts in the device's arrays and a refusal says so and how to
    keep it off the device; with ``--client-state host`` it does not, and a host without room
    for it is refused in one line saying what each place has free."""
    import jfed.methods.cost as cost
    from jfed.cli.main import main

    monkeypatch.setattr(cost, "available_memory", lambda: 16 * 2**30)
    monkeypatch.setattr(cost, "memory_budget", lambda: 16 * 2**30)
    monkeypatch.setattr(cost, "work_budget", lambda: cost.MAX_WORK["cpu"])
    big = ["run", "scaffold", "--clients", "10000000", "--rounds", "1"]  # a 24.4 GB table
    assert main(big) == 2
    err = capsys.readouterr().err
    assert "of them the per-client state table: --client-state host or disk" in err
    monkeypatch.setattr(cost, "available_memory", lambda: 2 * 2**30)
    assert main([*big, "--client-state", "host"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jfed: error: the per-client state table needs 24.4 GB "
                          "(client_state='host')") and "2.15 GB in host memory" in err  # fmt: skip
    assert err.count("\n") == 1
