"""The built-in methods' declarations, one module per family, each registered through the public
:func:`jfed.methods.register` exactly as a user's method is. Importing this package loads no
numerical package."""

# the order of registration is the order of every listing (jfed methods, the README's tables)
# isort: off
from jfed.methods.declared import regression, silo, ldp_fl, estimation, dp_fedavg  # noqa: F401
from jfed.methods.declared import scaffold, ditto, dp_ftrl  # noqa: F401

# isort: on
from jfed.methods.declared.ditto import Ditto, DPDitto
from jfed.methods.declared.dp_fedavg import DPFedAvg, FedAvgSampled, FederatedTraining
from jfed.methods.declared.dp_ftrl import DPFTRL, BltDPFTRL, FtrlTraining
from jfed.methods.declared.estimation import Estimation, FunctionalEstimation
from jfed.methods.declared.ldp_fl import LDPFL
from jfed.methods.declared.private_training import PrivateTraining
from jfed.methods.declared.regression import (
    DPSGD,
    OLS,
    LocalPrivacy,
    Modulated,
    ModulatedIterative,
    ModulatedOneShot,
    RegressionData,
)
from jfed.methods.declared.scaffold import DPScaffold, Scaffold
from jfed.methods.declared.silo import (
    MBSGD,
    AcceleratedMBSGD,
    Calibrated,
    FedAvg,
    LocalSGD,
    NoisyMBSGD,
    ShuffleMBSGD,
    SiloData,
    SiloPrivacy,
    SiloTraining,
)

__all__ = [
    "DPFTRL",
    "DPSGD",
    "LDPFL",
    "MBSGD",
    "OLS",
    "AcceleratedMBSGD",
    "BltDPFTRL",
    "Calibrated",
    "DPDitto",
    "DPFedAvg",
    "DPScaffold",
    "Ditto",
    "Estimation",
    "FedAvg",
    "FedAvgSampled",
    "FederatedTraining",
    "FtrlTraining",
    "FunctionalEstimation",
    "LocalPrivacy",
    "LocalSGD",
    "Modulated",
    "ModulatedIterative",
    "ModulatedOneShot",
    "NoisyMBSGD",
    "PrivateTraining",
    "RegressionData",
    "Scaffold",
    "ShuffleMBSGD",
    "SiloData",
    "SiloPrivacy",
    "SiloTraining",
]
