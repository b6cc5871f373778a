"""What the planner returns: steps (typed operations in their context) and the trace of a program.

    >>> from symcost.collectives import Move
    >>> from symcost.layout import Layout
    >>> from symcost.mesh import parse_mesh
    >>> a = Layout.of("A", "IJ", [("X",), ()])
    >>> s = Step(Move("AllGather", ("X",), a, Layout.of("A", "IJ")), parse_mesh("X"))
    >>> s.signature(), s.bytes
    ('AllGather_X(A[I_X, J]) -> A[I, J]', 2*I*J)

A :class:`Step` is a value: an operation (a :class:`~symcost.collectives.Move` or a
:class:`~symcost.einsum.LocalEinsum`), the phase it belongs to, why it is there and whether it is on
the critical path; its closed-form costs are derived from the operation (and kept).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Union

from . import caching
from .binding import BoundProgram
from .collectives import Move
from .einsum import LocalEinsum
from .elementwise import Elementwise
from .layout import Layout
from .mesh import Mesh
from .pricing import OpCost, padded_blocks, symbolic_cost
from .rewrite import Ranker


#: what a step does: a move (a collective, a slice, a send), a local einsum, or elementwise work
Operation = Union[Move, LocalEinsum, Elementwise]


@dataclass(frozen=True)
class Step:
    """One step of a plan: a collective (``kind`` AllGather, ...) or a local ``Einsum``."""

    op: Operation
    mesh: Mesh = field(compare=False, repr=False)
    phase: str = "forward"
    why: str = ""
    critical: bool = True   # on the critical path (the book marks weight gathers / reductions as off it)
    sizes: tuple = field(default=(), compare=False, repr=False)   # the bound sizes (padded blocks round up)
    efficient: bool = False  # priced with achieved efficiency (the eta symbols)

    def __init__(self, op: Operation, mesh: Mesh, phase: str = "forward", why: str = "", critical: bool = True,
                 sizes: tuple = (), efficient: bool = False):
        # written straight into the instance (as a Layout's): a search makes tens of thousands of steps
        d = self.__dict__
        d["op"], d["mesh"], d["phase"], d["why"], d["critical"], d["sizes"], d["efficient"] = \
            op, mesh, phase, why, critical, sizes, efficient

    def marked(self, phase: str, critical: bool) -> "Step":
        """The step in ``phase``, on the critical path or off it (``dataclasses.replace`` without its
        generic work: a backward pass marks thousands of steps in a search)."""
        return self._as(phase, critical, self.efficient)

    def achieved(self) -> "Step":
        """The step priced at the preset's achieved efficiency (as :meth:`marked`: ``derive --efficiency`` and
        the serving models mark every step of every plan)."""
        return self._as(self.phase, self.critical, True)

    def _as(self, phase: str, critical: bool, efficient: bool) -> "Step":
        return Step(self.op, self.mesh, phase, self.why, critical, self.sizes, efficient)

    @property
    def cost(self) -> OpCost:
        """The step's closed-form costs (kept by the planning context, not on the step: a step is a value)."""
        return _cost(self.op, self.mesh, self.sizes, self.efficient, self.critical)

    @property
    def is_einsum(self) -> bool:
        return isinstance(self.op, LocalEinsum)

    @property
    def is_elementwise(self) -> bool:
        return isinstance(self.op, Elementwise)

    @property
    def is_compute(self) -> bool:
        """Local work: an einsum or elementwise work."""
        return self.is_einsum or self.is_elementwise

    @property
    def is_collective(self) -> bool:
        """A move that communicates (not an einsum, not elementwise work, not a local slice)."""
        return isinstance(self.op, Move) and self.op.rule.communicates

    @property
    def kind(self) -> str:
        return self.op.kind

    @property
    def axes(self) -> tuple[str, ...]:
        return self.op.axes if isinstance(self.op, Move) else self.op.mesh_axes(self.mesh)

    @property
    def tensor(self) -> str:
        return self.op.tensor

    @property
    def label(self) -> str:
        """The move as written (``AllGather_X``, ``Send_{Z,2}``, ``ToHost``), or ``Einsum``."""
        return "Einsum" if isinstance(self.op, LocalEinsum) else self.op.label

    @property
    def before(self) -> str:
        if isinstance(self.op, Move):
            return self.op.before.render(self.mesh)
        return (" * " if self.is_einsum else ", ").join(t.render(self.mesh) for t in self.op.inputs)

    @property
    def after(self) -> str:
        return self.result.render(self.mesh)

    @property
    def result(self) -> Layout:
        """The layout this step leaves its tensor in."""
        return self.op.after if isinstance(self.op, Move) else self.op.output

    def ranked(self, ranker: Ranker):
        """The step's cost in numbers at the ranker's sizes, off the critical path where the step is
        (kept by the planning context: a whole plan is ranked again for each of its tied alternatives,
        which share most of their steps)."""
        return _ranked(self.op, self.critical, ranker)

    bytes = property(lambda self: self.cost.bytes)
    flops = property(lambda self: self.cost.flops)
    seconds = property(lambda self: self.cost.seconds)
    t_math = property(lambda self: self.cost.t_math)
    t_hbm = property(lambda self: self.cost.t_hbm)
    t_comms = property(lambda self: self.cost.t_comms)

    def signature(self) -> str:
        """The step in the book's notation, e.g. ``AllGather_X(A[I_X, J]) -> A[I, J]`` (kept by the planning
        context: a search reads the signatures of every candidate's collectives, most of them shared)."""
        return _signature(self.op, self.mesh)

    def _written(self) -> str:
        if self.is_einsum:
            return f"{self.before} -> {self.after}"
        if isinstance(self.op, Elementwise):
            return self.op.signature(self.mesh)
        return f"{self.label}({self.before}) -> {self.after}"

    def as_dict(self) -> dict:
        return {"kind": self.kind, "axes": list(self.axes), "tensor": self.tensor, "before": self.before,
                "after": self.after, "phase": self.phase, "bytes": str(self.bytes), "flops": str(self.flops),
                "seconds": str(self.seconds), "why": self.why, "critical": self.critical}


