"""Layouts: how a tensor's dimensions are split over mesh axes (book Part 3).

    >>> a = Layout.of("A", ["I", "J"], [("X", "Y"), ()], dtype="int8")
    >>> str(a)
    'A:int8[I_XY, J]'
    >>> mesh = parse_mesh("X=2,Y=8,Z=2")
    >>> local_shape(a, mesh, {"I": 128, "J": 2048}), bytes_per_device(a, mesh, {"I": 128, "J": 2048})
    ((8, 2048), 16384)

``A[I_XY, J]`` splits I over X then Y (block index x*|Y| + y, X major, like the JAX PartitionSpec
``P(('X', 'Y'), None)``); J is whole; A is replicated over every axis it does not name (Z here). A layout
is valid when every mesh axis appears at most once across its dimensions and its unreduced set, and every
axis is in the mesh. With numbers bound, a dimension that does not divide by the product of its axes is
padded (each device holds the size rounded up, as GSPMD pads); ``check --strict`` refuses it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import sympy as sp

from . import caching, dtypes, symbols
from .errors import ShardingError
from .mesh import Mesh, parse_mesh  # noqa: F401  (parse_mesh is used by the doctest)
from .notation import NO_SPAN, Span, TensorRef, format_axes, format_tensor

DEFAULT_DTYPE = dtypes.DEFAULT


@dataclass(frozen=True)
class Layout:
    """A named tensor's sharding: per-dimension axis tuples, unreduced axes and a dtype."""

    name: str
    dims: tuple[str, ...]
    axes: tuple[tuple[str, ...], ...]
    unreduced: frozenset[str] = frozenset()
    dtype: str = DEFAULT_DTYPE

    __hash__ = caching.kept_hash            # layouts key every search's tables
    __getstate__ = caching.state_without_hash

    def __init__(self, name: str, dims: tuple, axes: tuple, unreduced: frozenset = frozenset(),
                 dtype: str = DEFAULT_DTYPE):
        # the fields written straight into the instance: a frozen dataclass's own __init__ sets each through
        # object.__setattr__, twice the cost, and a cold derivation makes thousands of layouts
        d = self.__dict__
        d["name"], d["dims"], d["axes"], d["unreduced"], d["dtype"] = name, dims, axes, unreduced, dtype

    @staticmethod
    def of(name, dims, axes=None, unreduced=(), dtype=DEFAULT_DTYPE) -> "Layout":
        dims = tuple(dims)
        axes = tuple(tuple(a) for a in axes) if axes is not None else tuple(() for _ in dims)
        return Layout(name, dims, axes, frozenset(unreduced), dtype)

    # ------------------------------------------------------------------ views
    def __str__(self) -> str:
        return self.render()

    def render(self, mesh: Mesh | None = None) -> str:
        order = mesh.order(self.unreduced) if mesh is not None else tuple(sorted(self.unreduced))
        return format_tensor(self.name, self.dims, self.axes, order,
                             self.dtype if self.dtype != DEFAULT_DTYPE else None)

    @property
    def sharding_axes(self) -> tuple[str, ...]:
        return tuple(a for ax in self.axes for a in ax)

    @property
    def used_axes(self) -> frozenset[str]:
        return frozenset(self.sharding_axes) | self.unreduced

    def axes_of(self, dim: str) -> tuple[str, ...]:
        return self.axes[self.dims.index(dim)]

    def with_axes(self, axes: tuple[tuple[str, ...], ...]) -> "Layout":
        """The layout with ``axes`` instead (``dataclasses.replace`` without its generic work: the layout
        graph makes one for every move out of every layout)."""
        return Layout(self.name, self.dims, axes, self.unreduced, self.dtype)

    def with_dim_axes(self, dim: str, axes: tuple[str, ...]) -> "Layout":
        i = self.dims.index(dim)
        return replace(self, axes=self.axes[:i] + (tuple(axes),) + self.axes[i + 1:])

    def with_unreduced(self, unreduced) -> "Layout":
        return Layout(self.name, self.dims, self.axes, frozenset(unreduced), self.dtype)

    def renamed(self, name: str) -> "Layout":
        return replace(self, name=name)

    def same_sharding(self, other: "Layout") -> bool:
        """Equal up to the tensor's name."""
        return (self.dims, self.axes, self.unreduced, self.dtype) == (other.dims, other.axes,
                                                                      other.unreduced, other.dtype)

    @property
    def dtype_bytes(self):
        return dtypes.nbytes_expr(self.dtype)


