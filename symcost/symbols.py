"""The SymPy symbols costs are written in.

Dimension sizes are positive integer symbols named like the dimension (``B``, ``D``, ``F``); a mesh
axis's size is a positive integer symbol named like the axis (``X``); hardware figures are positive
symbols: ``C`` (FLOPs/s of the dtype in use), ``W_hbm``, ``W_ici`` (bidirectional ICI bandwidth per
link), ``W_dcn`` (DCN bandwidth per chip), ``W_nvlink`` (NVLink bandwidth per GPU, one way),
``T_min`` (latency of one hop) and ``C_vec`` (elementwise FLOPs/s of the vector unit). Symbols are built
by name only: user text never reaches ``sympify``.

Costs priced with achieved efficiency (``derive(..., efficiency=True)``) carry what they assume as symbols:
``eta_math`` (fraction of peak FLOPs/s a matmul reaches), ``eta_hbm``, ``eta_vec``, and per link kind
``eta_net_ici`` / ``eta_net_nvlink`` / ``eta_net_dcn`` (fraction of the link bandwidth a collective
reaches) with ``T_net_ici`` / ... (a fixed latency per collective)::

    >>> eta_net("nvlink"), t_net("dcn")
    (eta_net_nvlink, T_net_dcn)
"""
from __future__ import annotations

import sympy as sp

from . import caching

HARDWARE_SYMBOLS = ("C", "W_hbm", "W_ici", "W_dcn", "W_nvlink", "T_min", "C_vec")
LINK_KINDS = ("ici", "nvlink", "dcn")
EFFICIENCY_SYMBOLS = ("eta_math", "eta_hbm", "eta_vec", "T_kernel") + tuple(f"eta_net_{k}" for k in LINK_KINDS) + tuple(
    f"T_net_{k}" for k in LINK_KINDS)


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
C_vec = hw("C_vec")
eta_math = hw("eta_math")
eta_hbm = hw("eta_hbm")
eta_vec = hw("eta_vec")
t_kernel = hw("T_kernel")       # the per-kernel floor: the launch and tail every kernel pays


def eta_net(kind: str) -> sp.Symbol:
    """The fraction of a link kind's bandwidth a collective reaches."""
    return hw(f"eta_net_{kind}")


def t_net(kind: str) -> sp.Symbol:
    """The fixed latency of one collective over a link kind."""
    return hw(f"T_net_{kind}")


def by_name(expr: sp.Expr) -> dict[str, sp.Symbol]:
    """The free symbols of an expression, by name."""
    return {s.name: s for s in expr.free_symbols}
