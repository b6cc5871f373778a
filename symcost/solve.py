"""Solving: critical values where compute meets communication or memory (book Parts 3, 5, 7).

    >>> import symcost
    >>> plan = symcost.derive("In[B_X, D] * W[D, F] -> Out[B_X, F]", mesh="X")
    >>> plan.t_math
    2*B*D*F/(C*X)
"""
from __future__ import annotations

import sympy as sp

from . import symbols
from .cost import Env, Move, collective_bandwidth_time, smax
from .errors import UsageError


def bandwidth_comms(plan):
    """T_comms without latency floors, under the plan's overlap policy."""
    env = Env.symbolic(plan.mesh)
    per_axis: dict[str, sp.Expr] = {}
    total = sp.Integer(0)
    for s in plan.steps:
        if isinstance(s.op, Move) and s.kind != "Slice":
            t = collective_bandwidth_time(s.op, env)
            total += t
            for a in s.axes:
                per_axis[a] = per_axis.get(a, sp.Integer(0)) + t
    if plan.overlap:
        return smax(*per_axis.values()) if per_axis else sp.Integer(0)
    return total


def _symbol(plan, name: str):
    exprs = [plan.t_math, plan.t_hbm, bandwidth_comms(plan)]
    for e in exprs:
        for s in e.free_symbols:
            if s.name == name:
                return s
    raise UsageError(f"{name!r} does not appear in this plan's costs")


def _solve_eq(lhs, rhs, sym):
    pieces = rhs.args if isinstance(rhs, sp.Max) else (rhs,)
    out = []
    for p in pieces:
        if p == 0:
            continue
        try:
            sols = sp.solve(sp.Eq(lhs, p), sym)
        except NotImplementedError:
            sols = []
        out.extend(s for s in sols if s.is_positive is not False)
    return out


def solve_plan(plan, name: str) -> list[dict]:
    """Critical values of ``name``: ``t_math = t_comms`` and ``t_math = t_hbm``."""
    sym = _symbol(plan, name)
    results = []
    for cond, other in (("t_math = t_comms", bandwidth_comms(plan)), ("t_math = t_hbm", plan.t_hbm)):
        for v in _solve_eq(plan.t_math, other, sym):
            results.append({"condition": cond, "value": sp.simplify(v), "numeric": plan.evaluate(v)})
    return results


def compute_bound_when(plan, name: str):
    """The condition, solved for ``name`` where SymPy can, under which T_math >= T_comms (book Part 3:
    "compute-bound iff ...")."""
    sym = _symbol(plan, name)
    comms = bandwidth_comms(plan)
    pieces = [p for p in (comms.args if isinstance(comms, sp.Max) else (comms,)) if p != 0]
    conds = []
    for p in pieces:
        conds.append(_solve_ineq(sp.Ge(plan.t_math, p), sym))
    if not conds:
        return sp.true
    return sp.And(*conds)


def _solve_ineq(ineq, sym):
    real = sp.Dummy(sym.name, positive=True)
    try:
        sol = sp.solve_univariate_inequality(ineq.xreplace({sym: real}), real, relational=True)
    except (NotImplementedError, ValueError, TypeError):
        return ineq
    sol = sol.xreplace({real: sym})
    if isinstance(sol, sp.And):
        keep = [a for a in sol.args if not (a.has(sp.oo) or a.has(-sp.oo))
                and not (isinstance(a, sp.StrictGreaterThan) and a.rhs == 0)
                and not (isinstance(a, sp.StrictLessThan) and a.lhs == 0)]
        sol = sp.And(*keep) if keep else sp.true
    return _symbol_left(sol, sym)


def _symbol_left(rel, sym):
    """``a <= B`` -> ``B >= a``: the solved symbol reads first."""
    if isinstance(rel, sp.And):
        return sp.And(*(_symbol_left(a, sym) for a in rel.args), evaluate=False)
    if isinstance(rel, sp.core.relational.Relational) and rel.rhs == sym and rel.lhs != sym:
        return rel.reversed
    return rel