def shard_count(axes, mesh: Mesh):
    """Product of the sizes of ``axes`` (numbers where bound, symbols otherwise)."""
    out = sp.Integer(1)
    for a in axes:
        out *= mesh.size_expr(a)
    return out


def local_size(layout: Layout, dim: str, mesh: Mesh, sizes=None):
    """Size of ``dim`` on one device: the dimension over the product of its axes, rounded up where the
    numbers do not divide (the block is padded, as GSPMD pads)."""
    n = _dim_size(dim, sizes)
    k = shard_count(layout.axes_of(dim), mesh)
    if n.is_Integer and k.is_Integer and n % k:
        return sp.ceiling(n / k)
    return n / k


def _dim_size(dim: str, sizes=None):
    if sizes and dim in sizes:
        return sp.Integer(sizes[dim])
    return symbols.dim(dim)


def local_shape(layout: Layout, mesh: Mesh, sizes=None) -> tuple:
    """The per-device block shape (ints when everything is bound)."""
    out = []
    for d in layout.dims:
        v = local_size(layout, d, mesh, sizes)
        out.append(int(v) if v.is_Integer else v)
    return tuple(out)


def bytes_per_device(layout: Layout, mesh: Mesh, sizes=None):
    """Bytes one device holds: ``dtype bytes x prod(local shape)``."""
    v = layout.dtype_bytes
    for d in layout.dims:
        v *= local_size(layout, d, mesh, sizes)
    return int(v) if v.is_Integer else v


def bytes_total(layout: Layout, mesh: Mesh, sizes=None):
    """Bytes across every device of the mesh (replicas counted), the book's Pop Quiz 1."""
    v = bytes_per_device(layout, mesh, sizes) * mesh.devices()
    v = sp.sympify(v)
    return int(v) if v.is_Integer else v


def global_bytes(layout: Layout, sizes=None):
    """Bytes of one whole copy of the array."""
    v = layout.dtype_bytes
    for d in layout.dims:
        v *= _dim_size(d, sizes)
    return int(v) if v.is_Integer else v


