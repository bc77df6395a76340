"""Silo data sets (offline constructions and the seed-file loaders) and the float64 metrics."""

import json

import numpy as np
import pytest
from scipy import optimize

from jfed.algorithms import silo_metrics
from jfed.cli.main import main
from jfed.data import silos


def test_digits_even_odd_construction():
    task = silos.load_silos("digits-evenodd")
    assert task.n_silos == 25 and task.loss == "logistic" and task.dim == 50
    X, y = task.train.pooled()
    assert np.linalg.norm(X, axis=1).max() <= 1 + 1e-6
    assert set(np.unique(y)) == {0.0, 1.0}
    assert int(np.asarray(task.train.counts).sum()) + len(task.test[1]) == 1797


def test_mixing_moves_records_between_silos():
    rng = np.random.default_rng(0)
    homes = [np.array([i % 5]) for i in range(5000)]
    heterogeneous = silos._assign_with_mixing(homes, 5, 0.0, rng)
    assert np.array_equal(heterogeneous, np.arange(5000) % 5)
    homogeneous = silos._assign_with_mixing(homes, 5, 1.0, rng)
    assert np.mean(homogeneous == np.arange(5000) % 5) == pytest.approx(0.2, abs=0.03)
    with pytest.raises(ValueError, match="mixing in"):
        silos._assign_with_mixing(homes, 5, 1.5, rng)


def test_sorted_target_and_label_silos():
    task = silos.load_silos("fair-sorted", n_silos=6)
    assert task.n_silos == 6 and task.loss == "squared"
    y = np.asarray(task.train.targets)
    counts = np.asarray(task.train.counts)
    maxima = [y[i, : counts[i]].max() for i in range(6)]
    minima = [y[i, : counts[i]].min() for i in range(6)]
    assert all(maxima[i] <= minima[i + 1] for i in range(5))  # silos ordered by target
    bylabel = silos.load_silos("digits-bylabel")
    assert bylabel.n_silos == 10 and bylabel.loss == "softmax" and bylabel.classes == 10
    targets, counts = np.asarray(bylabel.train.targets), np.asarray(bylabel.train.counts)
    assert all(np.all(targets[i, : counts[i]] == i) for i in range(10))


def test_seed_file_loaders_on_tiny_files(tmp_path):
    rng = np.random.default_rng(0)
    mnist = tmp_path / "mnist_train.csv"
    header = "label," + ",".join(f"pixel{i}" for i in range(784))
    rows = [",".join([str(d)] + [str(v) for v in rng.integers(0, 255, 784)]) for d in
            np.tile(np.arange(10), 60)]  # fmt: skip
    mnist.write_text(header + "\n" + "\n".join(rows) + "\n")
    task = silos.load_seed_csv(str(mnist), "mnist")
    assert task.n_silos == 25 and task.name == "mnist-evenodd" and task.dim == 50

    insurance = tmp_path / "insurance.csv"
    lines = ["age,sex,bmi,children,smoker,region,charges"] + [
        f"{20 + i},{'male' if i % 2 else 'female'},{25 + i % 7},{i % 3},"
        f"{'yes' if i % 5 == 0 else 'no'},{['north', 'south'][i % 2]},{1000 + 37 * i}"
        for i in range(60)
    ]
    insurance.write_text("\n".join(lines) + "\n")
    task = silos.load_seed_csv(str(insurance), "insurance", n_silos=4)
    assert task.n_silos == 4 and task.loss == "squared"

    obesity = tmp_path / "obesity.csv"
    classes = ["Insufficient_Weight", "Normal_Weight", "Overweight_Level_I", "Obesity_Type_I"]
    lines = ["Gender,Age,Height,Weight,FAVC,NObeyesdad"] + [
        f"{'Male' if i % 2 else 'Female'},{20 + i % 30},{1.6 + i % 5 / 20},{50 + i},"
        f"{'yes' if i % 3 else 'no'},{classes[i % 4]}"
        for i in range(80)
    ]
    obesity.write_text("\n".join(lines) + "\n")
    task = silos.load_seed_csv(str(obesity), "obesity")
    assert task.n_silos == 4 and task.loss == "softmax" and task.classes == 4
    with pytest.raises(ValueError, match="unknown seed file kind"):
        silos.load_seed_csv(str(obesity), "cifar")


