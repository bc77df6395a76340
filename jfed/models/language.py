"""Language models of the federated benchmarks: the character LSTM of McMahan et al. 2017 (and
LEAF) and pfl-research's small Transformer language model (StackOverflow size).

Records are token ids: ``X: i32[T]``. Targets are either one next token per record (``y:
i32[]``, LEAF's Shakespeare: an 80-character window and the character after it) or one per
position (``y: i32[T]``, the next token after each input position; targets equal to
``pad_label`` are not scored). The model reads the target's rank: one label per row is scored
from the last position's output only, as LEAF's model does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jfed.models._flax import FlaxClassifier
from jfed.models.layers import dropout


class _CharLSTM(nn.Module):
    vocabulary: int
    embedding: int
    hidden: int
    layers: int

    @nn.compact
    def __call__(self, x: jax.Array, key: jax.Array | None = None) -> jax.Array:
        del key  # no dropout
        h = nn.Embed(self.vocabulary, self.embedding, name="embedding")(x)
        for i in range(self.layers):
            h = nn.RNN(nn.OptimizedLSTMCell(self.hidden, name=f"lstm{i}"))(h)
        return nn.Dense(self.vocabulary, name="output")(h)  # [b, T, vocabulary]


@dataclass(frozen=True)
class CharLSTM(FlaxClassifier):
    """A stacked character LSTM: an embedding of ``embedding`` dimensions, ``layers`` LSTM
    layers of ``hidden`` units, a softmax over the vocabulary (McMahan et al. 2017: 8, 2 x 256;
    LEAF's ``models/shakespeare/stacked_lstm.py`` is the same network). On ``V`` tokens it has
    ``796,672 + 265 V`` parameters: 817,872 on LEAF's 80 characters alone, 818,667 on jfed's
    Shakespeare tokens (83: LEAF's 80 and other, begin, padding), 820,257 on TFF's 86 characters
    (89). McMahan et al. report 866,578 without giving their vocabulary or cell; no ``V`` gives
    it here (docs/reference/models.md says what does).

    ``X: i32[b, T]``; ``y: i32[b]`` scores the prediction after the last character (LEAF), ``y:
    i32[b, T]`` the prediction after every character (McMahan et al.: "after reading each
    character in a line, predicts the next character"), positions whose target is
    ``pad_label`` left out.

    Attributes:
      vocabulary: the number of distinct tokens (inputs and outputs).
      sequence: T, the unroll length (80).
      embedding: 8.
      hidden: 256.
      layers: 2.
      pad_label: the padding token of sequence targets (None: every position is scored).
    """

    vocabulary: int = 80
    sequence: int = 80
    embedding: int = 8
    hidden: int = 256
    layers: int = 2
    pad_label: int | None = None
    name: str = "char-lstm"

    input_dtype = jnp.int32

    @property
    def input_shape(self) -> tuple[int, ...]:  # type: ignore[override]
        return (self.sequence,)

    def module(self) -> nn.Module:
        return _CharLSTM(self.vocabulary, self.embedding, self.hidden, self.layers)

    def parameter_count(self) -> int:
        lstm, width = 0, self.embedding
        for _ in range(self.layers):
            lstm += 4 * (width * self.hidden + self.hidden * self.hidden + self.hidden)
            width = self.hidden
        embedding = self.vocabulary * self.embedding
        return embedding + lstm + self.hidden * self.vocabulary + self.vocabulary


def sinusoidal_positions(length: int, width: int) -> np.ndarray:
    """``f32[length, width]``: the Transformer's sinusoidal position encoding (sines in the even
    columns, cosines in the odd), as pfl-research's ``positional_encoding``."""
    position = np.arange(length)[:, None]
    rate = np.exp(np.arange(0, width, 2) * (-math.log(10000.0) / width))
    table = np.zeros((length, width), np.float32)
    table[:, 0::2] = np.sin(position * rate)
    table[:, 1::2] = np.cos(position * rate)
    return table


def _uniform(bound: float):
    """``U(-bound, bound)`` (pfl's embedding initialiser)."""

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


class _EncoderLayer(nn.Module):
    """PyTorch's ``nn.TransformerEncoderLayer`` (post-norm, ReLU), causal self-attention."""

    width: int
    heads: int
    feedforward: int
    dropout_rate: float

    @nn.compact
    def __call__(self, x: jax.Array, key: jax.Array | None) -> jax.Array:
        keys = [None] * 3 if key is None else list(jax.random.split(key, 3))
        causal = nn.make_causal_mask(jnp.ones(x.shape[:-1], jnp.int32))
        attended = nn.MultiHeadDotProductAttention(self.heads, name="attention")(x, x, mask=causal)
        x = nn.LayerNorm(epsilon=1e-5, name="norm1")(x + dropout(attended, self.dropout_rate,
                                                                 keys[0]))  # fmt: skip
        h = nn.relu(nn.Dense(self.feedforward, name="linear1")(x))
        h = nn.Dense(self.width, name="linear2")(dropout(h, self.dropout_rate, keys[1]))
        return nn.LayerNorm(epsilon=1e-5, name="norm2")(x + dropout(h, self.dropout_rate, keys[2]))


class _TransformerLM(nn.Module):
    vocabulary: int
    sequence: int
    width: int
    heads: int
    feedforward: int
    layers: int
    dropout_rate: float

    @nn.compact
    def __call__(self, x: jax.Array, key: jax.Array | None = None) -> jax.Array:
        embed = nn.Embed(self.vocabulary, self.width, embedding_init=_uniform(0.05),
                         name="embedding")  # fmt: skip
        positions = jnp.asarray(sinusoidal_positions(self.sequence, self.width))
        h = embed(x) * math.sqrt(self.width) + positions[: x.shape[-1]]
        for i in range(self.layers):
            layer_key = None if key is None else jax.random.fold_in(key, i)
            h = _EncoderLayer(self.width, self.heads, self.feedforward, self.dropout_rate,
                              name=f"layer{i}")(h, layer_key)  # fmt: skip
        return embed.attend(h)  # tied input and output embeddings


@dataclass(frozen=True)
class TransformerLM(FlaxClassifier):
    """pfl-research's Transformer language model (``benchmarks/model/pytorch/transformer.py``,
    after Wang et al. 2021's StackOverflow model), its StackOverflow configuration by default:
    embeddings of 96 tied between input and output, sinusoidal positions, 3 post-norm encoder
    layers (8 heads, feed-forward 1,536, ReLU, dropout 0.1) with a causal mask, on a vocabulary
    of 10,004 (10,000 words, padding, unknown, begin, end) and sentences of 20 tokens: 1,962,912
    parameters, as PyTorch counts pfl's model.

    ``X: i32[b, T]`` tokens, ``y: i32[b, T]`` the next token at each position; targets equal to
    ``pad_label`` (0, pfl's padding) are not scored. Dropout runs when ``loss`` is given a key.
    """

    vocabulary: int = 10_004
    sequence: int = 20
    width: int = 96
    heads: int = 8
    feedforward: int = 1_536
    layers: int = 3
    dropout_rate: float = 0.1
    pad_label: int | None = 0
    name: str = "transformer-lm"

    input_dtype = jnp.int32

    @property
    def input_shape(self) -> tuple[int, ...]:  # type: ignore[override]
        return (self.sequence,)

    def module(self) -> nn.Module:
        return _TransformerLM(self.vocabulary, self.sequence, self.width, self.heads,
                              self.feedforward, self.layers, self.dropout_rate)  # fmt: skip

    def parameter_count(self) -> int:
        w, f = self.width, self.feedforward
        attention = 4 * (w * w + w)  # query, key, value and output projections
        layer = attention + (w * f + f) + (f * w + w) + 2 * 2 * w  # + two LayerNorms
        return self.vocabulary * w + self.layers * layer
