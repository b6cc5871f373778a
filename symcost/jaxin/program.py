"""What a traced function becomes before it is written out: tensors (a name, a dtype, the dimensions of
its axes, a layout) and statements over them, in the function's order.

A tensor's axes are union-find nodes of :class:`~symcost.jaxin.dims.Dims`; what they finally are (their
finest factors, their names) is settled only when the whole function has been read, so writing the program
(:mod:`symcost.jaxin.write`) comes last.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)
class Tensor:
    """A tensor of the program (identity matters: two with one name are one)."""

    base: str                        # the name's stem; the writer numbers them
    dtype: str
    nodes: tuple[int, ...]           # a dimension node per axis
    layout: tuple[tuple[str, ...], ...]   # the mesh axes splitting each axis
    unreduced: tuple[str, ...] = ()
    input: bool = False
    param: bool = False
    name: str = ""                   # set by the writer (inputs: the argument's name)
    read: bool = False               # a statement has read it (its layout can no longer be constrained)
    same: Tensor | None = None     # a collective's result: the same tensor, laid out anew


@dataclass(eq=False)
class Val:
    """A value of the jaxpr: which tensor it reads as (None: a constant or a scalar, which costs nothing),
    its axes and where it is split. Transposes, reshapes, casts and broadcasts give new values of the same
    tensor."""

    shape: tuple[int, ...]
    nodes: tuple[int, ...]
    layout: tuple[tuple[str, ...], ...]
    tensor: Tensor | None = None
    unreduced: tuple[str, ...] = ()
    stacked: str = ""                # a scan's stacked output (where): cannot be read by a statement


@dataclass
class Stmt:
    """``einsum`` (out = product of ins, what they share and out lacks summed), ``apply`` (an elementwise
    rule), ``collective`` (kind over axes: ``before`` -> out, the same tensor) or ``comment``."""

    kind: str
    out: Tensor | None = None
    ins: tuple = ()
    rule: str = ""
    reduce: int | None = None
    axes: tuple[str, ...] = ()
    before: tuple = ()               # a collective's operand: (layout, unreduced)
    text: str = ""


@dataclass
class Read:
    """Everything a function was read into."""

    statements: list = field(default_factory=list)
    inputs: list = field(default_factory=list)        # Tensors, in argument order
    outputs: list = field(default_factory=list)       # Vals
    policies: list = field(default_factory=list)      # (checkpoint policy name, where)
    notes: list = field(default_factory=list)
