"""The other plans the planner weighed for a statement: their steps, their costs beside the plan's, and
when each one's collectives would take less time (:attr:`symcost.plan.Plan.alternatives`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import sympy as sp

from . import caching
from .env import Env
from .mesh import Mesh
from .pricing import Totals, symbolic_cost, totals
from .rewrite import Ranker
from .solve import wins_when
from .trace import Step

ZERO = sp.Integer(0)


def summarize(steps) -> str:
    """``AllGather_Y(In); einsum -> T1[B_X, F_Y]; ReduceScatter_Y(Out)``: collectives and einsums in order."""
    parts = []
    for s in steps:
        if s.is_einsum:
            parts.append(f"einsum -> {s.after}")
        elif s.is_elementwise:
            parts.append(f"{s.kind} -> {s.after}")
        elif s.is_collective:
            parts.append(f"{s.label}({s.tensor})")
    return "; ".join(parts) if parts else "local only"


@caching.memoize(maxsize=4096)
def _wins_when(alt_ops, best_ops, mesh) -> str | None:
    def bw(ops):
        return sum((symbolic_cost(o, mesh).throughput for o in ops), ZERO)
    return wins_when(bw(alt_ops), bw(best_ops))


@dataclass(frozen=True)
class Alternative:
    """Another plan the rewriter weighed, its costs and when its collectives would take less time."""

    steps: tuple[Step, ...]
    chosen: tuple[Step, ...] = field(compare=False, repr=False)
    mesh: Mesh = field(compare=False, repr=False)
    overlap: str = "program"
    ranker: Ranker | None = field(default=None, compare=False, repr=False)   # what the planner ranked it with

    @cached_property
    def totals(self) -> Totals:
        return totals((s.cost for s in self.steps), Env.symbolic(self.mesh), self.overlap)

    @property
    def summary(self) -> str:
        return summarize(self.steps)

    @property
    def t_comms(self) -> sp.Expr:
        return self.totals.t_comms

    @property
    def t_step(self) -> sp.Expr:
        return self.totals.t_step

    @property
    def comm_bytes(self) -> sp.Expr:
        """Sum of V over the alternative's collectives."""
        return sum((s.bytes for s in self.steps if s.is_collective), ZERO)

    @property
    def wins_when(self) -> str | None:
        """When this alternative's collectives take less time than the chosen plan's (worked out on use)."""
        return _wins_when(tuple(s.op for s in self.steps if s.is_collective),
                          tuple(s.op for s in self.chosen if s.is_collective), self.mesh)

    @cached_property
    def ranked(self) -> dict | None:
        """The alternative and the chosen steps in numbers as the planner ranked them (unbound sizes at its
        ranking sizes, docs/how-it-decides.md): ``{"t_step", "plan_t_step", "loses_on"}``, ``loses_on`` the
        term (``t_math``, ``t_hbm``, ``t_comms``) the alternative spends the most more of; None without a
        ranker or where the alternative is not slower."""
        if self.ranker is None:
            return None
        r = self.ranker
        mine, theirs = (r.totals_of([r.cost(s.op) for s in steps]) for steps in (self.steps, self.chosen))
        if mine.t_step <= theirs.t_step:
            return None
        more = {k: float(getattr(mine, k) - getattr(theirs, k)) for k in ("t_math", "t_hbm", "t_comms")}
        return {"t_step": float(mine.t_step), "plan_t_step": float(theirs.t_step),
                "loses_on": max(more, key=lambda k: more[k])}

    @property
    def statement(self) -> str:
        """The tensor the statement this alternative plans writes (its plan's last step's)."""
        return self.chosen[-1].tensor if self.chosen else ""

    @property
    def chosen_summary(self) -> str:
        """:attr:`summary` of the steps the plan took for the same statement."""
        return summarize(self.chosen)

    @cached_property
    def chosen_totals(self) -> Totals:
        """The totals of the steps the plan took for the same statement."""
        return totals((s.cost for s in self.chosen), Env.symbolic(self.mesh), self.overlap)

    def as_dict(self) -> dict:
        return {"statement": self.statement, "summary": self.summary, "t_comms": str(self.t_comms),
                "t_step": str(self.t_step), "comm_bytes": str(self.comm_bytes), "wins_when": self.wins_when,
                "ranked": self.ranked, "chosen": self.chosen_summary,
                "chosen_t_step": str(self.chosen_totals.t_step)}
