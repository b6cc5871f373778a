"""What each elementwise rule computes, in NumPy, and the gradient of each operand: the meaning the simulator
gives to an :class:`~symcost.elementwise.Elementwise` step, on one device's blocks or on whole arrays.

    >>> import numpy as np
    >>> x = np.array([[1.0, 2.0, 3.0]])
    >>> np.round(forward("Softmax", [x], axis=1), 3)
    array([[0.09 , 0.245, 0.665]])

Arrays carry their layout's dimensions in order; ``axis`` is the position of the rule's dimension (a
norm's, softmax's, cross-entropy's). Two rules stand in for what cannot be written without data the
notation does not carry: dropout keeps every element (its mask is all ones: the mask is random, so a
sharded run and the whole-array run could only agree on it by sharing a seed per element), and rotary
embedding is the identity (its rotation needs each element's global position). Both stay linear, as the
planner assumes, so partial sums may pass through them. Cross-entropy is ``logsumexp`` over the vocabulary
(the loss without its label term, which the notation does not name). The gradients are checked against
finite differences in the tests.
"""
from __future__ import annotations

import numpy as np

EPS = 1e-6

__all__ = ["forward", "backward", "EPS"]


def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def _gelu_grad(x):
    c = 0.7978845608028654
    u = c * (x + 0.044715 * x ** 3)
    t = np.tanh(u)
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * x * x)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def forward(kind: str, operands: list, axis: int | None = None) -> np.ndarray:
    """The result of elementwise work ``kind`` on ``operands`` (reducing over ``axis`` where it does)."""
    x = operands[0]
    if kind == "LayerNorm":
        c = x - x.mean(axis=axis, keepdims=True)
        return c / np.sqrt((c * c).mean(axis=axis, keepdims=True) + EPS)
    if kind == "RMSNorm":
        return x / np.sqrt((x * x).mean(axis=axis, keepdims=True) + EPS)
    if kind == "Softmax":
        return _softmax(x, axis)
    if kind == "CrossEntropy":
        m = x.max(axis=axis, keepdims=True)
        return np.squeeze(m, axis) + np.log(np.exp(x - m).sum(axis=axis))
    if kind == "GeLU":
        return _gelu(x)
    if kind == "SiLU":
        return x * _sigmoid(x)
    if kind == "ReLU":
        return np.maximum(x, 0.0)
    if kind == "Mul":
        return x * operands[1]
    if kind == "Add":
        return x + operands[1]
    if kind in ("Dropout", "Rotary", "View"):
        return x.copy()
    raise ValueError(f"no NumPy meaning for elementwise work {kind!r}")


def backward(kind: str, dres: np.ndarray, saved: list, which: int, axis: int | None = None) -> np.ndarray:
    """The gradient of operand ``which`` given the result's gradient ``dres`` and what the rule saves
    (its inputs, its output, or dropout's mask; see :meth:`~symcost.elementwise.Elementwise.saved`)."""
    if kind == "LayerNorm":
        x = saved[0]
        c = x - x.mean(axis=axis, keepdims=True)
        r = 1.0 / np.sqrt((c * c).mean(axis=axis, keepdims=True) + EPS)
        y = c * r
        return r * (dres - dres.mean(axis=axis, keepdims=True) - y * (dres * y).mean(axis=axis, keepdims=True))
    if kind == "RMSNorm":
        x = saved[0]
        r = 1.0 / np.sqrt((x * x).mean(axis=axis, keepdims=True) + EPS)
        return r * dres - x * r ** 3 * (dres * x).mean(axis=axis, keepdims=True)
    if kind == "Softmax":
        y = saved[0]
        return y * (dres - (dres * y).sum(axis=axis, keepdims=True))
    if kind == "CrossEntropy":
        return np.expand_dims(dres, axis) * _softmax(saved[0], axis)
    if kind == "GeLU":
        return dres * _gelu_grad(saved[0])
    if kind == "SiLU":
        s = _sigmoid(saved[0])
        return dres * (s + saved[0] * s * (1.0 - s))
    if kind == "ReLU":
        return dres * (saved[0] > 0)
    if kind == "Mul":
        return dres * saved[1 - which]
    if kind == "Dropout":
        return dres * saved[0] if saved else dres.copy()
    if kind in ("Add", "Rotary", "View"):
        return dres.copy()
    raise ValueError(f"no NumPy gradient for elementwise work {kind!r}")
