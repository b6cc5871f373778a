"""Numeric prices that steer the search: a :class:`Ranker` is a value (mesh, sizes, hardware figures,
achieved efficiency, objective, overlap policy, allowed moves), so everything cached about it is keyed by
that value. With a preset's achieved efficiency every operation is weighed as :func:`symcost.pricing.totals`
counts it, its kernel's floor included (:func:`symcost.pricing.alone`): a route of three collectives pays
three floors, one of one collective a single one.

    >>> from symcost.mesh import parse_mesh
    >>> r = Ranker.make(parse_mesh("X=4"), {"I": 256, "J": 8192})
    >>> r == Ranker.make(parse_mesh("X=4"), {"J": 8192, "I": 256})
    True

Unbound sizes rank at :data:`~symcost.env.RANKING_DEFAULTS`. The layout graph's edges do not depend on
sizes, so rankers that differ only in sizes share them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from .. import caching
from ..binding import BoundProgram
from ..collectives import RULES, Move, moves_from
from ..einsum import LocalEinsum
from ..env import RANKING_DEFAULTS, Env
from ..errors import UsageError
from ..layout import Layout
from ..mesh import Mesh
from ..pricing import alone, op_cost, policy, step_floor, totals

OBJECTIVES = ("time", "comms")
TIE_BREAK = 1e-6


@dataclass(frozen=True)
class Ranker:
    """Prices operations with floats for the search. ``objective``: ``time`` (default) or ``comms``."""

    mesh: Mesh
    sizes: tuple = ()                  # sorted (name, size) pairs
    constants: tuple = ()              # sorted (figure, value) pairs
    objective: str = "time"
    overlap: str = "program"
    moves: tuple | None = None         # the move kinds the search may insert (None: every kind)
    efficiency: object = None          # a preset's achieved Efficiency (None: the book's ideal machine)
    _hash: int = field(default=0, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "_hash", hash((self.mesh, self.sizes, self.constants, self.objective,
                                                self.overlap, self.moves, self.efficiency)))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def make(cls, mesh: Mesh, sizes=None, constants=None, objective: str = "time", overlap: str = "program",
             moves=None, efficiency=None) -> "Ranker":
        return _interned(cls(mesh, tuple(sorted((sizes or {}).items())), tuple(sorted((constants or {}).items())),
                             objective, overlap, None if moves is None else tuple(moves),
                             None if efficiency is None or efficiency.ideal else efficiency))

    def with_moves(self, moves) -> "Ranker":
        return _with_moves(self, None if moves is None else tuple(moves))

    @cached_property
    def env(self) -> Env:
        return Env.numeric(self.mesh, dict(self.sizes), dict(self.constants), self.efficiency)

    def edges(self, lay: Layout) -> tuple:
        """The allowed moves out of ``lay`` with their search weights."""
        return _weighted_edges(self, lay)

    def moves_out(self, lay: Layout) -> tuple:
        """The allowed moves out of ``lay`` (price the ones a search needs with :meth:`weight`)."""
        return _edges(self.mesh, self.moves, lay)

    def move(self, m: Move) -> float:
        """A move's time in seconds (latency floor included)."""
        return _times(self, m)[0]

    def weight(self, m: Move) -> float:
        """A move's weight in the search: its time, a kind's premium, and a millionth of its throughput term
        so that, where latency floors make two routes equally fast, the one that moves fewer bytes wins."""
        return _weight(self, m)

    def einsum(self, e) -> float:
        return _einsum_time(self, e)

    def moved(self, ops) -> float:
        """The throughput time of the moves among ``ops`` (what a route costs without latency floors)."""
        move_time, for_dims = caching.resolved(_move_time), caching.resolved(_for_dims)
        return sum(_times(self, m, move_time, for_dims)[1] for m in ops if not isinstance(m, LocalEinsum))

    def total(self, ops) -> float:
        """The objective of a whole plan: its step time under the overlap policy (or, with the ``comms``
        objective, its communication time with compute as a tie-break). A step off the critical path (a
        backward pass's weight gathers and gradient reductions) is ranked by :meth:`Step.ranked
        <symcost.trace.Step.ranked>`."""
        cost = caching.resolved(_op_cost)
        return self.objective_of(self.totals_of(cost(self, op) for op in ops))

    def least(self, ops) -> float | None:
        """A lower bound of :meth:`total` that skips the dependency graph: ``max(T_math, T_hbm, the busiest
        axis's communication)`` (:func:`~symcost.pricing.step_floor`), where the objective is the step
        time under the ``program`` policy with no per-kernel floor; None otherwise."""
        if self.objective != "time" or self.overlap != "program" or self.env.t_kernel != 0:
            return None
        cost = caching.resolved(_op_cost)       # a route of every plan a chain weighs: called very often
        return step_floor([cost(self, op) for op in ops], self.env)

    def cost(self, op):
        """An operation's :class:`~symcost.pricing.OpCost` in numbers at the ranking sizes."""
        return _op_cost(self, op)

    def totals_of(self, costs):
        """The :class:`~symcost.pricing.Totals` of operations' costs in numbers (as :meth:`cost` gives)."""
        return totals(costs, self.env, self.overlap)

    def objective_of(self, t) -> float:
        """The objective of a plan's numeric :class:`~symcost.pricing.Totals`."""
        if self.objective == "comms":
            return t.t_comms + 1e-9 * max(t.t_math, t.t_hbm)
        return t.t_step


