"""Pricing candidates: each one planned by the engine, its totals made numbers once and kept as
vectorised functions of the symbols a sweep varies.

    >>> from symcost.searching.space import Space
    >>> s = Space.of("param W[D, F]\\nOut[B, F] = In[B, D] *_D W[D, F]", "X=4")
    >>> p = price(s, next(iter(s.candidates())), dims={"B": 4096, "D": 8192, "F": 8192}, hw="tpu-v5p")
    >>> p.layouts, p.bound
    ({'W': 'W[D, F]', 'In': 'In[B, D]', 'Out': 'Out[B, F]'}, 'compute')

The symbolic work a candidate needs (its plan, its closed-form totals) is done once; what varies with the
numbers -- the step time over a range of batch sizes -- is a NumPy function of the closed form, built once
per distinct expression (:func:`symcost.numeric.over`, used by :func:`curve`), so a sweep of
every candidate over hundreds of points is one array evaluation a candidate.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, partial

import sympy as sp

from ..errors import SymcostError, UsageError
from ..memory import memory_per_device
from ..notation import Declaration
from ..numeric import over
from ..program import derive_program
from .space import Candidate, Space

BOUNDS = ("compute", "HBM", "comms")


@dataclass(frozen=True)
class Priced:
    """A candidate and its numbers at the bound sizes. Its plan (and the closed form of its memory) is the
    engine's, kept when it was planned here and derived again on first use when a worker process priced
    it (:mod:`.pool`): a search reads the plans of the few candidates it shows."""

    candidate: Candidate
    layouts: dict = field(compare=False)
    t_step: float = 0.0
    t_math: float = 0.0
    t_hbm: float = 0.0
    t_comms: float = 0.0
    memory_bytes: float | None = None
    fits: bool = True
    description: str = ""
    collectives: tuple = field(default=(), compare=False)   # each collective of the plan, in the book's notation
    derive: object = field(default=None, compare=False, repr=False)   # () -> (plan, memory closed form)
    curves: tuple | None = field(default=None, compare=False, repr=False)  # (values, *over_grid there)

    @cached_property
    def plan(self):
        """The engine's plan of this candidate (:class:`~symcost.plan.Plan`)."""
        return self._derived[0]

    @cached_property
    def memory_expr(self):
        """Bytes a device holds, in closed form."""
        return self._derived[1]

    @cached_property
    def _derived(self) -> tuple:
        return self.derive()

    @property
    def bound(self) -> str:
        """What limits the step: compute, HBM or comms (the largest of the three)."""
        vals = (self.t_math, self.t_hbm, self.t_comms)
        return BOUNDS[max(range(3), key=lambda i: vals[i])]

    @property
    def compute_bound(self) -> bool:
        return self.bound == "compute"

    def objective(self, name: str) -> float:
        return {"time": self.t_step, "comms": self.t_comms,
                "memory": self.memory_bytes if self.memory_bytes is not None else 0.0}[name]

    def as_dict(self) -> dict:
        return {"layouts": dict(self.layouts), "description": self.description, "t_step": self.t_step,
                "t_math": self.t_math, "t_hbm": self.t_hbm, "t_comms": self.t_comms,
                "compute_bound": self.compute_bound, "dominant": self.bound, "memory_bytes": self.memory_bytes,
                "fits": self.fits, "collectives": list(self.collectives)}


def price(space: Space, cand: Candidate, *, dims=None, hw=None, backward: bool = False, overlap=True,
          moves=None, efficiency: bool = False) -> Priced | None:
    """The candidate planned and priced by the engine (:func:`symcost.program.derive_program`); None when
    the engine refuses it (a sharding it cannot plan). ``efficiency``: with the preset's achieved figures
    and per-kernel floor."""
    options = dict(dims=dims, hw=hw, backward=backward, overlap=overlap, moves=moves, efficiency=efficiency)
    got = planned(space, cand, **options)
    if got is None:
        return None
    plan, memory, numbers = got
    p = priced(space, cand, numbers, replanner(space, cand, options))
    p.__dict__["_derived"] = (plan, memory)       # kept: planned here
    return p


