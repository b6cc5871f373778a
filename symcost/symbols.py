"""The SymPy symbols costs are written in.

Dimension sizes are positive integer symbols named like the dimension (``B``, ``D``, ``F``); a mesh
axis's size is a positive integer symbol named like the axis (``X``); hardware figures are positive
symbols: ``C`` (FLOPs/s of the dtype in use), ``W_hbm``, ``W_ici`` (bidirectional ICI bandwidth per
link), ``W_dcn`` (DCN bandwidth per chip), ``W_nvlink`` (NVLink bandwidth per GPU, one way) and
``T_min`` (latency of one hop). Symbols are built by name only: user text never reaches ``sympify``.
"""
from __future__ import annotations

import sympy as sp

from . import caching

HARDWARE_SYMBOLS = ("C", "W_hbm", "W_ici", "W_dcn", "W_nvlink", "T_min")


@caching.memoize(maxsize=4096)
def dim(name: str) -> sp.Expr:
    """The size of a dimension: ``dim('B')`` is the symbol B; ``dim('2')`` is the integer 2."""
    if name.isdigit():
        return sp.Integer(int(name))
    return sp.Symbol(name, positive=True, integer=True)


@caching.memoize(maxsize=4096)
def axis(name: str) -> sp.Symbol:
    """The size of a mesh axis, a positive integer symbol named like the axis."""
    return sp.Symbol(name, positive=True, integer=True)


@caching.memoize(maxsize=4096)
def hw(name: str) -> sp.Symbol:
    """A hardware figure (``C``, ``W_ici``, ...) or any other positive real constant."""
    return sp.Symbol(name, positive=True)


C = hw("C")
W_hbm = hw("W_hbm")
W_ici = hw("W_ici")
W_dcn = hw("W_dcn")
W_nvlink = hw("W_nvlink")
T_min = hw("T_min")


def by_name(expr: sp.Expr) -> dict[str, sp.Symbol]:
    """The free symbols of an expression, by name."""
    return {s.name: s for s in expr.free_symbols}
