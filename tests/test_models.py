"""jfed.models: parameter counts against the papers' and pfl-research's numbers, the layers against
flax's own, masking and causality as exact relations, and DP-FedAvg's models reproduced."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jfed.data.shakespeare import VOCABULARIES
from jfed.models import (
    MODELS,
    CharLSTM,
    CifarCNN,
    DenseClassifier,
    FemnistCNN,
    Model,
    TransformerLM,
    tree_size,
)
from jfed.models.layers import Conv2D, max_pool_2x2

KEY = jax.random.key(0)

# published (or counted) sizes: LEAF's FEMNIST CNN (models/femnist/cnn.py, counted by hand: convs
# 832 + 51,264, dense 6,424,576, output 127,038); pfl-research's simple_cnn and LMTransformer as
# PyTorch 2.13 counts them (sum of numel over parameters, StackOverflow vocabulary 10,004); LEAF's
# stacked LSTM (TF BasicLSTMCell, one bias per gate) on its 80 letters
PUBLISHED = [
    (FemnistCNN(), 6_603_710),
    (CifarCNN(), 1_626_442),
    (TransformerLM(), 1_962_912),
    (CharLSTM(vocabulary=80), 817_872),
    (DenseClassifier(64, 10, 0), 650),
    (DenseClassifier(64, 10, 32), 2_410),
]


@pytest.mark.parametrize("model, count", PUBLISHED, ids=lambda v: getattr(v, "name", str(v)))
def test_parameter_counts_match_the_published_models(model, count):
    assert isinstance(model, Model)
    assert model.parameter_count() == count
    shapes = jax.eval_shape(model.init, KEY)  # what init builds, without computing it
    assert tree_size(shapes) == count


def test_a_wrong_architecture_changes_the_count():
    # negative control: one LSTM layer, or CIFAR-100's output layer, is another model
    assert tree_size(jax.eval_shape(CharLSTM(layers=1).init, KEY)) != 817_872
    assert CifarCNN(classes=100).parameter_count() != 1_626_442


@pytest.mark.parametrize("vocabulary, count", [("leaf", 818_667), ("tff", 820_257)])
def test_char_lstm_counts_on_each_shakespeare_vocabulary(vocabulary, count):
    # docs/reference/models.md: 83 tokens (LEAF's 80 characters, other, begin, padding), 89
    # (TFF's 86 and the same three); 818,402 is 82 tokens, one short
    model = CharLSTM(vocabulary=VOCABULARIES[vocabulary].size)
    assert model.parameter_count() == count
    assert tree_size(jax.eval_shape(model.init, KEY)) == count
    assert CharLSTM(vocabulary=82).parameter_count() == 818_402 != count


PEEPHOLES = 2 * 3 * 256
"""TensorFlow's ``LSTMCell(use_peepholes=True)``: three diagonal weights of 256 in each layer."""


def test_mcmahans_866578_is_a_peephole_lstm_on_258_tokens():
    # docs/reference/models.md: the paper's count is this network with peepholes on 258 tokens
    # (every byte and two more); without peepholes no vocabulary gives it
    built = tree_size(jax.eval_shape(CharLSTM(vocabulary=258).init, KEY))
    assert built + PEEPHOLES == 866_578
    assert all(CharLSTM(vocabulary=v).parameter_count() != 866_578 for v in range(1, 1024))
    assert all(CharLSTM(vocabulary=v).parameter_count() + PEEPHOLES != 866_578
               for v in (80, 83, 86, 89, 256))  # fmt: skip


def test_every_model_is_a_static_jit_argument():
    for name, cls in MODELS.items():
        model = cls(64, 10, 32 if name == "mlp" else 0) if cls is DenseClassifier else cls()
        assert hash(model) == hash(type(model)(**model.__dict__))
    calls = []

    def loss(model, params, X, y, w):
        calls.append(1)
        return model.loss(params, X, y, w)

    jitted = jax.jit(loss, static_argnums=0)
    model = DenseClassifier(3, 2)
    params = model.init(KEY)
    X, y, w = jnp.ones((4, 3)), jnp.zeros(4, jnp.int32), jnp.ones(4)
    jitted(model, params, X, y, w)
    jitted(DenseClassifier(3, 2), params, X, y, w)  # an equal model: no new trace
    assert len(calls) == 1


def test_dense_classifier_reproduces_dp_fedavg_models():
    # the parameters and loss of jfed.algorithms.dp_fedavg's own functions, computed with them
    # at this key: logistic regression starts at zero; the hidden layer is Glorot-uniform
    model = DenseClassifier(5, 3, 4)
    params = model.init(KEY)
    assert set(params) == {"hidden", "output"}
    limit = np.sqrt(6.0 / 9.0)
    expected = jax.random.uniform(jax.random.fold_in(KEY, 0), (5, 4), jnp.float32, -limit, limit)
    np.testing.assert_array_equal(params["hidden"]["w"], expected)
    assert not np.any(np.asarray(DenseClassifier(5, 3).init(KEY)["output"]["w"]))
    from jfed.algorithms import dp_fedavg

    if hasattr(dp_fedavg, "init_params"):  # the original functions, while they exist
        reference = dp_fedavg.init_params(KEY, 5, 3, 4)
        jax.tree.map(np.testing.assert_array_equal, params, reference)
        X = jax.random.normal(KEY, (6, 5))
        y = jnp.array([0, 1, 2, 0, 1, 2], jnp.float32)
        w = jnp.array([1, 1, 1, 1, 0, 0], jnp.float32)
        assert model.loss(params, X, y, w) == dp_fedavg.masked_cross_entropy(params, X, y, w)
        assert jnp.mean(model.correct(params, X, y)) == dp_fedavg.accuracy(params, X, y)


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_conv2d_equals_flax_conv(padding):
    x = jax.random.normal(KEY, (2, 9, 9, 3))
    conv = Conv2D(5, (3, 3), padding)
    params = conv.init(KEY, x)
    reference = nn.Conv(5, (3, 3), padding=padding).apply(params, x)
    np.testing.assert_allclose(conv.apply(params, x), reference, rtol=1e-5, atol=1e-5)