@caching.memoize(maxsize=256)
def _interned(ranker: Ranker) -> Ranker:
    """One instance of each ranker value: the caches keyed by a ranker then find it by identity, without
    comparing meshes and sizes field by field (every plan of a search makes its own)."""
    return ranker


@caching.memoize(maxsize=256)
def _with_moves(ranker: Ranker, moves: tuple | None) -> Ranker:
    """The ranker with other moves allowed (kept: each backward pass a search takes asks it of its
    ranker, whose hash is kept, where a new ranker would hash its mesh and sizes again)."""
    return _interned(Ranker(ranker.mesh, ranker.sizes, ranker.constants, ranker.objective, ranker.overlap, moves,
                            ranker.efficiency))


@caching.memoize(maxsize=4096)
def _for_dims(ranker: Ranker, dims: tuple) -> Ranker:
    """The ranker with the sizes of ``dims`` alone (and of the mesh's axes and link counts): a move prices
    the blocks of its layout, whose dimensions are ``dims``, and reads no other size. Rankers that differ in
    other sizes (a serving search's batches, a layer's sequence length where the tensor has none) then share
    its moves' weights; the weights are the same numbers."""
    keep = ranker.mesh.size_names.union(dims)
    sizes = tuple(kv for kv in ranker.sizes if kv[0] in keep)
    if len(sizes) == len(ranker.sizes):
        return ranker
    return _interned(Ranker(ranker.mesh, sizes, ranker.constants, ranker.objective, ranker.overlap, ranker.moves,
                            ranker.efficiency))


@caching.memoize(maxsize=2048)
def _op_cost(ranker: Ranker, op):
    """An operation's cost in numbers (kept: the runner-up plans a chain weighs share most operations)."""
    return op_cost(op, ranker.env)


@caching.memoize(maxsize=1024)
def _einsum_time(ranker: Ranker, e) -> float:
    """A local einsum's search weight (a search prices the same einsum again for every plan that has it)."""
    t = alone(_op_cost(ranker, e), ranker.env).seconds
    return t * 1e-9 if ranker.objective == "comms" else t


@caching.memoize(maxsize=4096)
def _edges(mesh: Mesh, allowed, lay: Layout) -> tuple:
    """The moves out of ``lay``: those out of its shape (the layout without its name, kept: the tensors of
    one shape -- an activation, its gradient, the output -- share them), each with ``lay``'s name."""
    if not lay.name:
        return tuple(moves_from(lay, mesh, allowed))
    name = lay.name
    return tuple(Move(m.kind, m.axes, lay, Layout(name, m.after.dims, m.after.axes, m.after.unreduced, m.after.dtype),
                      m.distance) for m in _edges(mesh, allowed, _nameless(lay)))


def _nameless(lay: Layout) -> Layout:
    return Layout("", lay.dims, lay.axes, lay.unreduced, lay.dtype)


@caching.memoize(maxsize=8192)
def _weighted_edges(ranker: Ranker, lay: Layout) -> tuple:
    """Each move out of ``lay`` with its weight, as :meth:`Ranker.weight` gives it: the weights of its
    shape's moves (:func:`_edges`), which do not depend on the tensor's name."""
    return tuple(zip(_edges(ranker.mesh, ranker.moves, lay), _shape_weights(_for_dims(ranker, lay.dims),
                                                                            _nameless(lay))))