def test_bad_silo_data():
    with pytest.raises(ValueError, match="unknown silo dataset"):
        silos.load_silos("mnist")
    with pytest.raises(ValueError, match="finite values in features of silo 1"):
        silos.SiloData.from_lists(
            [np.ones((2, 2)), np.full((2, 2), np.nan)], [np.zeros(2), np.zeros(2)]
        )
    with pytest.raises(ValueError, match=">= 1 record"):
        silos.SiloData.from_lists([np.ones((2, 2)), np.ones((0, 2))], [np.zeros(2), np.zeros(0)])


@pytest.mark.parametrize("name, classes", [("squared", 1), ("logistic", 1), ("softmax", 3)])
def test_optimum_matches_scipy(name, classes):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 4)) / 2
    y = (rng.integers(0, classes, 200) if name == "softmax" else rng.integers(0, 2, 200)).astype(
        float
    )
    if name == "squared":
        y = X @ np.array([1.0, -1.0, 0.5, 0.0]) + 0.1 * rng.normal(size=200)
    w = silo_metrics.fit_optimum(name, classes, X, y, radius=100.0)
    reference = optimize.minimize(
        lambda v: silo_metrics.loss_and_gradient(name, classes, v, X, y),
        np.zeros(w.size), jac=True, method="L-BFGS-B", options={"gtol": 1e-10},
    ).x  # fmt: skip
    f = silo_metrics.loss_and_gradient(name, classes, w, X, y)[0]
    f_ref = silo_metrics.loss_and_gradient(name, classes, reference, X, y)[0]
    assert f == pytest.approx(f_ref, abs=1e-8)
    constrained = silo_metrics.fit_optimum(name, classes, X, y, radius=0.1)
    assert np.linalg.norm(constrained) <= 0.1 + 1e-12


def test_heterogeneity_and_task_metrics():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(50, 3))
    y = X @ np.array([1.0, 2.0, 3.0])
    w_star = np.array([1.0, 2.0, 3.0])
    same = [(X, y), (X, y)]
    assert silo_metrics.heterogeneity("squared", 1, w_star, same) == pytest.approx(0.0, abs=1e-20)
    shifted = [(X, y + 1.0), (X, y - 1.0)]
    assert silo_metrics.heterogeneity("squared", 1, w_star, shifted) > 0
    assert silo_metrics.relative_rmse(np.zeros(3), X, y, y.mean()) == pytest.approx(
        np.sqrt(np.mean(y**2) / np.mean((y - y.mean()) ** 2))
    )
    labels = (X @ w_star > 0).astype(float)
    assert silo_metrics.test_error("logistic", 1, w_star, X, labels) == 0.0
    assert silo_metrics.test_error("logistic", 1, -w_star, X, labels) == 1.0


def test_silo_cli(capsys):
    # few silos: the exact calibration is one PLD search per silo size (the 25 digits silos: 58 s);
    # Local SGD with its defaults: Poisson-sampled local steps, accounted by PLD
    assert main(["run", "local-sgd", "--dataset", "synthetic", "--silos", "4", "--epsilon", "3",
                 "--rounds", "3", "--json", "-"]) == 0  # fmt: skip
    record = json.loads(capsys.readouterr().out)
    fields = ("algorithm", "dataset", "n_silos", "epsilon", "delta", "accountant", "sigma",
              "excess_train_risk", "excess_test_risk", "test_error", "heterogeneity")  # fmt: skip
    assert set(fields) <= set(record)
    assert record["accountant"] == "pld-poisson-replace-one" and record["sampling"] == "poisson"
    assert record["epsilon"] <= 3.0 and np.isfinite(record["excess_train_risk"])
    assert main(["run", "fedavg", "--dataset", "fair-sorted", "--rounds", "3", "--step-size",
                 "0.1", "--json", "-"]) == 0  # fmt: skip
    record = json.loads(capsys.readouterr().out)
    assert "relative_rmse" in record and record["accountant"] == "none"
    assert main(["run", "accel-mbsgd", "--batch", "50", "--rounds", "3"]) == 2
    assert "one-pass" in capsys.readouterr().err
    assert main(["run", "noisy-mbsgd", "--epsilon", "-1"]) == 2
    # 25 silos x K=10 = 250 messages per round are too few for the shuffling bound at delta 1e-12
    assert main(["run", "shuffle-mbsgd", "--delta", "1e-12", "--rounds", "3", "--batch", "10"]) == 2
    assert "shuffled messages" in capsys.readouterr().err
