"""The Laplace mechanism: ``b = Delta_1 / eps`` gives pure eps-DP (Dwork and Roth 2014, Thm 3.6)."""

from __future__ import annotations

from jfed._validation import check_nonnegative, check_positive


def laplace_scale(l1_sensitivity: float, epsilon: float) -> float:
    """Scale ``b`` of the Laplace noise for eps-DP of a query with L1 sensitivity ``Delta_1``."""
    return check_nonnegative("l1_sensitivity", l1_sensitivity) / check_positive("epsilon", epsilon)


def laplace_epsilon(l1_sensitivity: float, scale: float) -> float:
    """The pure eps of Laplace noise of scale ``b``: ``Delta_1 / b``."""
    return check_nonnegative("l1_sensitivity", l1_sensitivity) / check_positive("scale", scale)
