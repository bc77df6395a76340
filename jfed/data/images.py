"""Image classification clients for LDP-FL: scikit-learn's digits split across clients, and a
procedural MNIST-shaped set generated on the device from keys (to time the seed's scale offline).

Both return a :class:`jfed.data.silos.SiloTask` whose "silos" are the clients, each holding the
same number of images (flattened, ``f32[side^2]``, scaled to [0, 1]); the test split is pooled.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jfed.catalog import IMAGE_DATASETS
from jfed.catalog import IMAGE_SPLITS as SPLITS
from jfed.data.silos import SiloData, SiloTask

DIGITS_TEST_FRACTION = 0.2


def _split(
    X: np.ndarray, y: np.ndarray, n_clients: int, split: str, rng: np.random.Generator
) -> SiloData:
    """Equal shares of ``(X, y)`` for ``n_clients`` clients: shuffled (``iid``), or sorted by
    label and cut into contiguous shares, so a client sees one or two classes (``by-label``, the
    seed's non-iid split). A remainder smaller than ``n_clients`` is left out."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    per_client = len(y) // n_clients
    if per_client < 1:
        raise ValueError(
            f"expected --clients in [1, {len(y)}] (the training images), got --clients={n_clients}"
        )
    order = rng.permutation(len(y))
    if split == "by-label":
        order = order[np.argsort(y[order], kind="stable")]
    order = order[: per_client * n_clients].reshape(n_clients, per_client)
    return SiloData(
        jnp.asarray(X[order], jnp.float32),
        jnp.asarray(y[order], jnp.float32),
        jnp.full((n_clients,), per_client, jnp.int32),
    )


def digits_clients(n_clients: int = 100, split: str = "iid", seed: int = 0) -> SiloTask:
    """scikit-learn's 8x8 digits (1,797 images, 10 classes): 20% held out for testing, the rest
    shared equally among ``n_clients`` clients."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    X, y = digits.data.astype(np.float64) / 16.0, digits.target.astype(int)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    test = order[: int(DIGITS_TEST_FRACTION * len(y))]
    train = order[len(test) :]
    return SiloTask(
        "digits", "softmax", 10, _split(X[train], y[train], n_clients, split, rng),
        (X[test], y[test].astype(np.float64)),
        f"scikit-learn digits, 8x8, {split} across {n_clients} clients",
        {"side": 8},
    )  # fmt: skip


def procedural_images(
    key: jax.Array, n_images: int = 60_000, side: int = 28, classes: int = 10
) -> tuple[jax.Array, jax.Array]:
    """``n_images`` procedural images ``f32[n, side^2]`` in [0, 1] and labels ``i32[n]``, generated
    on the device: each class is a fixed smooth pattern (a few random Gaussian blobs), each image
    its class pattern, shifted by up to two pixels, plus pixel noise."""
    pattern_key, label_key, shift_key, noise_key = jax.random.split(key, 4)
    grid = jnp.arange(side, dtype=jnp.float32)
    yy, xx = jnp.meshgrid(grid, grid, indexing="ij")
    centers = jax.random.uniform(pattern_key, (classes, 4, 2), minval=6.0, maxval=side - 6.0)
    blobs = jnp.exp(
        -((yy - centers[..., 0, None, None]) ** 2 + (xx - centers[..., 1, None, None]) ** 2) / 8.0
    )
    patterns = blobs.sum(axis=1)
    patterns = patterns / patterns.max(axis=(1, 2), keepdims=True)
    labels = jax.random.randint(label_key, (n_images,), 0, classes)
    shifts = jax.random.randint(shift_key, (n_images, 2), -2, 3)

    def image(label, shift):
        return jnp.roll(patterns[label], shift, axis=(0, 1))

    images = jax.vmap(image)(labels, shifts)
    images = jnp.clip(images + 0.3 * jax.random.normal(noise_key, images.shape), 0.0, 1.0)
    return images.reshape(n_images, side * side), labels


def procedural_clients(
    n_clients: int = 100, split: str = "iid", seed: int = 0, n_images: int = 60_000
) -> SiloTask:
    """The MNIST-shaped procedural set (28x28, 10 classes, ``n_images`` training images and 10,000
    test images) shared equally among ``n_clients`` clients."""
    images, labels = procedural_images(jax.random.key(seed), n_images + 10_000)
    X, y = np.asarray(images), np.asarray(labels)
    rng = np.random.default_rng(seed)
    return SiloTask(
        "procedural-mnist", "softmax", 10,
        _split(X[:n_images], y[:n_images], n_clients, split, rng),
        (X[n_images:].astype(np.float64), y[n_images:].astype(np.float64)),
        f"procedural 28x28 images, {split} across {n_clients} clients",
        {"side": 28},
    )  # fmt: skip


def load_images(name: str, n_clients: int, split: str = "iid", seed: int = 0) -> SiloTask:
    """An image task by name (one of :data:`IMAGE_DATASETS`)."""
    if name == "digits":
        return digits_clients(n_clients, split, seed)
    if name == "procedural-mnist":
        return procedural_clients(n_clients, split, seed)
    raise ValueError(f"unknown image data set {name!r}; expected one of {list(IMAGE_DATASETS)}")
