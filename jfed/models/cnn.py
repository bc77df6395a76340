"""Small image CNNs of the federated benchmarks: LEAF's FEMNIST CNN and pfl-research's CIFAR-10
CNN. Records are images ``f32[h, w, c]`` (a flat ``f32[h * w * c]`` is reshaped).

Convolutions are :class:`~jfed.models.layers.Conv2D` (one matrix product, fast inside jfed's
compiled loops on CPU), pooling :func:`~jfed.models.layers.max_pool_2x2`.
"""

from __future__ import annotations

from dataclasses import dataclass

import flax.linen as nn
import jax

from jfed.models._flax import FlaxClassifier
from jfed.models.layers import Conv2D, dropout, max_pool_2x2, torch_bias_init


class _LeafCNN(nn.Module):
    side: int
    channels: int
    classes: int

    @nn.compact
    def __call__(self, x: jax.Array, key: jax.Array | None = None) -> jax.Array:
        del key  # no dropout in LEAF's CNN
        x = x.reshape(x.shape[0], self.side, self.side, self.channels)
        x = max_pool_2x2(nn.relu(Conv2D(32, (5, 5), "SAME", name="conv1")(x)))
        x = max_pool_2x2(nn.relu(Conv2D(64, (5, 5), "SAME", name="conv2")(x)))
        x = x.reshape(x.shape[0], -1)
        x = nn.relu(nn.Dense(2048, name="dense")(x))
        return nn.Dense(self.classes, name="output")(x)


@dataclass(frozen=True)
class FemnistCNN(FlaxClassifier):
    """LEAF's FEMNIST CNN (``models/femnist/cnn.py`` of TalwalkarLab/leaf): 5x5 convolutions of
    32 and 64 channels (``SAME``, ReLU), each followed by 2x2 max pooling, a dense layer of 2,048
    ReLU units and a linear layer to the classes. 6,603,710 parameters for 28x28x1 images and 62
    classes.

    Attributes:
      side: image height and width (28).
      channels: 1.
      classes: 62 (digits, upper- and lower-case letters) or 10 (digits only).
    """

    side: int = 28
    channels: int = 1
    classes: int = 62
    name: str = "femnist-cnn"

    @property
    def input_shape(self) -> tuple[int, ...]:  # type: ignore[override]
        return (self.side, self.side, self.channels)

    def module(self) -> nn.Module:
        return _LeafCNN(self.side, self.channels, self.classes)

    def parameter_count(self) -> int:
        pooled = (self.side // 2) // 2
        conv1 = 5 * 5 * self.channels * 32 + 32
        conv2 = 5 * 5 * 32 * 64 + 64
        dense = pooled * pooled * 64 * 2048 + 2048
        return conv1 + conv2 + dense + 2048 * self.classes + self.classes


class _PflCNN(nn.Module):
    side: int
    channels: int
    classes: int

    @nn.compact
    def __call__(self, x: jax.Array, key: jax.Array | None = None) -> jax.Array:
        x = x.reshape(x.shape[0], self.side, self.side, self.channels)
        glorot = nn.initializers.xavier_uniform()
        x = nn.relu(Conv2D(32, (3, 3), "VALID", glorot, torch_bias_init(9 * self.channels),
                           name="conv1")(x))  # fmt: skip
        x = nn.relu(Conv2D(64, (3, 3), "VALID", glorot, torch_bias_init(9 * 32),
                           name="conv2")(x))  # fmt: skip
        x = max_pool_2x2(x)
        keys = (None, None) if key is None else tuple(jax.random.split(key))
        x = dropout(x, 0.25, keys[0]).reshape(x.shape[0], -1)
        x = nn.relu(nn.Dense(128, kernel_init=glorot, bias_init=torch_bias_init(x.shape[-1]),
                             name="dense")(x))  # fmt: skip
        x = dropout(x, 0.5, keys[1])
        return nn.Dense(self.classes, kernel_init=glorot, bias_init=torch_bias_init(128),
                        name="output")(x)  # fmt: skip


@dataclass(frozen=True)
class CifarCNN(FlaxClassifier):
    """pfl-research's CIFAR-10 CNN (``simple_cnn`` of ``benchmarks/model/pytorch/cnn.py`` in
    apple/pfl-research): 3x3 convolutions of 32 then 64 channels (``VALID``, ReLU), 2x2 max
    pooling, dropout 0.25, a dense layer of 128 ReLU units, dropout 0.5, a linear layer to the
    classes. Weights Glorot-uniform and biases ``U(+-1/sqrt(fan_in))``, as pfl's PyTorch model
    initialises them. 1,626,442 parameters for 32x32x3 images and 10 classes.

    Dropout runs when ``loss`` is given a key; ``correct`` never drops.

    Attributes:
      side: image height and width (32).
      channels: 3.
      classes: 10 (CIFAR-10) or 100.
    """

    side: int = 32
    channels: int = 3
    classes: int = 10
    name: str = "cifar-cnn"

    @property
    def input_shape(self) -> tuple[int, ...]:  # type: ignore[override]
        return (self.side, self.side, self.channels)

    def module(self) -> nn.Module:
        return _PflCNN(self.side, self.channels, self.classes)

    def parameter_count(self) -> int:
        pooled = (self.side - 4) // 2
        conv1 = 3 * 3 * self.channels * 32 + 32
        conv2 = 3 * 3 * 32 * 64 + 64
        dense = pooled * pooled * 64 * 128 + 128
        return conv1 + conv2 + dense + 128 * self.classes + self.classes
