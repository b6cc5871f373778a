"""Closed forms as numeric functions: NumPy functions built from the expression tree, and plain scalar ones.

    >>> import sympy as sp
    >>> B, W = sp.symbols("B W_ici")
    >>> names, f = numpy_function(sp.Max(2 * B / W, sp.Rational(1, 10)))
    >>> names, [float(y) for y in f(np.array([0.1, 1.0, 10.0]), 4.0)]
    (('B', 'W_ici'), [0.1, 0.5, 5.0])

A search prices hundreds of closed forms over hundreds of values of one symbol (the regimes over B); SymPy's
``lambdify`` prints each one to source and compiles it, which costs more than evaluating it. Here each node
(a number, a symbol, a sum, a product, a power, ``Max``/``Min``, ``ceiling``/``floor``) becomes a small
function of the arguments, so building one costs about as much as walking the tree once, and evaluating
it is the same NumPy operations ``lambdify`` would run. An expression with any other node is compiled by
``lambdify`` instead (same answers, slower to build).

Where a few expressions are evaluated millions of times at scalars (the run search's layer figures),
:func:`math_function` compiles them once with ``lambdify`` over the ``math`` module: slower to build,
faster to call.
"""
from __future__ import annotations

import operator
from functools import reduce

import numpy as np
import sympy as sp

from . import caching


@caching.memoize(maxsize=4096)
def numpy_function(expr):
    """``(names, f)``: ``f(*values)`` is ``expr`` with its symbols, sorted by name (``names``), bound to
    ``values`` (floats or NumPy arrays, broadcast together). Kept per expression."""
    expr = sp.sympify(expr)
    syms = tuple(sorted(expr.free_symbols, key=lambda s: s.name))
    index = {s: i for i, s in enumerate(syms)}
    try:
        node = _build(expr, index)
    except _Unsupported:
        fn = sp.lambdify(syms, expr, modules=[{"Max": _fold(np.maximum), "Min": _fold(np.minimum)}, "numpy"])
        return tuple(s.name for s in syms), fn
    return tuple(s.name for s in syms), lambda *args: node(args)


def over(expr, numbers: dict, name: str | None, values):
    """``expr`` at every value of the symbol ``name`` (``values``, a NumPy array), every other symbol at
    ``numbers`` (``{symbol name: float}``): an array the shape of ``values``, or None when a symbol other
    than ``name`` has no number (``name=None``: every symbol at ``numbers``, a 0-d array)."""
    names, fn = numpy_function(expr)
    if any(n != name and n not in numbers for n in names):
        return None
    y = fn(*(values if n == name else numbers[n] for n in names))
    return np.broadcast_to(np.asarray(y, dtype=float), np.shape(values))


@caching.memoize(maxsize=1024)
def math_function(expr, symbols: tuple):
    """``expr`` as a plain function of ``symbols`` (in that order) over floats, compiled once and kept."""
    return sp.lambdify(symbols, expr, "math")


class _Unsupported(Exception):
    pass


def _fold(op):
    return lambda *xs: reduce(op, xs)


_FOLDS = {sp.Add: operator.add, sp.Mul: operator.mul, sp.Max: np.maximum, sp.Min: np.minimum}
_UNARY = {sp.ceiling: np.ceil, sp.floor: np.floor, sp.log: np.log, sp.exp: np.exp, sp.Abs: np.abs}


def _build(e, index):
    if e.is_Number:
        value = float(e)
        return lambda args: value
    if e.is_Symbol:
        i = index[e]
        return lambda args: args[i]
    if e.func in _FOLDS:
        op = _FOLDS[e.func]
        parts = [_build(a, index) for a in e.args]
        constant = [p for a, p in zip(e.args, parts) if a.is_Number]
        varying = [p for a, p in zip(e.args, parts) if not a.is_Number]
        if constant and varying and e.func in (sp.Add, sp.Mul):   # fold the number in once
            c = reduce(op, (p(()) for p in constant))
            if len(varying) == 1:
                (v,) = varying
                return lambda args: op(c, v(args))
            return lambda args: reduce(op, (p(args) for p in varying), c)
        if len(parts) == 2:
            a, b = parts
            return lambda args: op(a(args), b(args))
        return lambda args: reduce(op, (p(args) for p in parts))
    if e.is_Pow:
        base, exp = _build(e.base, index), e.exp
        if exp == -1:
            return lambda args: 1.0 / base(args)
        if exp.is_Integer:
            n = int(exp)
            return lambda args: base(args) ** n
        if exp.is_Number:
            x = float(exp)
            return lambda args: np.power(base(args), x)
        power = _build(exp, index)
        return lambda args: np.power(base(args), power(args))
    if e.func in _UNARY and len(e.args) == 1:
        f, arg = _UNARY[e.func], _build(e.args[0], index)
        return lambda args: f(arg(args))
    raise _Unsupported(e.func)


__all__ = ["numpy_function", "over", "math_function"]
