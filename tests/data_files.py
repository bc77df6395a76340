"""Tiny data files written in exactly the real formats (CIFAR's python pickle batches, LEAF's
FEMNIST JSON user files), for the tests that read them (data loaders, DP-FedAvg on real data)."""

import json
import pickle

import numpy as np


def write_cifar(folder, per_batch=6, seed=0):
    """CIFAR-10's python version in ``folder`` (created): five training batches and a test batch
    of ``per_batch`` random images each; returns ``{batch name: (u8[per_batch, 3072], labels)}``."""
    rng = np.random.default_rng(seed)
    folder.mkdir()
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    written = {}
    for name in names:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, per_batch)]
        batch = {b"batch_label": name.encode(), b"labels": labels, b"data": data,
                 b"filenames": [f"{name}_{i}.png".encode() for i in range(per_batch)]}  # fmt: skip
        with open(folder / name, "wb") as handle:
            pickle.dump(batch, handle, protocol=2)
        written[name] = (data, labels)
    return written


def write_leaf(folder, users, seed=0):
    """LEAF's FEMNIST ``train/`` and ``test/`` JSON files under ``folder`` for ``users`` (4
    training and 2 test characters each)."""
    rng = np.random.default_rng(seed)
    for part, per_user in (("train", 4), ("test", 2)):
        (folder / part).mkdir(parents=True)
        data = {"users": users, "num_samples": [per_user] * len(users), "user_data": {}}
        for user in users:
            x = rng.integers(0, 256, (per_user, 784)) / 255.0
            labels = [int(v) for v in rng.integers(0, 62, per_user)]
            data["user_data"][user] = {"x": x.tolist(), "y": labels}
        with open(folder / part / f"all_data_0_niid_1_keep_0_{part}_9.json", "w") as handle:
            json.dump(data, handle)