@dataclass(frozen=True)
class Padding:
    """A dimension that does not divide by its axes: each device holds ``per_device`` (rounded up), so the
    padded array has ``padded`` rows where the real one has ``size``."""

    tensor: str
    dim: str
    size: int
    axes: tuple[str, ...]
    devices: int

    @property
    def per_device(self) -> int:
        return -(-self.size // self.devices)

    @property
    def padded(self) -> int:
        return self.per_device * self.devices

    @property
    def waste(self) -> float:
        """The fraction of the padded array that is padding."""
        return 1 - self.size / self.padded

    def __str__(self) -> str:
        return (f"{self.dim}={self.size} of {self.tensor} over {format_axes(self.axes)[1:]}={self.devices} devices is "
                f"padded to {self.padded} ({self.per_device} a device; {self.waste:.1%} of it padding)")

    def as_dict(self) -> dict:
        return {"tensor": self.tensor, "dim": self.dim, "size": self.size, "axes": list(self.axes),
                "devices": self.devices, "per_device": self.per_device, "padded": self.padded, "waste": self.waste}


def padding(layout: Layout, mesh: Mesh, sizes) -> list[Padding]:
    """The dimensions of ``layout`` that do not divide by their axes, with numbers bound."""
    out = []
    for d, axes in zip(layout.dims, layout.axes):
        n = int(d) if d.isdigit() else (sizes or {}).get(d)
        k = shard_count(axes, mesh)
        if axes and n is not None and k.is_Integer and n % int(k):
            out.append(Padding(layout.name, d, n, tuple(axes), int(k)))
    return out


# -------------------------------------------------------------------------------------- validity


def layout_from_ref(ref: TensorRef, mesh: Mesh, text: str = "", sizes=None,
                    default_dtype: str = DEFAULT_DTYPE, strict: bool = False) -> Layout:
    """Build and validate a :class:`Layout` from the notation, errors pointing at the text."""
    layout = Layout(ref.name, tuple(d.name for d in ref.dims), tuple(d.axes for d in ref.dims),
                    frozenset(ref.unreduced), ref.dtype or default_dtype)
    spans = {d.name: d.span for d in ref.dims}
    check_layout(layout, mesh, sizes, text=text, spans=spans, span=ref.span, uspan=ref.unreduced_span,
                 unreduced_order=ref.unreduced, strict=strict)
    return layout


def _check_unreduced(layout: Layout, mesh: Mesh, order, where_axis: dict[str, str], fail) -> None:
    """The unreduced axes, in the order written: each on the mesh, listed once, and sharding no dimension."""
    seen = set()
    for a in order:
        if a not in mesh:
            raise fail(f"unknown mesh axis {a!r} in the unreduced axes of {layout.name}",
                       hint=f"the mesh has axes {', '.join(mesh.names) or '(none)'}")
        if a in seen:
            raise fail(f"mesh axis {a!r} is listed twice as unreduced in {layout.name}")
        seen.add(a)
        if a in where_axis:
            raise fail(f"mesh axis {a!r} both shards dimension {where_axis[a]} of {layout.name} and is "
                       f"unreduced", hint="an axis that holds partial sums cannot also split a dimension")


def check_layout(layout: Layout, mesh: Mesh, sizes=None, *, text: str = "", spans=None,
                 span: Span = NO_SPAN, uspan: Span = NO_SPAN, unreduced_order=(), strict: bool = False) -> None:
    """Raise :class:`ShardingError` naming the axis and the tensor when ``layout`` is invalid; with
    ``strict``, a dimension that does not divide by its axes is invalid too (otherwise it is padded)."""
    spans = spans or {}

    def fail(msg, where: Span, hint=None):
        return ShardingError(msg, text=text or None, line=where.line or None,
                             column=where.column or None, width=where.width, hint=hint)

    where_axis: dict[str, str] = {}
    for d, axes in zip(layout.dims, layout.axes):
        sp_ = spans.get(d, span)
        for a in axes:
            if a not in mesh:
                run = "".join(axes)
                hint = (f"multi-letter axis names need braces: write {d}_{{{run}}}" if run in mesh and len(run) > 1
                        else f"the mesh has axes {', '.join(mesh.names) or '(none)'}")
                raise fail(f"unknown mesh axis {a!r} in dimension {d} of {layout.name}", sp_, hint=hint)
            if a in where_axis:
                other = where_axis[a]
                if other == d:
                    run = "".join(axes)
                    raise fail(f"mesh axis {a!r} appears twice in dimension {d} of {layout.name}", sp_,
                               hint=f"a mesh axis is one letter, or a name in braces: {d}_{{{run}}}" if
                               len(run) > 2 else None)
                raise fail(f"mesh axis {a!r} shards two dimensions of {layout.name} ({other} and {d})",
                           sp_, hint="a mesh axis may shard at most one dimension of a tensor; "
                                     "gather one of them first")
            where_axis[a] = d
        if d.isdigit() and axes:
            raise fail(f"dimension {d} of {layout.name} is a literal size and cannot be sharded", sp_)
    _check_unreduced(layout, mesh, unreduced_order or sorted(layout.unreduced), where_axis,
                     lambda msg, hint=None: fail(msg, uspan or span, hint))
    if sizes and strict:
        for d, axes in zip(layout.dims, layout.axes):
            if not axes:
                continue
            n = sizes.get(d) if not d.isdigit() else int(d)
            parts = shard_count(axes, mesh)
            if n is not None and parts.is_Integer and n % int(parts) != 0:
                raise fail(f"dimension {d}={n} of {layout.name} does not divide by {format_axes(axes)[1:]}"
                           f"={int(parts)} devices", spans.get(d, span),
                           hint="without --strict it is planned padded, each device holding the size rounded up")