def priced(space: Space, cand: Candidate, numbers: tuple, derive, curves=None) -> Priced:
    """A :class:`Priced` from a candidate's :func:`planned` numbers; ``derive()`` gives its plan when read;
    ``curves``: ``(values, *over_grid(...) at them)`` where a worker computed them for a ``--vs`` sweep."""
    *values, collectives = numbers
    described = cand.describe(space.batch, space.activation_dims, space.has_params)
    return Priced(cand, space.layouts(cand), *values, described, collectives, derive, curves)


def over_grid(plan, memory, symbol: str, xs) -> tuple:
    """A plan's step time, communication time, compute time, HBM time and bytes a device holds over ``xs``
    (NumPy arrays) of the symbol ``symbol``, every other symbol at its number."""
    t = plan.curves(symbol, xs)
    return t.t_step, t.t_comms, t.t_math, t.t_hbm, curve(memory, plan.bindings(), symbol, xs)


def _derived(space: Space, prog, *, dims=None, hw=None, backward: bool = False, overlap=True, moves=None,
             efficiency: bool = False):
    """A candidate's program derived by the engine as a search derives it (runner-ups weighed, not kept)."""
    return derive_program(prog, space.mesh, dims, hw, backward=backward, overlap=overlap, moves=moves,
                          alternatives=False, efficiency=efficiency, choose_achieved=efficiency)


def planned(space: Space, cand: Candidate, *, dims=None, hw=None, backward: bool = False, overlap=True,
            moves=None, efficiency: bool = False):
    """``(plan, memory closed form, numbers)`` of a candidate, numbers being ``(t_step, t_math, t_hbm,
    t_comms, bytes a device holds, fits, the collectives' signatures)``; None when the engine refuses it."""
    prog = space.program_for(cand)
    try:
        plan = _derived(space, prog, dims=dims, hw=hw, backward=backward, overlap=overlap, moves=moves,
                        efficiency=efficiency)
    except SymcostError:
        return None
    num = plan.numbers()
    if num is None:
        return None
    mem = dict(plan.memory).get("total") if plan.memory else None
    if mem is None:      # forward only: the parameters a device holds
        params = [t.name for st in prog.statements if isinstance(st, Declaration) for t in st.tensors]
        mem = memory_per_device(plan, params or None, grad_bytes=0, optimizer_bytes=0)["total"]
    held = plan.evaluate(mem)
    hbm = getattr(plan.hardware, "hbm_bytes", None)
    fits = held is None or hbm is None or held <= hbm
    collectives = tuple(s.signature() for s in plan.collectives)
    return plan, mem, (num.t_step, num.t_math, num.t_hbm, num.t_comms, held, fits, collectives)


def replanner(space: Space, cand: Candidate, options: dict):
    """``() -> (plan, memory closed form)`` of a candidate planned again (``options``: :func:`price`'s)."""
    return partial(_replanned, space, cand, options)


def _replanned(space, cand, options) -> tuple:
    got = planned(space, cand, **options)
    if got is None:       # the engine priced it once: it must again
        raise SymcostError(f"{cand} could not be planned again")
    return got[:2]


def curve(expr, subs: dict, name: str, values):
    """``expr`` at every value of the symbol ``name`` (a NumPy array), every other symbol given a number
    by ``subs`` (``{Symbol: number}``, as :meth:`~symcost.plan.Plan.bindings` gives). No SymPy work once
    the expression has been compiled."""
    import numpy as np
    expr = sp.sympify(expr)
    numbers = {s.name: float(v) for s, v in subs.items()}
    values = np.asarray(values, dtype=float)
    out = over(expr, numbers, name, values)
    if out is None:
        unbound = sorted(s.name for s in expr.free_symbols if s.name != name and s.name not in numbers)
        raise ValueError(f"{expr} has the unbound symbol {unbound[0]}")
    return out.copy()


def rounded(x: float) -> float:
    """A time as a search ranks it: ten significant digits, so that equal totals summed in another order
    tie."""
    return float(f"{x:.9e}")


def none_priced(space: Space, options: dict) -> SymcostError:
    """Why no candidate could be priced: the engine's own error for the first (a notation error keeps its line
    and caret), else that some size is unbound."""
    first = next(iter(space.candidates()), None)
    if first is not None:
        try:
            _derived(space, space.program_for(first), **options)
        except SymcostError as e:
            return e
    return UsageError("no candidate could be priced: bind every size the program uses with --dims")
