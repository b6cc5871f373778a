"""The cost model (DESIGN section 2): collective times, FLOPs, bytes, T_math, T_hbm, T_comms.

Every formula here is written once and evaluated in an :class:`Env`, which is either symbolic (SymPy
expressions over dimension, axis and hardware symbols) or numeric (floats, for ranking candidate plans
quickly). For example, the book's Part 3 Question 2 (v4p 4x4x4, B=1024, D=4096, bf16)::

    >>> from symcost.layout import Layout
    >>> from symcost.mesh import parse_mesh
    >>> mesh = parse_mesh("X=4,Y=4,Z=4")
    >>> a = Layout.of("A", "BD", [("X",), ("Y",)])
    >>> move = Move("AllGather", ("X",), a, a.with_dim_axes("B", ()))
    >>> env = Env.numeric(mesh, {"B": 1024, "D": 4096}, {"W_ici": 9e10, "T_min": 1e-6})
    >>> round(collective_time(move, env) * 1e6, 1)   # 2 B D / (Y W_ici), in microseconds
    23.3
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from . import symbols
from .layout import Layout
from .mesh import Mesh
from .notation import DTYPE_BYTES, format_axes

#: what ranks candidate plans when a symbol is unbound (documented in the README): dimensions of 8192,
#: axes of 4 devices, one link per axis, and TPU v5p's figures (book Part 2). Bind sizes with --dims to
#: rank at yours.
RANKING_DEFAULTS = {"dim": 8192, "axis": 4, "links": 1,
                    "C": 4.59e14, "W_hbm": 2.8e12, "W_ici": 1.8e11, "W_dcn": 6.25e9, "W_nvlink": 4.5e11,
                    "T_min": 1e-6}

MOVE_KINDS = ("AllGather", "ReduceScatter", "AllReduce", "AllToAll", "Slice", "Permute")


@dataclass(frozen=True)
class Move:
    """One collective (or local slice) from ``before`` to ``after`` over mesh ``axes``."""

    kind: str
    axes: tuple[str, ...]
    before: Layout
    after: Layout

    def signature(self, mesh: Mesh | None = None) -> str:
        return f"{self.kind}{format_axes(self.axes)}({self.before.render(mesh)}) -> {self.after.render(mesh)}"

    def __str__(self) -> str:
        return self.signature()


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
    """Where formulas are evaluated: symbols (``symbolic``) or floats (``numeric``)."""

    def __init__(self, mesh: Mesh, numeric: bool, sizes=None, constants=None):
        self.mesh = mesh
        self.is_numeric = numeric
        self.sizes = dict(sizes or {})
        self.constants = dict(constants or {})
        self._axes = {a.name: a for a in mesh.axes}
        if numeric:
            c = {**RANKING_DEFAULTS, **self.constants}
            self.C, self.W_hbm, self.W_ici = c["C"], c["W_hbm"], c["W_ici"]
            self.W_dcn, self.W_nvlink, self.T_min = c["W_dcn"], c["W_nvlink"], c["T_min"]
        else:
            self.C, self.W_hbm, self.W_ici = symbols.C, symbols.W_hbm, symbols.W_ici
            self.W_dcn, self.W_nvlink, self.T_min = symbols.W_dcn, symbols.W_nvlink, symbols.T_min
        self._cache: dict = {}

    @classmethod
    def symbolic(cls, mesh: Mesh) -> "Env":
        return cls(mesh, False)

    @classmethod
    def numeric(cls, mesh: Mesh, sizes=None, constants=None) -> "Env":
        return cls(mesh, True, sizes, constants)

    # ------------------------------------------------------------------ primitives
    def dim(self, name: str):
        if name.isdigit():
            return int(name) if self.is_numeric else sp.Integer(int(name))
        if self.is_numeric:
            return float(self.sizes.get(name, RANKING_DEFAULTS.get(name, RANKING_DEFAULTS["dim"])))
        return symbols.dim(name)

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
        return max(args) if self.is_numeric else smax(*args)

    def prod(self, values):
        out = 1.0 if self.is_numeric else sp.Integer(1)
        for v in values:
            out = out * v
        return out

    def dtype_bytes(self, dtype: str):
        b = DTYPE_BYTES[dtype]
        if self.is_numeric:
            return float(b)
        return sp.Rational(1, 2) if b == 0.5 else sp.Integer(b)

    def local_bytes(self, layout: Layout):
        """Bytes of ``layout``'s block on one device."""
        key = ("lb", layout.dims, layout.axes, layout.dtype)
        v = self._cache.get(key)
        if v is None:
            v = self.dtype_bytes(layout.dtype)
            for d, axes in zip(layout.dims, layout.axes):
                v = v * self.dim(d) / self.prod(self.axis(a) for a in axes)
            self._cache[key] = v
        return v


# ------------------------------------------------------------------------------------ collectives


def collective_bytes(move: Move, env: Env):
    """V of DESIGN section 2: the bytes the collective's time formula uses.

    AllGather: the array it produces on the devices that take part (the gathered block); ReduceScatter,
    AllReduce: the array it consumes; AllToAll: the whole array over the group; Permute: one block.
    """
    k = move.kind
    if k == "AllGather":
        return env.local_bytes(move.after)
    if k in ("ReduceScatter", "AllReduce", "Permute"):
        return env.local_bytes(move.before)
    if k == "AllToAll":
        return env.local_bytes(move.before) * env.prod(env.axis(a) for a in move.axes)
    return 0.0 if env.is_numeric else sp.Integer(0)


