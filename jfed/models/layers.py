"""Layers fast on XLA:CPU inside compiled loops (every jfed client trains inside a scan over
rounds and a scan over chunks of clients).

- :class:`Conv2D`: a stride-1 convolution (``SAME`` or ``VALID``) as ONE matrix product over
  shifted copies of the input (im2col by slicing), with ``nn.Conv``'s parameters. Inside a
  compiled loop XLA's CPU backend gives ``nn.Conv``'s kernel-gradient convolution a
  non-canonical layout that it runs far slower (measured for the LDP-FL CNN: 3 SGD steps of a
  28x28 CNN on one client took 0.39 s in a ``lax.scan`` with ``nn.Conv`` and 0.033 s as a
  matrix product; see :mod:`jfed.algorithms.ldp_fl`); vmapped over clients the products are
  batched products rather than grouped convolutions.
- :func:`max_pool_2x2`: 2x2 max pooling with stride 2 as a reshape and a max, whose gradient
  goes to the first maximum of each window without XLA's select-and-scatter.
"""

from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp


class Conv2D(nn.Module):
    """A stride-1 2-D convolution as one matrix product, equal to ``nn.Conv`` (same parameter
    names and shapes: ``kernel: f32[kh, kw, in, out]``, ``bias: f32[out]``) up to float32
    rounding.

    Input ``x: f32[..., height, width, in]``; output ``f32[..., height', width', out]`` with
    ``height' = height`` (``SAME``) or ``height - kh + 1`` (``VALID``).
    """

    features: int
    kernel_size: tuple[int, int]
    padding: str = "SAME"
    kernel_init: Callable = nn.initializers.lecun_normal()
    bias_init: Callable = nn.initializers.zeros_init()

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kh, kw = self.kernel_size
        channels = x.shape[-1]
        kernel = self.param("kernel", self.kernel_init, (kh, kw, channels, self.features))
        bias = self.param("bias", self.bias_init, (self.features,))
        if self.padding == "SAME":
            spatial = [((kh - 1) // 2, kh // 2), ((kw - 1) // 2, kw // 2), (0, 0)]
            x = jnp.pad(x, [(0, 0)] * (x.ndim - 3) + spatial)
        elif self.padding != "VALID":
            raise ValueError(f"expected padding 'SAME' or 'VALID', got padding={self.padding!r}")
        height, width = x.shape[-3] - kh + 1, x.shape[-2] - kw + 1
        patches = jnp.concatenate(
            [x[..., i : i + height, j : j + width, :] for i in range(kh) for j in range(kw)],
            axis=-1,
        )  # [..., height', width', kh * kw * in], ordered as the kernel's (i, j, channel)
        return patches @ kernel.reshape(kh * kw * channels, self.features) + bias


@jax.custom_vjp
def max_pool_2x2(x: jax.Array) -> jax.Array:
    """2x2 max pooling with stride 2, ``nn.max_pool(x, (2, 2), (2, 2))`` (odd edges dropped);
    its gradient goes to the first maximum of each window in row-major order, as
    ``nn.max_pool``'s select-and-scatter does. ``x: f32[..., height, width, c]``."""
    return _windows(x).max(axis=-2)


def _windows(x: jax.Array) -> jax.Array:
    """``f32[..., height // 2, width // 2, 4, c]``: each 2x2 window in row-major order."""
    *lead, height, width, channels = x.shape
    x = x[..., : height - height % 2, : width - width % 2, :]
    x = x.reshape(*lead, height // 2, 2, width // 2, 2, channels)
    x = jnp.moveaxis(x, -4, -3)  # [..., h/2, w/2, 2, 2, c]
    return x.reshape(*lead, height // 2, width // 2, 4, channels)


def _max_pool_forward(x: jax.Array):
    return max_pool_2x2(x), x


def _max_pool_backward(x: jax.Array, gradient: jax.Array):
    *lead, height, width, channels = x.shape
    first = jnp.argmax(_windows(x), axis=-2)  # ties: the first in the window
    spread = jax.nn.one_hot(first, 4, axis=-2, dtype=gradient.dtype) * gradient[..., None, :]
    spread = spread.reshape(*lead, height // 2, width // 2, 2, 2, channels)
    spread = jnp.moveaxis(spread, -3, -4).reshape(
        *lead, height - height % 2, width - width % 2, channels
    )
    pad = [(0, 0)] * len(lead) + [(0, height % 2), (0, width % 2), (0, 0)]
    return (jnp.pad(spread, pad),)


max_pool_2x2.defvjp(_max_pool_forward, _max_pool_backward)


def torch_bias_init(fan_in: int) -> Callable:
    """PyTorch's default bias initialiser of ``nn.Linear`` / ``nn.Conv2d``:
    ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``."""
    bound = fan_in**-0.5

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def dropout(x: jax.Array, rate: float, key: jax.Array | None) -> jax.Array:
    """Inverted dropout of rate ``rate`` (kept units scaled by ``1 / (1 - rate)``); the identity
    when ``key`` is None (evaluation, or training without dropout)."""
    if key is None or rate == 0.0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)
