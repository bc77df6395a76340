"""Algorithms: one module per method family, each an ``init`` + ``round`` pair.

- :mod:`jfed.algorithms.modulated`: modulated single-sample regression (iterative, one-shot).
- :mod:`jfed.algorithms.dpsgd`: DP-SGD FedAvg with one sample per client.
- :mod:`jfed.algorithms.ols`: non-private least squares (the reference).
"""

from jfed.algorithms import dpsgd, linear, modulated, ols

__all__ = ["dpsgd", "linear", "modulated", "ols"]