def _group(axes, env: Env):
    """(kind, ring?, sum of per-axis bandwidths for a ring/line, group size, hops)."""
    mesh_axes = [env._axes[a] for a in axes]
    kind = mesh_axes[0].kind
    ring = all(a.ring for a in mesh_axes)
    n = env.prod(env.axis(a) for a in axes)
    return kind, ring, n, mesh_axes


def collective_time(move: Move, env: Env):
    """Time of one move, latency floor included: ``max(T_min * hops, V / bandwidth)``.

    Book Part 3: AllGather and ReduceScatter take V / W_ici on a bidirectional ring (V / (W_ici * sum of
    links) over several axes); AllReduce twice that; AllToAll a quarter on a 1D ring. Without wraparound
    the data crosses a line one way: (n-1)/n of V at the one-way bandwidth W_ici / 2 (the book's 560 us
    example). DCN axes use the per-chip DCN bandwidth; a switched NVLink domain moves V (n-1)/n through
    each GPU's one-way link. Hops: |axis|/2 per axis on a ring, |axis|-1 on a line, one in a switch.
    """
    k = move.kind
    if k == "Slice":
        return 0.0 if env.is_numeric else sp.Integer(0)
    V = collective_bytes(move, env)
    kind, ring, n, mesh_axes = _group(move.axes, env)
    sizes = [env.axis(a.name) for a in mesh_axes]
    links = sum((env.links(a.name) for a in mesh_axes), 0.0 if env.is_numeric else sp.Integer(0))
    total = sum(sizes[1:], sizes[0])
    if kind == "dcn":
        bw, frac, hops = env.W_dcn, 1, total / 2
    elif kind == "nvlink":
        bw, frac, hops = env.W_nvlink, (n - 1) / n, 1
    elif ring:
        bw, frac, hops = env.W_ici * links, 1, total / 2
    else:
        bw, frac, hops = env.W_ici / 2 * links, (n - 1) / n, total - len(sizes)
    if k in ("AllGather", "ReduceScatter"):
        t_bw = V * frac / bw
    elif k == "AllReduce":
        t_bw, hops = 2 * V * frac / bw, 2 * hops
    elif k == "AllToAll":
        if kind == "ici" and ring:
            # V max(sizes) / (4 N W_ici) on an N-device torus; V / (4 W_ici) on a 1D ring
            big = sizes[0] if len(sizes) == 1 else env.max(*sizes)
            t_bw = V * big / (4 * n * bw)
        elif kind == "ici":  # a line: each block crosses (n-1)/2 links on average, one way
            t_bw = V * frac / bw / 2
        else:  # switched or DCN: each device sends (n-1)/n of its block
            t_bw = V * (n - 1) / (n * n) / bw
    elif k == "Permute":
        # each device sends its block to another: one block over the one-way link
        t_bw = V / (bw / 2 if (kind == "ici" and ring) else bw)
        hops = 1
    else:  # pragma: no cover - MOVE_KINDS is closed
        raise ValueError(k)
    return env.max(env.T_min * hops, t_bw)


def collective_bandwidth_time(move: Move, env: Env):
    """The throughput term alone (no latency floor): used for win conditions."""
    if move.kind == "Slice":
        return 0.0 if env.is_numeric else sp.Integer(0)
    t = collective_time(move, env)
    if isinstance(t, sp.Max):
        args = [a for a in t.args if not a.has(symbols.T_min)]
        return args[0] if len(args) == 1 else t
    return t


# ------------------------------------------------------------------------------------ local einsum


@dataclass(frozen=True)
class LocalEinsum:
    """An einsum every device runs on its own blocks (the layouts are the local shardings)."""

    inputs: tuple[Layout, ...]
    output: Layout
    dims: tuple[str, ...]                     # every dimension of the einsum
    axes: tuple[tuple[str, ...], ...]         # sigma: the axes splitting each of ``dims``

    def subscripts(self) -> str:
        """A numpy subscript string, e.g. 'ab,bc->ac'."""
        letters = {d: chr(ord("a") + i) for i, d in enumerate(self.dims)}
        ins = ",".join("".join(letters[d] for d in t.dims) for t in self.inputs)
        return ins + "->" + "".join(letters[d] for d in self.output.dims)

    def signature(self, mesh: Mesh | None = None) -> str:
        return " * ".join(t.render(mesh) for t in self.inputs) + " -> " + self.output.render(mesh)


def einsum_flops(e: LocalEinsum, env: Env):
    """FLOPs per device: 2 x the product of every dimension over the axes that split it (book Part 3;
    replicated work is not divided). A one-operand einsum sums (1 FLOP an element) or only moves data."""
    size = env.prod(env.dim(d) / env.prod(env.axis(a) for a in ax) for d, ax in zip(e.dims, e.axes))
    if len(e.inputs) >= 2:
        return 2 * size
    summed = set(e.dims) - set(e.output.dims)
    return size if summed else (0.0 if env.is_numeric else sp.Integer(0))


def einsum_bytes(e: LocalEinsum, env: Env):
    """Bytes one device reads and writes: its operand blocks and its result block (for T_hbm)."""
    total = env.local_bytes(e.output)
    for t in e.inputs:
        total = total + env.local_bytes(t)
    return total


def einsum_times(e: LocalEinsum, env: Env):
    """(FLOPs, bytes, T_math, T_hbm)."""
    f = einsum_flops(e, env)
    b = einsum_bytes(e, env)
    return f, b, f / env.C, b / env.W_hbm

