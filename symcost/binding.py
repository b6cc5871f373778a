"""Binding a program to a mesh, sizes and hardware: the frozen :class:`BoundProgram` the planner takes.

    >>> b = bind("A[I, J_X] * B[J, K] -> C[I, K]", mesh="X=4", dims="I=256")
    >>> str(b.mesh), b.sizes
    ('X=4', (('I', 256),))
    >>> str(bind("In[B_X, D_Y] -> In[B, D]").mesh)     # without a mesh: every axis named, symbolic
    'X,Y'

Arguments come in the command line's forms or as Python values: ``mesh`` a ``--mesh`` string, a dict or a
:class:`~symcost.mesh.Mesh`; ``dims`` a ``--dims`` string or a dict; ``hw`` a preset name or a
:class:`~symcost.hardware.Hardware`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import symbols
from .errors import ShardingError, UsageError
from .mesh import Mesh, as_mesh
from .notation import Program, parse
from .topology import place

if TYPE_CHECKING:
    from .hardware import Hardware

RESERVED = set(symbols.HARDWARE_SYMBOLS)
MAX_SIZE = 10 ** 15


def parse_dims(text) -> dict[str, int]:
    """``--dims B=1024,D=8192`` (also accepts a dict). Sizes must be positive integers; ``1e6``-style
    numbers are accepted when they are whole."""
    if text is None:
        return {}
    if isinstance(text, dict):
        items = list(text.items())
    else:
        items = []
        parts = [p.strip() for p in str(text).split(",")]
        if parts[-1] == "":        # a trailing comma is harmless
            parts.pop()
        for part in parts:
            if not part:
                raise UsageError(f"--dims {text!r} has an empty item; write NAME=SIZE pairs separated by commas")
            if "=" not in part:
                raise UsageError(f"cannot read dimension binding {part!r}; write NAME=SIZE, e.g. B=1024")
            k, v = part.split("=", 1)
            items.append((k.strip(), v.strip()))
    out: dict[str, int] = {}
    for k, v in items:
        if not str(k).replace("_", "").isalnum() or not str(k)[:1].isalpha():
            raise UsageError(f"{k!r} is not a dimension name")
        n = as_size(k, v)
        if k in out and out[k] != n:
            raise UsageError(f"dimension {k} is bound twice, to {out[k]} and {n}")
        out[str(k)] = n
    return out


def as_size(name, v) -> int:
    """A positive whole number of at most 1e15 (``1e6`` and ``1_000_000`` are accepted)."""
    if isinstance(v, bool):
        raise UsageError(f"size of {name} must be a positive integer, not {v!r}")
    if isinstance(v, int):
        n = v
    else:
        s = str(v).strip().replace("_", "")
        try:
            f = float(s) if any(c in s for c in ".eE") else int(s)
        except ValueError:
            raise UsageError(f"size of {name} must be a positive integer, not {v!r}") from None
        if isinstance(f, float):
            if not math.isfinite(f) or f != int(f):
                raise UsageError(f"size of {name} must be a whole number, not {v!r}")
            f = int(f)
        n = f
    if n < 1:
        raise UsageError(f"size of {name} must be positive, not {n}")
    if n > MAX_SIZE:
        raise UsageError(f"size of {name} = {n} is absurdly large (more than 1e15)")
    return n


def resolve_hardware(hw):
    """A preset name (or a Hardware value) as a Hardware value; None stays None."""
    if hw is None or hw == "":
        return None
    if isinstance(hw, str):
        from .hardware import hardware
        return hardware(hw)
    from .hardware import Hardware
    if not isinstance(hw, Hardware):
        raise UsageError(f"hw must be a preset's name, a .toml preset file or a Hardware value, not "
                         f"{type(hw).__name__} {hw!r}")
    return hw


@dataclass(frozen=True)
class BoundProgram:
    """A program with the mesh it runs on, the sizes bound to numbers and the hardware it is priced on."""

    program: Program
    mesh: Mesh
    sizes: tuple[tuple[str, int], ...] = ()
    hardware: Hardware | None = None
    notes: tuple[str, ...] = ()          # how the mesh was laid onto the hardware

    @property
    def text(self) -> str:
        return self.program.text

    @property
    def size_map(self) -> dict[str, int]:
        return dict(self.sizes)

    @property
    def ranking_sizes(self) -> dict[str, int]:
        """Sizes to rank candidate plans at, where given: the program's ``rank`` statements, then the bound
        sizes (the planner adds its defaults for the rest)."""
        return {**self.program.ranking, **self.size_map}

    def split_over(self) -> dict[str, int | None]:
        """For each dimension the program writes split over mesh axes, the most devices it is split over
        (axes of unknown size count as None)."""
        out: dict[str, int | None] = {}
        for st in self.program.statements:
            for t in st.tensors:
                for d in t.dims:
                    if not d.axes or d.name.isdigit():
                        continue
                    sizes = [self.mesh.axis(a).size if a in self.mesh else None for a in d.axes]
                    n = None if None in sizes else _product(sizes)
                    prev = out.get(d.name)
                    out[d.name] = n if prev is None else max(prev, n or 0)
        return out

    @property
    def is_strategy(self) -> bool:
        """A program that declares parameters is a training strategy."""
        from .notation import Declaration
        return any(isinstance(s, Declaration) for s in self.program.statements)


def _product(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def bind(text, mesh=None, dims=None, hw=None) -> BoundProgram:
    """Parse (unless given a Program), settle the mesh and the names, bind sizes and hardware."""
    prog = text if isinstance(text, Program) else parse(text)
    mesh = as_mesh(mesh)
    if not mesh.axes:
        mesh = Mesh(()).with_axes(prog.axes_named())
    sizes = parse_dims(dims)
    hardware = resolve_hardware(hw)
    placement = place(mesh, hardware)
    _check_names(prog, placement.mesh)
    return BoundProgram(prog, placement.mesh, tuple(sorted(sizes.items())), hardware, placement.notes)


def _check_names(prog: Program, mesh: Mesh) -> None:
    """A name means one thing: a dimension, a mesh axis, a link count or a hardware figure."""
    dims = {d.name for st in prog.statements for t in st.tensors for d in t.dims if not d.name.isdigit()}
    for a in mesh.axes:
        if a.name in RESERVED:
            raise UsageError(f"mesh axis {a.name} clashes with the hardware symbol {a.name}; rename the axis")
        if isinstance(a.links, str):
            if a.links in dims:
                raise UsageError(f"mesh axis {a.name}'s link count {a.links} has the name of dimension {a.links} "
                                 f"of the program; name the link count otherwise (e.g. {a.name}:M_{a.name})")
            if a.links in mesh.names or a.links in RESERVED:
                raise UsageError(f"mesh axis {a.name}'s link count {a.links} has the name of "
                                 f"{'mesh axis' if a.links in mesh.names else 'the hardware symbol'} {a.links}")
    for st in prog.statements:
        for t in st.tensors:
            for d in t.dims:
                where: dict[str, Any] = dict(text=prog.text, line=d.span.line or None, column=d.span.column or None,
                             width=d.span.width)
                if d.name in RESERVED:
                    raise ShardingError(f"dimension {d.name} of {t.name} clashes with the hardware symbol "
                                        f"{d.name} (FLOPs/s)", hint="rename the dimension", **where)
                if d.name in mesh:
                    raise ShardingError(f"dimension {d.name} of {t.name} has the name of a mesh axis",
                                        hint="give dimensions and mesh axes different names", **where)