@caching.memoize(maxsize=8192)
def _shape_weights(ranker: Ranker, shape: Layout) -> tuple:
    """The weights of the moves out of a nameless layout, in :func:`_edges`' order, each from the move's
    time (kept by its name-free terms)."""
    move_time = caching.resolved(_move_time)
    out = []
    for m in _edges(ranker.mesh, ranker.moves, shape):
        before = m.before
        t, bw = move_time(ranker, m.kind, m.axes, before.dims, before.axes, m.after.axes, before.dtype, m.distance)
        out.append(_weighed(t, bw, m))
    return tuple(out)


@caching.memoize(maxsize=65536)
def _weight(ranker: Ranker, m: Move) -> float:
    t, bw = _times(ranker, m)
    return _weighed(t, bw, m)


def _weighed(t: float, bw: float, m: Move) -> float:
    """A move's search weight from its time ``t`` and throughput term ``bw`` (see :meth:`Ranker.weight`)."""
    return t * (1 + m.rule.premium) + TIE_BREAK * bw


def _times(ranker: Ranker, m: Move, move_time=None, for_dims=None) -> tuple[float, float]:
    """(time, throughput term) of the move ``m``, kept by the sizes its layout reads (:func:`_for_dims`);
    ``move_time`` and ``for_dims``: the two kept functions, resolved once by a loop that calls this often."""
    b = m.before
    return (move_time or _move_time)((for_dims or _for_dims)(ranker, b.dims), m.kind, m.axes, b.dims, b.axes,
                                     m.after.axes, b.dtype, m.distance)


@caching.memoize(maxsize=16384)
def _move_time(ranker: Ranker, kind, axes, dims, before, after, dtype, distance) -> tuple[float, float]:
    m = Move(kind, axes, Layout("", dims, before, frozenset(), dtype), Layout("", dims, after, frozenset(), dtype),
             distance)
    c = alone(op_cost(m, ranker.env), ranker.env)
    return float(c.t_comms), float(c.throughput)


# ---------------------------------------------------------------- the ranker a bound program is planned with

#: the moves the engine inserts in a strategy (a program with ``param`` declarations): the book's
#: algorithms gather, slice and reduce; an AllToAll or a send is part of a strategy only where written.
STRATEGY_MOVES = ("AllGather", "ReduceScatter", "AllReduce", "Slice")
MOVE_MODES = ("auto", "all", "strategy", "none")


def allowed_moves(bound: BoundProgram, moves) -> tuple | None:
    """The move kinds the engine may insert (None: every kind)."""
    if moves in (None, "auto"):
        return STRATEGY_MOVES if bound.is_strategy else None
    if moves == "all":
        return None
    if moves == "strategy":
        return STRATEGY_MOVES
    if moves == "none":  # the program is taken literally: every collective must be written
        return ()
    kinds = tuple(k.strip() for k in moves.split(",")) if isinstance(moves, str) else tuple(moves)
    insertable = [k for k, r in RULES.items() if r.inserted]
    bad = [k for k in kinds if k not in insertable]
    if bad:
        raise UsageError(f"unknown move mode {bad[0]!r}; use {', '.join(MOVE_MODES)} or a comma-separated "
                         f"list of {', '.join(insertable)}")
    return kinds


def ranking_sizes(bound: BoundProgram) -> dict[str, int]:
    """The sizes candidate plans are compared at: bound sizes, then ``rank`` statements, then the ranking
    default per device for a dimension the program splits (a batch split over a whole pod ranks as 8192
    tokens a chip, not 8192 in all), then the ranking default."""
    per, axis = int(RANKING_DEFAULTS["dim"]), int(RANKING_DEFAULTS["axis"])
    split = {d: per * (n or axis) for d, n in bound.split_over().items()}
    return {**split, **bound.ranking_sizes}


def ranker_for(bound: BoundProgram, *, overlap=True, objective: str = "time", moves=None, efficiency=False) -> Ranker:
    if objective not in OBJECTIVES:
        raise UsageError(f"objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
    hw = bound.hardware
    constants = hw.bindings("bf16") if hw is not None else None
    achieved = hw.efficiency if efficiency and hw is not None and constants else None
    return Ranker.make(bound.mesh, ranking_sizes(bound), constants, objective, policy(overlap),
                       allowed_moves(bound, moves), achieved)
