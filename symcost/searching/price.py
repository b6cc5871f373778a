"""Pricing candidates: each one planned by the engine, its totals made numbers once and kept as
vectorised functions of the symbols a sweep varies.

    >>> from symcost.searching.space import Space
    >>> s = Space.of("param W[D, F]\\nOut[B, F] = In[B, D] *_D W[D, F]", "X=4")
    >>> p = price(s, next(iter(s.candidates())), dims={"B": 4096, "D": 8192, "F": 8192}, hw="tpu-v5p")
    >>> p.layouts, p.bound
    ({'W': 'W[D, F]', 'In': 'In[B, D]', 'Out': 'Out[B, F]'}, 'comms')

The symbolic work a candidate needs (its plan, its closed-form totals) is done once; what varies with the
numbers -- the step time over a range of batch sizes -- is a NumPy function of the closed form, built once
per distinct expression (:func:`symcost.numeric.over`, used by :func:`curve`), so a sweep of
every candidate over hundreds of points is one array evaluation a candidate.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from ..errors import SymcostError
from ..memory import memory_per_device
from ..notation import Declaration
from ..numeric import over
from ..program import derive_program
from .space import Candidate, Space

BOUNDS = ("compute", "HBM", "comms")


@dataclass(frozen=True)
class Priced:
    """A candidate, its plan and its numbers at the bound sizes."""

    candidate: Candidate
    layouts: dict = field(compare=False)
    plan: object = field(compare=False, repr=False)
    t_step: float = 0.0
    t_math: float = 0.0
    t_hbm: float = 0.0
    t_comms: float = 0.0
    memory_bytes: float | None = None
    memory_expr: object = field(default=None, compare=False, repr=False)
    fits: bool = True
    description: str = ""

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
                "fits": self.fits, "collectives": [s.signature() for s in self.plan.collectives]}


def price(space: Space, cand: Candidate, *, dims=None, hw=None, backward: bool = False, overlap=True,
          moves=None) -> Priced | None:
    """The candidate planned and priced by the engine (:func:`symcost.program.derive_program`); None when
    the engine refuses it (a sharding it cannot plan)."""
    prog = space.program_for(cand)
    try:
        plan = derive_program(prog, space.mesh, dims, hw, backward=backward, overlap=overlap, moves=moves,
                              alternatives=False)
    except SymcostError:
        return None
    num = plan.numbers()
    if num is None:
        return None
    vals = [num.t_step, num.t_math, num.t_hbm, num.t_comms]
    mem = dict(plan.memory).get("total") if plan.memory else None
    if mem is None:      # forward only: the parameters a device holds
        params = [t.name for st in prog.statements if isinstance(st, Declaration) for t in st.tensors]
        mem = memory_per_device(plan, params or None, grad_bytes=0, optimizer_bytes=0)["total"]
    held = plan.evaluate(mem)
    hbm = getattr(plan.hardware, "hbm_bytes", None)
    fits = held is None or hbm is None or held <= hbm
    return Priced(cand, space.layouts(cand), plan, *vals, held, mem, fits, cand.describe(space.batch, space.activation_dims))


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
