"""pfl-research's side of bench/pfl_cifar10.py, run by that script with the Python of its own
virtual environment (pfl 0.6 and PyTorch; neither is a jfed dependency).

Reads the images and the setup from the .npz and JSON files it is given, trains pfl's CIFAR-10
setup (benchmarks/image_classification of apple/pfl-research: its simple_cnn, FedAvg with
WeightByUser, a central SGD optimizer, local SGD, optionally central DP by a Gaussian mechanism
calibrated by pfl's PLD accountant with a noise cohort), and writes one JSON object: the seconds
of every round and, per round, the seconds spent in local training, clipping, noise and the rest
(aggregation and the central update), measured by wrapping pfl's own functions, and the test
accuracy after the last round.
"""

import json
import logging
import sys
import time
import types

import numpy as np
import torch
import torch.nn as nn
from pfl.aggregate.simulate import SimulatedBackend
from pfl.aggregate.weighting import WeightByUser
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
from pfl.callback.base import TrainingProcessCallback
from pfl.data.dataset import Dataset
from pfl.data.federated_dataset import FederatedDataset
from pfl.data.sampling import get_user_sampler
from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
from pfl.metrics import Metrics, Weighted
from pfl.model.pytorch import PyTorchModel
from pfl.privacy import (
    CentrallyAppliedPrivacyMechanism,
    GaussianMechanism,
    NoPrivacy,
    PLDPrivacyAccountant,
)


class Transpose2D(nn.Module):
    def forward(self, inputs):
        return inputs.permute((0, 3, 1, 2))


def simple_cnn(input_shape, num_outputs):
    """pfl-research's benchmarks/model/pytorch/cnn.py simple_cnn, as written there."""
    flatten_size = ((input_shape[0] - 4) // 2) ** 2 * 64
    model = nn.Sequential(
        Transpose2D(), nn.Conv2d(input_shape[-1], 32, kernel_size=(3, 3)), nn.ReLU(),
        nn.Conv2d(32, 64, kernel_size=(3, 3)), nn.ReLU(), nn.MaxPool2d((2, 2)), nn.Dropout(0.25),
        nn.Flatten(), nn.Linear(flatten_size, 128), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(128, num_outputs),
    )  # fmt: skip
    for module in model.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            torch.nn.init.xavier_uniform_(module.weight)

    def loss(self, inputs, targets, eval=False):
        self.eval() if eval else self.train()
        return nn.functional.cross_entropy(self(inputs), targets.long())

    @torch.no_grad()
    def metrics(self, inputs, targets, eval=True):
        self.eval() if eval else self.train()
        logits = self(inputs)
        correct = (logits.argmax(-1) == targets.long()).float().sum().item()
        total = nn.functional.cross_entropy(logits, targets.long(), reduction="sum").item()
        return {"loss": Weighted(total, len(inputs)), "accuracy": Weighted(correct, len(inputs))}

    model.loss = types.MethodType(loss, model)
    model.metrics = types.MethodType(metrics, model)
    return model


class Stopwatch:
    """Seconds spent inside wrapped functions, per round."""

    def __init__(self):
        self.parts = {"local_training": 0.0, "clipping": 0.0, "noise": 0.0}

    def wrap(self, owner, name, part):
        inner = getattr(owner, name)

        def timed(*args, **kwargs):
            tic = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.parts[part] += time.perf_counter() - tic

        setattr(owner, name, timed)


class RoundTimes(TrainingProcessCallback):
    def __init__(self, stopwatch):
        self.stopwatch, self.rounds, self.tic = stopwatch, [], time.perf_counter()

    def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
        now = time.perf_counter()
        self.rounds.append({"seconds": now - self.tic, **self.stopwatch.parts})
        self.stopwatch.parts = dict.fromkeys(self.stopwatch.parts, 0.0)
        self.tic = now
        return False, Metrics()


def main(data_path: str, setup_path: str, out_path: str) -> None:
    logging.getLogger("pfl").setLevel(logging.WARNING)  # its per-round metrics, not ours
    setup = json.load(open(setup_path))
    torch.manual_seed(setup["seed"])
    np.random.seed(setup["seed"])
    torch.set_num_threads(setup.get("threads") or torch.get_num_threads())
    data = np.load(data_path)
    images, labels = data["train_x"], data["train_y"].astype(np.int64)
    users = [
        (torch.tensor(images[i : i + setup["images_per_user"]]),
         torch.tensor(labels[i : i + setup["images_per_user"]]))
        for i in range(0, setup["users"] * setup["images_per_user"], setup["images_per_user"])
    ]  # fmt: skip
    training = FederatedDataset.from_slices(users, get_user_sampler("random", range(len(users))))
    test = Dataset((torch.tensor(data["test_x"]), torch.tensor(data["test_y"].astype(np.int64))))

    stopwatch = Stopwatch()
    if setup["dp"]:
        noise_scale = setup["cohort"] / setup["noise_cohort"]
        accountant = PLDPrivacyAccountant(
            num_compositions=setup["dp_iterations"],
            sampling_probability=max(setup["cohort"], setup["noise_cohort"]) / setup["population"],
            mechanism="gaussian", epsilon=setup["epsilon"], delta=setup["delta"],
            noise_scale=noise_scale,
        )  # fmt: skip
        mechanism = GaussianMechanism.from_privacy_accountant(
            accountant=accountant, clipping_bound=setup["clip"]
        )
        stopwatch.wrap(mechanism, "constrain_sensitivity", "clipping")
        stopwatch.wrap(mechanism, "add_noise", "noise")
        noise_stddev = setup["clip"] * mechanism.relative_noise_stddev
    else:
        mechanism, noise_stddev = NoPrivacy(), 0.0

    network = simple_cnn((32, 32, 3), 10)
    params = [p for p in network.parameters() if p.requires_grad]
    central = torch.optim.SGD(params, setup["central_lr"])
    model = PyTorchModel(
        model=network, local_optimizer_create=torch.optim.SGD, central_optimizer=central
    )
    stopwatch.wrap(model, "do_multiple_epochs_of", "local_training")
    backend = SimulatedBackend(
        training_data=training, val_data=None,
        postprocessors=[WeightByUser(), CentrallyAppliedPrivacyMechanism(mechanism)],
    )  # fmt: skip
    rounds = RoundTimes(stopwatch)
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(
            central_num_iterations=setup["rounds"], evaluation_frequency=setup["rounds"] + 1,
            train_cohort_size=setup["cohort"], val_cohort_size=0,
        ),
        backend=backend, model=model,
        model_train_params=NNTrainHyperParams(
            local_learning_rate=setup["local_lr"], local_num_epochs=1,
            local_batch_size=setup["batch"],
        ),
        model_eval_params=NNEvalHyperParams(local_batch_size=1000),
        callbacks=[rounds],
    )  # fmt: skip
    evaluated = model.evaluate(test, lambda n: n, NNEvalHyperParams(local_batch_size=1000))
    accuracy = evaluated.to_simple_dict(to_lowercase=True)
    result = {
        "pfl_version": __import__("pfl").__version__,
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "noise_stddev_on_sum": noise_stddev,
        "rounds": rounds.rounds,
        "test_accuracy": float(accuracy["accuracy"]),
    }
    with open(out_path, "w") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main(*sys.argv[1:4])
