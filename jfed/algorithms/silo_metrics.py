"""Host-side float64 metrics of the silo experiments (seed appendix I).

- the constrained optimum ``w* = argmin_{||w|| <= B} F(w)`` on pooled data (accelerated projected
  gradient descent, run to a gradient-mapping tolerance), and excess risk ``F(w) - F(w*)``;
- heterogeneity ``upsilon_*^2 = (1/N) sum_i ||grad F_i(w*)||^2``;
- test error (classification) and relative RMSE ``sqrt(MSE / NMSE)`` (regression), where NMSE is
  the test MSE of predicting the mean training label.
"""

from __future__ import annotations

import numpy as np

from jfed.algorithms.losses import Loss


def loss_and_gradient(
    name: str, classes: int, w: np.ndarray, X: np.ndarray, y: np.ndarray
) -> tuple[float, np.ndarray]:
    """Average loss and its gradient over ``(X: f64[m, d], y: f64[m])`` at ``w: f64[p]`` (the
    loss ``name`` of :data:`jfed.algorithms.losses.LOSSES`)."""
    return Loss(name, classes).host_value_and_gradient(w, X, y)


def _project(w: np.ndarray, radius: float) -> np.ndarray:
    norm = np.linalg.norm(w)
    return w if norm <= radius else w * (radius / norm)


def fit_optimum(
    name: str,
    classes: int,
    X: np.ndarray,
    y: np.ndarray,
    radius: float,
    iterations: int = 5000,
    tolerance: float = 1e-10,
) -> np.ndarray:
    """``argmin_{||w|| <= radius}`` of the average loss (FISTA with the exact smoothness bound)."""
    loss = Loss(name, classes)
    smoothness = loss.curvature * np.linalg.eigvalsh(X.T @ X / X.shape[0])[-1]
    step = 1.0 / max(smoothness, 1e-12)
    w = np.zeros(loss.param_dim(X.shape[1]))
    v, t = w.copy(), 1.0
    for _ in range(iterations):
        _, gradient = loss.host_value_and_gradient(v, X, y)
        w_next = _project(v - step * gradient, radius)
        t_next = (1 + np.sqrt(1 + 4 * t * t)) / 2
        v = w_next + (t - 1) / t_next * (w_next - w)
        if np.linalg.norm(w_next - w) <= tolerance * max(1.0, float(np.linalg.norm(w))):
            return w_next
        w, t = w_next, t_next
    return w


def excess_risk(
    name: str, classes: int, w: np.ndarray, w_star: np.ndarray, X: np.ndarray, y: np.ndarray
) -> float:
    """``F(w) - F(w*)`` on ``(X, y)``."""
    return (
        loss_and_gradient(name, classes, w, X, y)[0]
        - loss_and_gradient(name, classes, w_star, X, y)[0]
    )


def heterogeneity(
    name: str, classes: int, w_star: np.ndarray, silos: list[tuple[np.ndarray, np.ndarray]]
) -> float:
    """``upsilon_*^2 = (1/N) sum_i ||grad F_i(w*)||^2``."""
    norms = [
        np.linalg.norm(loss_and_gradient(name, classes, w_star, X, y)[1]) ** 2 for X, y in silos
    ]
    return float(np.mean(norms))


def test_error(name: str, classes: int, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    """Misclassification rate (logistic: sign of x^T w; softmax: argmax)."""
    return float(np.mean(Loss(name, classes).host_predict(w, X) != y))


def relative_rmse(w: np.ndarray, X: np.ndarray, y: np.ndarray, train_mean: float) -> float:
    """``sqrt(MSE / NMSE)``: 1 means no better than predicting the mean training label."""
    mse = float(np.mean((X @ w - y) ** 2))
    nmse = float(np.mean((y - train_mean) ** 2))
    return float(np.sqrt(mse / nmse))
