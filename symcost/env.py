"""Where cost formulas are evaluated: over SymPy symbols, or over floats.

Every formula (a collective's link time, an einsum's FLOPs) is written once against an :class:`Env`; a
symbolic one gives the closed forms a plan reports, a numeric one the floats that rank candidate plans::

    >>> from symcost.mesh import parse_mesh
    >>> env = Env.symbolic(parse_mesh("X=4,Y"))
    >>> env.axis("X"), env.axis("Y"), env.W_ici
    (4, Y, W_ici)
    >>> Env.numeric(parse_mesh("X=4,Y")).axis("Y")   # unbound: the ranking default
    4.0
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np
import sympy as sp

from . import dtypes, symbols
from .layout import Layout
from .mesh import Axis, Mesh

FIGURES = ("C", "W_hbm", "W_ici", "W_dcn", "W_nvlink", "W_pcie", "T_min", "C_vec")


def _book_figures() -> dict[str, float]:
    """The chip a plan is ranked on where none is given: TPU v5p's figures, as its preset has them (book
    Part 2), with NVLink at an H100's and vector work at the matrix rate (the preset's VPU figure would make
    elementwise work decide which plan of a program without a chip ranks first)."""
    from .hardware import hardware
    v5p, h100 = hardware("tpu-v5p").bindings("bf16"), hardware("h100").bindings("bf16")
    book = {k: float(v5p[k]) for k in ("C", "W_hbm", "W_ici", "W_dcn", "W_pcie", "T_min")}
    return {**book, "W_nvlink": float(h100["W_nvlink"]), "C_vec": book["C"]}


#: what ranks candidate plans when a symbol is unbound (docs/how-it-decides.md): dimensions of 8192,
#: axes of 4 devices, one link per axis, and the figures of :func:`_book_figures`. Bind sizes with --dims
#: to rank at yours, a chip with --hw.
RANKING_DEFAULTS: dict[str, float] = {"dim": 8192, "axis": 4, "links": 1, **_book_figures()}


def smax(*args) -> sp.Expr:
    """``Max`` without SymPy's pairwise comparisons (slow, and pointless for these positive terms):
    flattened, zeros and duplicates dropped, arguments in canonical order so equal maxima compare equal.
    Substituting numbers evaluates it."""
    flat = []
    for a in args:
        a = sp.sympify(a)
        if isinstance(a, sp.Max):
            flat.extend(a.args)
        elif a != 0:
            flat.append(a)
    uniq = sorted(set(flat), key=sp.default_sort_key)
    if not uniq:
        return sp.Integer(0)
    if len(uniq) == 1:
        return uniq[0]
    if all(u.is_number for u in uniq):
        return max(uniq)
    return sp.Max(*uniq, evaluate=False)


class Env:
    """Sizes, link counts and hardware figures, as symbols (``symbolic``) or floats (``numeric``).

    ``efficiency``: None prices the book's ideal machine (every figure at its datasheet peak). Otherwise
    costs carry achieved efficiency: symbolic, as the symbols ``eta_math``, ``eta_hbm``, ``eta_vec``,
    ``eta_net_<kind>`` and ``T_net_<kind>`` (pass True); numeric, from a preset's
    :class:`~symcost.hardware.Efficiency` (matmul efficiency by the FLOPs of each matmul)::

        >>> from symcost.hardware import Efficiency
        >>> from symcost.mesh import parse_mesh
        >>> e = Env.numeric(parse_mesh("X=4"), efficiency=Efficiency(hbm=0.5))
        >>> e.eta_hbm, Env.symbolic(parse_mesh("X"), efficiency=True).eta_hbm
        (0.5, eta_hbm)
    """

    # the hardware figures (FIGURES), set in __init__: symbols, or floats when numeric
    C: Any
    W_hbm: Any
    W_ici: Any
    W_dcn: Any
    W_nvlink: Any
    W_pcie: Any
    T_min: Any
    C_vec: Any
    #: a hardware.Efficiency table (numbers) or True (symbols); None prices at the peaks (read only when achieved)
    efficiency: Any

    def __init__(self, mesh: Mesh, numeric: bool, sizes=None, constants=None, efficiency=None,
                 padded=frozenset()):
        self.mesh = mesh
        self.is_numeric = numeric
        self.sizes = dict(sizes or {})
        self.constants = dict(constants or {})
        self.efficiency = None if efficiency in (None, False) else efficiency
        self.achieved = self.efficiency is not None
        self.floors = True        # a symbolic env keeps T_kernel unless the preset is known to have none
        self._axes = {a.name: a for a in mesh.axes}
        figures = {**RANKING_DEFAULTS, **self.constants} if numeric else {k: symbols.hw(k) for k in FIGURES}
        for k in FIGURES:
            setattr(self, k, figures[k])
        self.padded = padded      # symbolic: the (dimension, axes) whose blocks are rounded up
        self.zero = 0.0 if numeric else sp.Integer(0)
        self.one = 1.0 if numeric else sp.Integer(1)
        self._local: dict = {}
        self._group: dict = {}    # axes -> their group's size (every move priced asks it again)
        self._pads: dict = {}     # (dimension, axes) -> whether its blocks are padded (numbers)
        self.groups: dict = {}    # axes -> their link groups (symcost.collectives.links.phases)
        self.link_times: dict | None = {} if numeric else None     # see kept_link_time
        self._elementwise = False

    def kept_link_time(self, key: tuple, compute):
        """``compute()``, a collective's (latency, throughput) in numbers, kept under ``key`` (the collective,
        its axes and whatever else its time depends on, its bytes among them): a layout search prices moves
        of the same axes and bytes in layout after layout. Computed afresh where the bytes are closed forms
        or arrays."""
        memo = self.link_times
        if memo is None:
            return compute()
        got = memo.get(key)
        if got is None:
            got = memo[key] = compute()
        return got

    @classmethod
    def symbolic(cls, mesh: Mesh, padded=frozenset(), efficiency=None) -> "Env":
        return cls(mesh, False, efficiency=True if efficiency else None, padded=padded)

    @classmethod
    def numeric(cls, mesh: Mesh, sizes=None, constants=None, efficiency=None) -> "Env":
        return cls(mesh, True, sizes, constants, efficiency)

    @classmethod
    def arrays(cls, mesh: Mesh) -> "Env":
        """Numeric, where the values totalled are NumPy arrays (a closed form over many values of one
        symbol): ``max`` is elementwise."""
        env = cls(mesh, True)
        env._elementwise = True
        env.link_times = None
        return env

    # ------------------------------------------------------------------ achieved efficiency
    def eta_math(self, flops, dtype: str = "bf16", shape=None):
        """The fraction of peak FLOPs/s a matmul of ``flops`` (per device) reaches; with its ``shape``
        ``(m, n, k, batch)``, times the useful fraction of its tiles' waves."""
        if not self.is_numeric:
            return symbols.eta_math
        if shape:
            m, n, k, batch = map(float, shape)
            return self.efficiency.matmul_shape(m, n, k, batch, dtype)
        return self.efficiency.math(float(flops), dtype)

    @property
    def eta_hbm(self):
        return self.efficiency.hbm if self.is_numeric else symbols.eta_hbm

    @property
    def t_kernel(self):
        """The per-kernel floor (:func:`symcost.pricing.totals` adds it to every kernel); 0 on the book's
        ideal machine."""
        if not self.achieved or not self.floors:
            return self.zero
        return self.efficiency.t_kernel if self.is_numeric else symbols.t_kernel

    @property
    def eta_vec(self):
        return self.efficiency.vector if self.is_numeric else symbols.eta_vec

    def net(self, kind: str, collective: str = ""):
        """(bandwidth fraction, fixed latency in seconds) of a collective over a link kind."""
        if not self.is_numeric:
            return symbols.eta_net(kind), symbols.t_net(kind)
        return self.efficiency.net(kind, collective)

    # ------------------------------------------------------------------ primitives
    def dim(self, name: str):
        if name.isdigit():
            return float(name) if self.is_numeric else sp.Integer(int(name))
        if self.is_numeric:
            return float(self.sizes.get(name, RANKING_DEFAULTS["dim"]))
        return symbols.dim(name)

    def axis_info(self, name: str) -> Axis:
        return self._axes[name]

    def axis(self, name: str):
        a = self._axes[name]
        if self.is_numeric:
            return float(a.size) if a.size is not None else float(self.sizes.get(name, RANKING_DEFAULTS["axis"]))
        return a.size_expr

    def links(self, name: str):
        a = self._axes[name]
        if self.is_numeric:
            return float(a.links) if isinstance(a.links, int) else float(self.sizes.get(a.links, 1))
        return a.links_expr

    def max(self, *args):
        if not self.is_numeric:
            return smax(*args)
        return functools.reduce(np.maximum, args) if self._elementwise else max(args)

    def prod(self, values):
        out = self.one
        for v in values:
            out = out * v
        return out

    def total(self, values):
        out = self.zero
        for v in values:
            out = out + v
        return out

    def group_size(self, axes):
        if not axes:
            return self.one
        key = axes if type(axes) is tuple else tuple(axes)
        v = self._group.get(key)
        if v is None:
            v = self._group[key] = self.prod(self.axis(a) for a in key)
        return v

    def local(self, dim: str, axes):
        """The size of ``dim`` on one device when split over ``axes``: rounded up where the bound numbers do
        not divide (a padded block)."""
        n, k = self.dim(dim), self.group_size(axes)
        if not axes:
            return n
        if self.is_numeric:
            if (dim in self.sizes or dim.isdigit()) and n % k:
                return float(-(-n // k))
            return n / k
        if (dim, tuple(axes)) in self.padded:
            return sp.ceiling(n / k)
        return n / k

    def pads(self, dim: str, axes) -> bool:
        """Whether ``dim`` split over ``axes`` has padded blocks (its bound size does not divide by the axes'
        devices; in a closed form, where the plan named it so)."""
        if not axes:
            return False
        if not self.is_numeric:
            return (dim, tuple(axes)) in self.padded
        key = (dim, axes)
        got = self._pads.get(key)
        if got is None:
            got = self._pads[key] = (dim in self.sizes or dim.isdigit()) and bool(self.dim(dim) % self.group_size(axes))
        return got

    def dtype_bytes(self, dtype: str):
        return float(dtypes.nbytes(dtype)) if self.is_numeric else dtypes.nbytes_expr(dtype)

    def local_bytes(self, layout: Layout):
        """Bytes of ``layout``'s block on one device."""
        key = (layout.dims, layout.axes, layout.dtype)
        v = self._local.get(key)
        if v is None:
            v = self.dtype_bytes(layout.dtype)
            for d, axes in zip(layout.dims, layout.axes):
                v = v * self.local(d, axes)
            self._local[key] = v
        return v
