"""The names jfed accepts (data sets, accountants, tuning rules, every choice of a method's
field), importable without JAX. The methods are declared in :mod:`jfed.methods.declared`.

The command line validates its arguments against these before it imports JAX or touches a
device, so a mistyped flag answers in a fraction of a second with one line, on every backend.
The modules that implement each name import their tuple from here, so the two cannot drift.
"""

from __future__ import annotations

# name -> number of features d, for the five regression tasks of the modulated-learning paper
# (statsmodels data sets; tests/test_imports.py checks these against the loaded tasks).
REGRESSION_DATASETS: dict[str, int] = {
    "co2": 7,
    "fair": 8,
    "modechoice": 7,
    "randhie-lncoins": 9,
    "randhie-fmde": 9,
}
DEFAULT_REGRESSION_DATASET = "fair"
# procedural clients of `jfed run --synthetic` when --clients / --dim are not given
SYNTHETIC_CLIENTS, SYNTHETIC_DIM = 100_000, 10

SILO_DATASETS: tuple[str, ...] = (
    "digits-evenodd",
    "digits-bylabel",
    "synthetic",
    *(f"{name}-sorted" for name in REGRESSION_DATASETS),
)
DEFAULT_SILO_DATASET = "digits-evenodd"

# accountants that calibrate T full-participation Gaussian releases (regression methods)
ROUNDS_ACCOUNTANTS = ("zcdp", "classic", "pld", "analytic")
# accountants of `jfed account` (subsampled Gaussian steps)
CALIBRATION_ACCOUNTANTS = ("pld", "rdp", "zcdp", "analytic", "classic")
# noise calibrations of the silo algorithms
SILO_CALIBRATIONS = ("theorem", "experiments", "exact")

TUNING_RULES = ("per-eps", "fixed")
# how a setting's validation values are scored when tuning
SELECTION_STATISTICS = ("median", "mean", "trimmed-mean")

# how each reported metric is named in tables and on plot axes
METRIC_LABELS = {
    "test_r2": "test R^2",
    "test_error": "test error rate",
    "relative_rmse": "relative RMSE",
    "test_accuracy": "test accuracy",
    "mse": "mean squared error",
}

# who is trusted and what is protected in the mean-estimation method (jfed run estimation)
ESTIMATION_SETTINGS = (
    "none",
    "local-item",
    "local-user-small",
    "local-user-large",
    "central-item",
    "central-user",
    "federated",
)

# the choices of the silo algorithms' fields
SILO_SAMPLINGS = ("with-replacement", "without-replacement", "poisson")
SAMPLINGS = (*SILO_SAMPLINGS, "one-pass")  # the accelerated algorithm's single pass too
LOCAL_SGD_SAMPLINGS = ("with-replacement", "poisson")  # Local SGD's K one-record local steps
AVAILABILITIES = ("all", "fixed", "bernoulli")

# LDP-FL: image data sets, how they are split among clients, local models, weight ranges
IMAGE_DATASETS = ("digits", "procedural-mnist")
IMAGE_SPLITS = ("iid", "by-label")
LDP_FL_MODELS = ("cnn", "mlp", "logistic")

# DP-FedAvg: populations (the last three read the user's files, --data-dir) and models
FILE_DATASETS = ("cifar10", "cifar100", "femnist")
FEDERATED_DATASETS = ("synthetic", "digits-dirichlet", "shakespeare", *FILE_DATASETS)
FEATURE_DATASETS = ("synthetic", "digits-dirichlet")  # records are feature vectors
SPLITS = ("iid", "dirichlet", "natural")  # how pooled records become clients (natural: by writer)
FEDERATED_MODELS = ("logistic", "mlp", "char-lstm", "femnist-cnn", "cifar-cnn", "transformer-lm")
COHORTS = ("poisson", "uniform")
SERVER_OPTIMIZERS = ("sgd", "adam", "adagrad", "yogi")
CLIPPINGS = ("flat", "per-layer")
COHORT_ACCOUNTANTS = ("pld", "rdp")
WEIGHT_RANGES = ("fixed", "adaptive")

# estimation: data models, noise, the user-level settings that locate the mean first
ESTIMATION_DATA = ("rademacher", "gaussian")
ESTIMATION_MECHANISMS = ("laplace", "gaussian")
TWO_STAGE_SETTINGS = ("local-user-small", "local-user-large", "central-user")
FUNCTIONAL_BASES = ("fourier", "legendre")
FUNCTIONAL_NOISE_SHAPES = ("anisotropic", "isotropic", "none")
