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

Three rules give their result a shape of its own (``shape``): a view reads its operand in row-major order
as the result's shape (an MoE layer's ``Xr[M, I, E, D] = View(Xk[B, T, J, D])`` deals each token's k
copies to the experts in turn: balanced routing, each expert receiving ``M x I`` tokens); a router's
``TopK`` is the softmax over its dimension, then each row's k largest (k the result's size there) in
descending order, its gradient softmax's Jacobian restricted to those k; a dispatch copies its first
operand along the new dimension (its second operand, the router's choice, only steers), its gradient the
sum over that dimension.
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


def _top(x, axis, k):
    """The softmax of ``x`` over ``axis`` and the positions of each row's ``k`` largest, largest first."""
    p = _softmax(x, axis)
    return p, np.take(np.argsort(-p, axis=axis, kind="stable"), np.arange(k), axis=axis)


def forward(kind: str, operands: list, axis: int | None = None, shape: tuple | None = None) -> np.ndarray:
    """The result of elementwise work ``kind`` on ``operands`` (reducing over ``axis`` where it does; ``shape``:
    the result's, where it is not the operand's: a view's, a top-k's, a dispatch's, ``axis`` then the
    position of the dimension it adds)."""
    x = operands[0]
    if kind == "TopK":
        assert axis is not None                  # a top-k works over a dimension
        p, idx = _top(x, axis, shape[axis] if shape is not None else 1)
        return np.take_along_axis(p, idx, axis=axis)
    if kind == "Dispatch":
        assert axis is not None and shape is not None      # a dispatch adds a dimension: the result's shape
        return np.broadcast_to(np.expand_dims(x, axis), shape).copy()
    if kind == "View" and shape is not None:
        return _reshaped(x, shape)
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


def _reshaped(x: np.ndarray, shape: tuple) -> np.ndarray:
    if int(np.prod(shape)) != x.size:
        raise ValueError(f"a view cannot read {x.size} elements as shape {tuple(shape)}")
    return x.reshape(shape).copy()


def backward(kind: str, dres: np.ndarray, saved: list, which: int, axis: int | None = None,
             shape: tuple | None = None) -> np.ndarray:
    """The gradient of operand ``which`` given the result's gradient ``dres`` and what the rule saves
    (its inputs, its output, or dropout's mask; see :meth:`~symcost.elementwise.Elementwise.saved`);
    ``shape``: the operand's, where a view's result has another (a dispatch's ``axis``: the dimension it
    added, in ``dres``)."""
    if kind == "TopK":
        assert axis is not None
        p, idx = _top(saved[0], axis, dres.shape[axis])
        g = np.take_along_axis(p, idx, axis=axis)
        chosen = np.zeros_like(p)
        np.put_along_axis(chosen, idx, dres, axis=axis)
        return p * (chosen - (dres * g).sum(axis=axis, keepdims=True))
    if kind == "Dispatch":
        return dres.sum(axis=axis)
    if kind == "View" and shape is not None:
        return _reshaped(dres, shape)
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
        assert axis is not None                  # the dimension of the classes, summed over
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
