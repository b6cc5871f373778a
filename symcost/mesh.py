"""Meshes: named axes with sizes and link models.

    >>> m = parse_mesh("X=4,Y=8:2,Z=2:dcn")
    >>> [str(a) for a in m.axes]
    ['X=4', 'Y=8:2', 'Z=2:dcn']
    >>> m.size("X"), m.size("Y")
    (4, 8)

An axis's size is a number or, when unbound, the symbol named like the axis. Its link model says what
network its collectives cross (docs/notation.md): ``ici`` (a torus ring, with or without wraparound),
``nvlink`` (a switched GPU domain) or ``dcn`` (between slices), and how many physical links it spans
(the book's M_X; a symbol ``M_X`` when written ``X:M_X``). A mesh knows nothing of chips: where its axes
run on a real machine (link kinds, link counts, wraparound) is settled by :mod:`symcost.topology`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import sympy as sp

from . import caching, symbols
from .errors import UsageError

LINK_KINDS = ("ici", "nvlink", "dcn")


@dataclass(frozen=True)
class Axis:
    """One mesh axis. ``size`` None is symbolic; ``links`` is an int or the name of a symbol."""

    name: str
    size: int | None = None
    kind: str = "ici"
    links: int | str = 1
    wraparound: bool | None = None  # None: not settled (symbolic analysis assumes a full ring)
    kind_written: bool = field(default=False, compare=False)   # the link kind was given, not assumed
    links_written: bool = field(default=False, compare=False)  # a link count or :wrap / :nowrap was given
    edges: tuple[int, ...] = ()     # the torus edges of the slice it spans, once placed (product: size)

    @property
    def size_expr(self) -> sp.Expr:
        return sp.Integer(self.size) if self.size is not None else symbols.axis(self.name)

    @property
    def links_expr(self) -> sp.Expr:
        return sp.Integer(self.links) if isinstance(self.links, int) else symbols.axis(self.links)

    @property
    def ring(self) -> bool:
        """True when collectives see a bidirectional ring (wraparound, or not yet settled)."""
        return self.wraparound is not False

    @property
    def spelled(self) -> str:
        """The axis with its link model in full, as ``--mesh`` reads it: ``X=16:2:ici:wrap``, ``Y=8:nvlink``
        (wraparound named once settled, on ICI)."""
        out = self.name + (f"={self.size}" if self.size is not None else "")
        if self.links != 1:
            out += f":{self.links}"
        out += f":{self.kind}"
        if self.kind == "ici" and self.wraparound is not None:
            out += ":wrap" if self.wraparound else ":nowrap"
        return out

    def link_model(self) -> dict:
        """``{"kind", "wrap", "links"}`` (``derive --json``'s ``links``): wrap is True where collectives see
        a ring (settled wraparound, or not yet settled); links the torus dimensions or links it spans (the
        symbol's name where symbolic)."""
        return {"kind": self.kind, "wrap": self.kind == "ici" and self.ring, "links": self.links}

    def __str__(self) -> str:
        out = self.name + (f"={self.size}" if self.size is not None else "")
        if self.links != 1:
            out += f":{self.links}"
        if self.kind != "ici":
            out += f":{self.kind}"
        if self.wraparound is False and self.kind == "ici":
            out += ":nowrap"
        return out


@dataclass(frozen=True)
class Mesh:
    """An ordered set of named axes."""

    axes: tuple[Axis, ...]

    __hash__ = caching.kept_hash            # every cache of a plan is keyed by its mesh
    __getstate__ = caching.state_without_hash

    def __post_init__(self):
        names = tuple(a.name for a in self.axes)
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise UsageError(f"mesh axis {sorted(dup)[0]!r} is given twice")
        # read by every move and einsum the planner weighs: the names kept as the axes' own (not a field)
        object.__setattr__(self, "_names", names)
        object.__setattr__(self, "_named", frozenset(names))

    @property
    def names(self) -> tuple[str, ...]:
        return self._names  # type: ignore[attr-defined]  # set in __post_init__

    @property
    def size_names(self) -> frozenset:
        """The sizes the mesh names: its axes and their symbolic link counts (``X:M_X``)."""
        return frozenset(self.names) | {a.links for a in self.axes if isinstance(a.links, str)}

    def __contains__(self, name: str) -> bool:
        return name in self._named  # type: ignore[attr-defined]

    def axis(self, name: str) -> Axis:
        for a in self.axes:
            if a.name == name:
                return a
        raise UsageError(f"unknown mesh axis {name!r}; the mesh has {', '.join(self.names) or 'no axes'}")

    def size(self, name: str) -> sp.Expr | int:
        a = self.axis(name)
        return a.size if a.size is not None else a.size_expr

    def size_expr(self, name: str) -> sp.Expr:
        return self.axis(name).size_expr

    def devices(self) -> sp.Expr:
        return sp.Mul(*(a.size_expr for a in self.axes))

    def order(self, names) -> tuple[str, ...]:
        """``names`` in mesh order."""
        if len(names) <= 1:         # most moves are over one axis (the planner asks for every move it weighs)
            return tuple(names)
        s = set(names)
        return tuple(n for n in self._names if n in s)  # type: ignore[attr-defined]  # set in __post_init__

    def with_axes(self, names) -> "Mesh":
        """This mesh plus symbolic one-link ICI axes for any of ``names`` it lacks."""
        extra = tuple(Axis(n) for n in names if n not in self)
        return Mesh(self.axes + extra) if extra else self

    @property
    def bound(self) -> bool:
        return all(a.size is not None for a in self.axes)

    @property
    def spelled(self) -> str:
        """Every axis with its link kind (and wraparound, once settled): what a plan's mesh line shows."""
        return ",".join(a.spelled for a in self.axes)

    def links(self) -> dict:
        """Each axis's link model by name (see :meth:`Axis.link_model`)."""
        return {a.name: a.link_model() for a in self.axes}

    def __str__(self) -> str:
        return ",".join(str(a) for a in self.axes)


_AXIS_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:=(\?|[0-9]+))?((?::[A-Za-z0-9_]+)*)$")


def parse_mesh(text: str | None) -> Mesh:
    """Parse ``--mesh``: ``X=4,Y=8``; ``X`` or ``X=?`` symbolic; ``X=16:2`` two links; ``X:M_X``
    symbolic links; ``X=4:dcn``, ``X=8:nvlink``; ``:wrap`` / ``:nowrap`` force the ring model."""
    if text is None or not text.strip():
        return Mesh(())
    axes = []
    for part in text.split(","):
        part = part.strip()
        m = _AXIS_RE.match(part)
        if not m:
            raise UsageError(f"cannot read mesh axis {part!r}; write X=4, X, X=16:2, X=4:dcn or X:M_X")
        name, size, suffix = m.group(1), m.group(2), m.group(3)
        size_v = None if size in (None, "?") else int(size)
        if size_v is not None and size_v < 1:
            raise UsageError(f"mesh axis {name} must have a positive size, not {size_v}")
        if size_v is not None and size_v > 1_000_000:
            raise UsageError(f"mesh axis {name} of size {size_v} is larger than any machine")
        kind, links, wrap, written, links_given = "ici", 1, None, False, False
        for s in filter(None, suffix.split(":")):
            low = s.lower()
            if low in LINK_KINDS:
                kind, written = low, True
            elif low in ("wrap", "ring", "torus"):
                wrap = True
            elif low in ("nowrap", "line"):
                wrap = False
            elif s.isdigit():
                links, links_given = int(s), True
                if links < 1:
                    raise UsageError(f"mesh axis {name} must span at least one link")
            elif re.match(r"^[A-Z][A-Za-z0-9_]*$", s):
                links = s  # a symbolic link count, the book's M_X
            else:
                raise UsageError(f"unknown link model {s!r} for mesh axis {name}")
        axes.append(Axis(name, size_v, kind, links, wrap, written, links_given or wrap is not None))
    return Mesh(tuple(axes))


def as_mesh(mesh) -> Mesh:
    """Accept a Mesh, a ``--mesh`` string, a dict ``{"X": 4, "Y": None}`` or None."""
    if mesh is None:
        return Mesh(())
    if isinstance(mesh, Mesh):
        return mesh
    if isinstance(mesh, str):
        return parse_mesh(mesh)
    if isinstance(mesh, dict):
        axes = []
        for k, v in mesh.items():
            if isinstance(v, Axis):
                axes.append(v)
            elif v is None or v == "?" or v == k:
                axes.append(Axis(str(k)))
            elif isinstance(v, int) and not isinstance(v, bool) and v >= 1:
                axes.append(Axis(str(k), v))
            else:
                raise UsageError(f"mesh axis {k} must have a positive integer size, not {v!r}")
        return Mesh(tuple(axes))
    raise UsageError(f"cannot use {type(mesh).__name__} as a mesh")


def link_models(mesh: Mesh) -> dict[str, dict]:
    """Each axis's link model as ``--json`` reports it: ``{"X": {"kind": "ici", "wrap": True, "links": 1}}``
    (``wrap``: the axis's collectives see a ring, only ever on ICI;
    a symbolic link count as its symbol's name; see :meth:`Mesh.links`, which derive's JSON also uses)."""
    return mesh.links()
