"""The per-client draws: distribution (KS tests with negative controls) and independence."""

import jax
import numpy as np
from scipy import stats

from jfed._random import normals_and_uniforms, random_words

# A KS test at level 1e-4 on fixed seeds: a correct generator passes, while a 3% error in scale or a
# 0.02 shift in location (the negative controls below) gives a p-value far below 1e-4 at this size.
LEVEL = 1e-4
SIZE = 200_000


def _draws():
    normals, uniforms = normals_and_uniforms(jax.random.key(0), SIZE, SIZE)
    return np.asarray(normals, np.float64), np.asarray(uniforms, np.float64)


def test_normals_are_standard_normal():
    normals, _ = _draws()
    assert stats.kstest(normals, "norm").pvalue > LEVEL
    assert stats.kstest(1.03 * normals, "norm").pvalue < LEVEL  # negative control: scale
    assert stats.kstest(normals + 0.02, "norm").pvalue < LEVEL  # negative control: shift


def test_uniforms_are_uniform_and_independent_of_normals():
    normals, uniforms = _draws()
    assert uniforms.min() >= 0.0 and uniforms.max() < 1.0
    assert stats.kstest(uniforms, "uniform").pvalue > LEVEL
    assert stats.kstest(uniforms**1.03, "uniform").pvalue < LEVEL  # negative control
    # correlation of independent samples has standard error 1 / sqrt(n)
    assert abs(np.corrcoef(normals, uniforms)[0, 1]) < 4.5 / np.sqrt(SIZE)
    assert abs(np.corrcoef(normals[:-1], normals[1:])[0, 1]) < 4.5 / np.sqrt(SIZE)


def test_words_are_a_deterministic_function_of_the_key():
    a = random_words(jax.random.key(3), 9)
    assert np.array_equal(a, random_words(jax.random.key(3), 9))
    assert not np.array_equal(a, random_words(jax.random.key(4), 9))
    rbg = random_words(jax.random.key(3, impl="rbg"), 9)
    assert rbg.shape == (9,) and rbg.dtype == np.uint32


def test_clients_draw_independently():
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(np.arange(50_000))
    normals, _ = jax.vmap(lambda k: normals_and_uniforms(k, 2, 0))(keys)
    normals = np.asarray(normals, np.float64)
    assert abs(np.corrcoef(normals[:-1, 0], normals[1:, 0])[0, 1]) < 4.5 / np.sqrt(50_000)
    assert abs(np.corrcoef(normals[:, 0], normals[:, 1])[0, 1]) < 4.5 / np.sqrt(50_000)
