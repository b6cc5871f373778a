"""The syntax tree: immutable records of what the user wrote, with source spans.

    >>> str(TensorRef("A", (DimRef("I", ("X", "Y")), DimRef("J")), ("Z",), "int8"))
    'A:int8[I_XY, J]{U_Z}'

Spans point back at the text (for carets) and are left out of equality. These records know nothing of
meshes or costs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

#: the collectives a user may write (the engine's move kinds live in symcost.collectives)
COLLECTIVE_KINDS = ("AllGather", "ReduceScatter", "AllReduce", "AllToAll", "Permute", "Send", "ToHost", "ToDevice")
#: the written moves that name no mesh axis: between a chip's HBM and its host's memory
HOST_KINDS = ("ToHost", "ToDevice")


@dataclass(frozen=True)
class Span:
    """Where a piece of syntax stands in the source text (1-based line and column)."""

    line: int
    column: int
    end_line: int
    end_column: int

    @property
    def width(self) -> int:
        return max(1, self.end_column - self.column) if self.end_line == self.line else 1


NO_SPAN = Span(0, 0, 0, 0)


def format_axes(axes, shift: int | None = None) -> str:
    """The one spelling of a tuple of mesh axes after a dimension or a collective (``shift``: a send's
    hops, written after the axes when it is not one).

    >>> format_axes(("X",)), format_axes(("X", "Y")), format_axes(("data", "model")), format_axes(())
    ('_X', '_XY', '_{data,model}', '')
    >>> format_axes(("Z",), 2), format_axes(("Z",), -1)
    ('_{Z,2}', '_{Z,-1}')
    """
    axes = tuple(axes)
    if shift is not None:
        return "_{" + ",".join(axes + (str(shift),)) + "}"
    if not axes:
        return ""
    if all(len(a) == 1 for a in axes):
        return "_" + "".join(axes)
    return "_{" + ",".join(axes) + "}"


def format_tensor(name: str, dims, axes, unreduced=(), dtype: str | None = None) -> str:
    """``format_tensor('A', 'IJ', [('X',), ()], ('Y',))`` is ``'A[I_X, J]{U_Y}'``: the one tensor formatter."""
    dt = f":{dtype}" if dtype else ""
    body = ", ".join(d + format_axes(a) for d, a in zip(dims, axes))
    out = f"{name}{dt}[{body}]"
    if unreduced:
        out += "{U" + format_axes(unreduced) + "}"
    return out


@dataclass(frozen=True)
class DimRef:
    """One dimension of a tensor as written: ``B_XY`` is ``DimRef('B', ('X', 'Y'))``.

    A dimension written as a number (``KV[2, B_Z, S, K_Y, H]``) has ``size`` set and never carries axes.
    """

    name: str
    axes: tuple[str, ...] = ()
    size: int | None = None
    span: Span = field(default=NO_SPAN, compare=False, repr=False)

    def __str__(self) -> str:
        return self.name + format_axes(self.axes)


@dataclass(frozen=True)
class TensorRef:
    """A tensor as written: name, dimensions with their axes, unreduced axes and dtype."""

    name: str
    dims: tuple[DimRef, ...]
    unreduced: tuple[str, ...] = ()
    dtype: str | None = None
    span: Span = field(default=NO_SPAN, compare=False, repr=False)
    unreduced_span: Span = field(default=NO_SPAN, compare=False, repr=False)

    @property
    def annotated(self) -> bool:
        """Written with any axes, unreduced set or dtype (a bare ``T[B, F]`` takes the layout T has)."""
        return any(d.axes for d in self.dims) or bool(self.unreduced) or self.dtype is not None

    def __str__(self) -> str:
        return format_tensor(self.name, [d.name for d in self.dims], [d.axes for d in self.dims],
                             self.unreduced, self.dtype)


@dataclass(frozen=True)
class Einsum:
    """``A * B *_D C -> Out``, ``Out = A * B``, a reshard ``A[I_X] -> A[I]`` or a bare tensor ``A[I_X]``.

    ``contract[i]`` is the explicit contraction of the i-th product (``*_D`` gives ``('D',)``), or None
    for a plain ``*`` (contract the shared dimensions that are not needed later).
    """

    operands: tuple[TensorRef, ...]
    contract: tuple[tuple[str, ...] | None, ...]
    output: TensorRef | None
    assignment: bool
    span: Span = field(default=NO_SPAN, compare=False, repr=False)
    op_spans: tuple[Span, ...] = field(default=(), compare=False, repr=False)
    output_name: str | None = None   # ``Tmp = ...``: a named result whose layout the engine chooses

    @property
    def result_name(self) -> str | None:
        return self.output.name if self.output is not None else cast(str, self.output_name)   # one of the two is set

    @property
    def tensors(self) -> tuple[TensorRef, ...]:
        return self.operands + ((self.output,) if self.output is not None else ())

    def __str__(self) -> str:
        parts = [str(self.operands[0])]
        for c, t in zip(self.contract, self.operands[1:]):
            op = "*" if c is None else "*_" + (c[0] if len(c) == 1 else "{" + ",".join(c) + "}")
            parts.append(f"{op} {t}")
        rhs = " ".join(parts)
        if self.output is None:
            return f"{self.output_name} = {rhs}" if self.output_name else rhs
        return f"{self.output} = {rhs}" if self.assignment else f"{rhs} -> {self.output}"


@dataclass(frozen=True)
class Collective:
    """An explicit collective: ``AllGather_X(A[I_X, J]) -> A[I, J]``."""

    kind: str
    axes: tuple[str, ...]
    operand: TensorRef
    output: TensorRef
    span: Span = field(default=NO_SPAN, compare=False, repr=False)
    name_span: Span = field(default=NO_SPAN, compare=False, repr=False)
    distance: int | None = None      # Send_{Z,2}: the hops each block travels (None: one)

    @property
    def tensors(self) -> tuple[TensorRef, ...]:
        return (self.operand, self.output)

    def __str__(self) -> str:
        return f"{self.kind}{format_axes(self.axes, self.distance)}({self.operand}) -> {self.output}"


@dataclass(frozen=True)
class Apply:
    """Elementwise work: ``Xn[B, T, D] = LayerNorm_D(X[B, T, D])``, ``P = Softmax_S(A[B, T, S])``.

    ``op`` names the operation (symcost.elementwise lists them); ``reduce`` is the dimension a norm,
    softmax or cross-entropy works over (its subscript), or None.
    """

    op: str
    reduce: str | None
    operands: tuple[TensorRef, ...]
    output: TensorRef | None
    output_name: str | None = None
    span: Span = field(default=NO_SPAN, compare=False, repr=False)
    name_span: Span = field(default=NO_SPAN, compare=False, repr=False)

    @property
    def result_name(self) -> str:
        return self.output.name if self.output is not None else cast(str, self.output_name)   # one of the two is set

    @property
    def tensors(self) -> tuple[TensorRef, ...]:
        return self.operands + ((self.output,) if self.output is not None else ())

    def __str__(self) -> str:
        lhs = str(self.output) if self.output is not None else self.output_name
        sub = f"_{self.reduce}" if self.reduce else ""
        return f"{lhs} = {self.op}{sub}({', '.join(str(t) for t in self.operands)})"


@dataclass(frozen=True)
class Declaration:
    """``param Win[D, F_Y], Wout[F_Y, D]``: the parameters of a program (what training differentiates)."""

    kind: str
    tensors: tuple[TensorRef, ...]
    span: Span = field(default=NO_SPAN, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.kind} " + ", ".join(str(t) for t in self.tensors)


@dataclass(frozen=True)
class Ranking:
    """``rank B=1048576, D=8192``: sizes at which to compare candidate plans when none are bound."""

    sizes: tuple[tuple[str, int], ...]
    span: Span = field(default=NO_SPAN, compare=False, repr=False)

    @property
    def tensors(self) -> tuple:
        return ()

    def __str__(self) -> str:
        return "rank " + ", ".join(f"{k}={v}" for k, v in self.sizes)


Statement = Einsum | Apply | Collective | Declaration | Ranking


@dataclass(frozen=True)
class Program:
    """A parsed program: its statements, in order, and the text they came from."""

    statements: tuple[Statement, ...]
    text: str = field(default="", compare=False, repr=False)

    def __str__(self) -> str:
        return "\n".join(str(s) for s in self.statements)

    @property
    def ranking(self) -> dict[str, int]:
        """The sizes of the program's ``rank`` statements."""
        return {k: v for s in self.statements if isinstance(s, Ranking) for k, v in s.sizes}

    def dims_named(self) -> frozenset[str]:
        """Every dimension the program's tensors name (and its ``rank`` statements size)."""
        return frozenset({d.name for st in self.statements for t in getattr(st, "tensors", ()) for d in t.dims
                          if not d.name.isdigit()} | set(self.ranking))

    def axes_named(self) -> tuple[str, ...]:
        """Every mesh axis the program names, in order of appearance."""
        names: list[str] = []
        for st in self.statements:
            dims = set()
            for t in st.tensors:
                dims |= {d.name for d in t.dims}
                for a in [a for d in t.dims for a in d.axes] + list(t.unreduced):
                    if a not in names:
                        names.append(a)
            if isinstance(st, Collective):  # ReduceScatter_{X,K}: K names a dimension, not an axis
                for a in st.axes:
                    if a not in dims and a not in names:
                        names.append(a)
        return tuple(names)