@caching.memoize(maxsize=65536)
def _cost(op, mesh: Mesh, sizes: tuple, efficient: bool, critical: bool) -> OpCost:
    c = symbolic_cost(op, mesh, padded_blocks(op, mesh, sizes), efficient)
    return c if critical or c.local else c._replace(critical=False)


@caching.memoize(maxsize=65536)
def _signature(op, mesh: Mesh) -> str:
    return Step(op, mesh)._written()


@caching.memoize(maxsize=65536)
def _ranked(op, critical: bool, ranker: Ranker):
    c = ranker.cost(op)
    return c if critical or c.local else c._replace(critical=False)


@dataclass(frozen=True)
class Use:
    """A statement's operation, in program order, as the backward pass reads it: the local einsum it
    ran, or the collective written there (``op`` taking the operand's layout to the output's)."""

    op: Operation
    line: int
    written: bool = False


class Tie(NamedTuple):
    """An einsum with equally fast plans (the backward pass may choose among them): its statement and
    line, how many plans tie, the chain planner's plans (the tied ones first), the layout they reach,
    which one the trace took, and where its steps and uses lie in the trace (``(start, end)``)."""

    at: int
    line: int
    n: int
    plans: tuple = ()
    target: object = None
    chosen: int = 0
    steps: tuple[int, int] = (0, 0)
    uses: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class Trace:
    """The planner's answer for a whole program: its steps, the alternatives it weighed, and what the
    backward pass needs (every tensor's first and last layout, the parameters, who produced what)."""

    bound: BoundProgram
    ranker: Ranker
    steps: tuple[Step, ...]
    alternatives: tuple[tuple[tuple[Step, ...], tuple[Step, ...]], ...]   # (alternative, chosen)
    layouts: tuple[tuple[str, Layout], ...]      # every tensor's current layout
    initial: tuple[tuple[str, Layout], ...]      # every tensor's first layout
    params: tuple[tuple[str, Layout], ...]       # declared parameters, as declared
    produced: tuple[tuple[str, int], ...]        # tensors computed by the program, and the line
    uses: tuple[Use, ...]
    compute_dtype: str
    notes: tuple[str, ...] = ()                  # what the planner wants the reader to know (a bounded search)
    ties: tuple[Tie, ...] = ()                   # einsums with equally fast plans

    @property
    def mesh(self) -> Mesh:
        return self.bound.mesh

    @property
    def known(self) -> dict[str, Layout]:
        return dict(self.layouts)

    @property
    def first(self) -> dict[str, Layout]:
        return dict(self.initial)

    @property
    def param_layouts(self) -> dict[str, Layout]:
        return dict(self.params)

    @property
    def producers(self) -> dict[str, int]:
        return dict(self.produced)

    @property
    def inputs(self) -> tuple[str, ...]:
        """Tensors the program reads but does not compute."""
        made = self.producers
        return tuple(n for n, _ in self.initial if n not in made)