def test_max_pool_and_its_gradient_equal_flax():
    x = jax.random.normal(KEY, (2, 7, 6, 3))
    pool = lambda v: nn.max_pool(v, (2, 2), (2, 2))  # noqa: E731
    np.testing.assert_array_equal(max_pool_2x2(x), pool(x))
    weights = jax.random.normal(jax.random.key(1), pool(x).shape)
    ours = jax.grad(lambda v: jnp.sum(weights * max_pool_2x2(v)))(x)
    np.testing.assert_array_equal(ours, jax.grad(lambda v: jnp.sum(weights * pool(v)))(x))


@pytest.fixture(scope="module")
def small_cnn():
    """``(model, params)``: a CIFAR CNN on 8x8 images, 3 classes (one init for the tests)."""
    model = CifarCNN(side=8, classes=3)
    return model, model.init(KEY)


def test_rows_of_weight_zero_do_not_change_the_loss(small_cnn):
    model, params = small_cnn
    X = jax.random.normal(KEY, (5, 8, 8, 3))
    y = jnp.array([0, 1, 2, 0, 1])
    w = jnp.array([1.0, 1.0, 1.0, 0.0, 0.0])
    garbage = X.at[3:].set(100.0)
    loss = jax.jit(model.loss)
    real = loss(params, X, y, w)
    assert loss(params, garbage, y, w) == real
    # negative control: the same garbage rows with weight 1 move the loss
    assert abs(float(loss(params, garbage, y, jnp.ones(5))) - float(real)) > 1e-3
    assert float(loss(params, X, y, jnp.zeros(5))) == 0.0


def test_dropout_runs_only_with_a_key(small_cnn):
    model, params = small_cnn
    X, y, w = jax.random.normal(KEY, (4, 8, 8, 3)), jnp.array([0, 1, 2, 0]), jnp.ones(4)
    loss = jax.jit(model.loss)
    dropped = loss(params, X, y, w, jax.random.key(3))
    assert loss(params, X, y, w, jax.random.key(3)) == dropped  # a key's dropout is fixed
    assert loss(params, X, y, w, jax.random.key(4)) != dropped
    assert model.loss(params, X, y, w) != dropped


def test_the_transformer_is_causal():
    model = TransformerLM(vocabulary=50, sequence=6, width=16, heads=2, feedforward=32, layers=2)
    params = model.init(KEY)
    tokens = jax.random.randint(KEY, (1, 6), 1, 50)
    changed = tokens.at[0, 4:].set((tokens[0, 4:] + 7) % 50)
    logits = jax.jit(model.logits)
    before, after = logits(params, tokens), logits(params, changed)
    np.testing.assert_allclose(before[0, :4], after[0, :4], rtol=1e-5, atol=1e-6)
    assert not np.allclose(before[0, 4:], after[0, 4:], atol=1e-3)  # the later positions see it


def test_sequence_targets_leave_out_padding_and_one_label_scores_the_last_position():
    model = CharLSTM(vocabulary=12, sequence=5, hidden=8, layers=1, pad_label=11)
    params = model.init(KEY)
    X = jax.random.randint(KEY, (2, 5), 0, 11)
    correct, loss = jax.jit(model.correct), jax.jit(model.loss)
    predicted = jnp.argmax(jax.jit(model.logits)(params, X), axis=-1)
    # one label per row: scored after the last character
    np.testing.assert_array_equal(correct(params, X, predicted[:, -1]), [1.0, 1.0])
    # per position: two right, one wrong, two padding -> 2/3
    wrong = (predicted[0, 2] + 1) % 11
    y = jnp.stack([predicted[0].at[2].set(wrong).at[3:].set(11), predicted[1]])
    np.testing.assert_allclose(correct(params, X, y), [2.0 / 3.0, 1.0], rtol=1e-6)
    # the loss is optax's cross-entropy averaged over the 8 scored positions only
    per_position = optax.softmax_cross_entropy_with_integer_labels(
        jax.jit(model.logits)(params, X), y
    )
    scored = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    expected = float(jnp.sum(jnp.where(scored, per_position, 0.0)) / 8.0)
    np.testing.assert_allclose(loss(params, X, y, jnp.ones(2)), expected, rtol=1e-5)
    # the second row's weight 0 leaves the first row's 3 positions
    np.testing.assert_allclose(
        loss(params, X, y, jnp.array([1.0, 0.0])), float(per_position[0, :3].mean()), rtol=1e-5
    )


def test_a_model_vmaps_over_clients():
    model = CharLSTM(vocabulary=10, sequence=4, hidden=8, layers=1)
    params = model.init(KEY)
    X = jax.random.randint(KEY, (3, 2, 4), 0, 10)  # 3 clients, a minibatch of 2 each
    y = jax.random.randint(KEY, (3, 2), 0, 10)
    grads = jax.jit(jax.vmap(jax.grad(model.loss), in_axes=(None, 0, 0, None)))(
        params, X, y, jnp.ones(2)
    )
    one = jax.jit(jax.grad(model.loss))(params, X[1], y[1], jnp.ones(2))
    jax.tree.map(lambda g, o: np.testing.assert_allclose(g[1], o, rtol=1e-5, atol=1e-7), grads, one)
