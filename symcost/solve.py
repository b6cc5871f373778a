"""Solving: critical values where compute meets communication or memory (book Parts 3, 5, 7), and the
conditions under which one plan beats another.

    >>> import symcost
    >>> plan = symcost.derive("In[B_X, D] * W[D_X, F] -> Out[B_X, F]", mesh="X")
    >>> [(c["condition"], c["value"]) for c in plan.solve("B") if c["condition"] == "t_math = t_comms"]
    [('t_math = t_comms', C*X/W_ici)]

These functions read a plan's totals (``t_math``, ``t_hbm``, ``t_comms_bw``: the collectives' throughput
terms, latency floors left out) and its ``evaluate``; they know nothing else of plans.
"""
from __future__ import annotations

import sympy as sp

from .errors import UsageError


def bandwidth_comms(plan) -> sp.Expr:
    """T_comms without latency floors, under the plan's overlap policy."""
    return plan.t_comms_bw


def plan_symbol(plan, name: str) -> sp.Symbol:
    for e in (plan.t_math, plan.t_hbm, plan.t_comms_bw):
        for s in e.free_symbols:
            if s.name == name:
                return s
    raise UsageError(f"{name!r} does not appear in this plan's costs")


def pieces(expr) -> list:
    """The arguments of a Max (or the expression itself), zeros dropped."""
    return [p for p in (expr.args if isinstance(expr, sp.Max) else (expr,)) if p != 0]


def roots(lhs, rhs, sym) -> list:
    """Solutions of ``lhs = p`` for every piece p of ``rhs``, except those SymPy knows are not positive."""
    out: list = []
    for p in pieces(rhs):
        try:
            sols = sp.solve(sp.Eq(lhs, p), sym)
        except NotImplementedError:
            sols = []
        out.extend(s for s in sols if s.is_positive is not False)
    return out


CONDITIONS = ("t_math = t_comms", "t_math = t_hbm")


def solve_plan(plan, name: str) -> list[dict]:
    """Critical values of ``name``: where ``t_math = t_comms`` and ``t_math = t_hbm``, each as
    ``{"condition", "value" (exact), "numeric" (where bound), "per_device"}``. A root outside the
    symbol's domain (not positive, once numbers are bound) is not a critical value: see :func:`never_balanced`."""
    return [r for r in _critical(plan, name) if r["numeric"] is None or r["numeric"] > 0]


def never_balanced(plan, name: str) -> list[dict]:
    """The conditions that hold for no positive value of ``name``: ``{"condition", "root"}`` (the root SymPy
    found, outside the domain, or None when there is no root at all)."""
    found = _critical(plan, name)
    out = [{"condition": r["condition"], "root": r["numeric"]} for r in found
           if r["numeric"] is not None and r["numeric"] <= 0]
    for cond in CONDITIONS:
        other = plan.t_comms_bw if cond == CONDITIONS[0] else plan.t_hbm
        if other != 0 and not any(r["condition"] == cond for r in found):
            out.append({"condition": cond, "root": None})
    return out


def _critical(plan, name: str) -> list[dict]:
    sym = plan_symbol(plan, name)
    results = []
    for cond, other in zip(CONDITIONS, (plan.t_comms_bw, plan.t_hbm)):
        for v in roots(plan.t_math, other, sym):
            value = sp.simplify(v)
            results.append({"condition": cond, "value": value, "numeric": plan.evaluate(value),
                            "per_device": _per_device(plan, value)})
    return results


def _per_device(plan, value) -> dict | None:
    """The critical value over the devices it is spread on: over every chip of a bound mesh, or over the
    symbolic axes it grows with (``{"value": float, "over": "X"}``)."""
    axes = [a for a in plan.mesh.axes]
    if axes and all(a.size is not None for a in axes):
        v = plan.evaluate(value)
        n = 1
        for a in axes:
            n *= a.size
        return None if v is None else {"value": v / n, "over": f"{n} devices"}
    grows = [s for s in value.free_symbols if s.name in {a.name for a in axes if a.size is None}]
    if not grows:
        return None
    v = plan.evaluate(value / sp.Mul(*grows))
    return None if v is None else {"value": v, "over": ",".join(sorted(s.name for s in grows))}


def bound_condition(plan, cond, name: str):
    """``cond`` with every bound number substituted, when that leaves only ``name`` (or nothing): a
    relation in the solved symbol alone, or True / False; None while other symbols stay unbound."""
    out = cond.xreplace(plan.bindings())
    if any(s.name != name for s in out.free_symbols):
        return None
    try:
        return sp.simplify(out)
    except (TypeError, ValueError):
        return out


def compute_bound_when(plan, name: str, against=("comms", "hbm")):
    """The condition, solved for ``name`` where SymPy can, under which T_math is at least T_comms and T_hbm
    (book Part 3: "compute-bound iff ..."); ``against`` picks which of the two."""
    sym = plan_symbol(plan, name)
    others = (pieces(plan.t_comms_bw) if "comms" in against else []) + (pieces(plan.t_hbm) if "hbm" in against else [])
    conds = [solve_inequality(sp.Ge(plan.t_math, p), sym) for p in others]
    conds = [c for c in conds if c is not sp.true]
    return sp.And(*conds) if conds else sp.true


def solve_inequality(ineq, sym):
    """``lhs >= rhs`` (or ``>``, ``<=``, ``<``; both sides positive) solved for a positive ``sym``: by SymPy
    where it can, else at the one positive root of lhs = rhs, on the side where the ratio grows the right
    way; left as it is when neither works. A Max or Min on either side is left as written: SymPy places
    neither the root nor the interval of one (both fail, after seconds of trying)."""
    if ineq.has(sp.Max, sp.Min):
        return ineq
    at_root = _at_root(ineq, sym)      # fast, and exact whenever the ratio is monotone in sym
    if at_root is not None:
        return at_root
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
    return symbol_first(sol, sym)


def _at_root(ineq, sym):
    """The inequality as ``sym`` against the one positive root of lhs = rhs, when the ratio lhs / rhs is
    monotone in ``sym`` (None otherwise)."""
    if not ineq.has(sym):
        return None
    ratio = sp.cancel(ineq.lhs / ineq.rhs)
    num, den = sp.fraction(ratio)
    one = _linear_root(num, den, sym)     # most of a plan's balances: SymPy's solve not needed
    if (den.is_positive or num.is_positive) and (one is not None or not ratio.has(sym)):
        return _linear(ineq, sp.expand(num - den), sym)
    if one is not None:
        found = [one] if one.is_positive is not False else []
    else:
        try:
            found = [r for r in sp.solve(sp.Eq(ratio, 1), sym) if r.is_positive is not False]
        except NotImplementedError:
            return None
    if len(found) != 1:
        return None
    slope = sp.cancel(sp.diff(ratio, sym) / ratio)
    growing = slope.is_positive if slope.is_positive is not None else (False if slope.is_negative else None)
    if growing is None:
        return None
    root = sp.factor(found[0])
    strict = isinstance(ineq, (sp.StrictGreaterThan, sp.StrictLessThan))
    lhs_big = isinstance(ineq, (sp.GreaterThan, sp.StrictGreaterThan))
    up = growing == lhs_big          # the condition holds above the root
    return (sp.Gt if strict else sp.Ge)(sym, root) if up else (sp.Lt if strict else sp.Le)(sym, root)


def _linear(ineq, e, sym):
    """``ineq`` (both sides positive) where ``lhs / rhs = num / den``, ``den > 0`` and ``e = num - den`` is
    linear in ``sym``: ``lhs >= rhs`` is ``s * sym + e0 >= 0``, on one side of the root ``-e0 / s`` by the
    sign of the slope ``s``. Where that sign depends on other sizes, it is part of the answer: T_math
    against T_hbm grows with the batch towards the ratio of the two rates' intensities, and reaches 1 only
    where that ratio exceeds 1 (``B >= root`` alone would read "always" once a root below 0 is bound)."""
    if not isinstance(ineq, (sp.GreaterThan, sp.StrictGreaterThan)):
        e = -e              # lhs <= rhs: -e >= 0
    strict = isinstance(ineq, (sp.StrictGreaterThan, sp.StrictLessThan))
    s, e0 = e.diff(sym), e.xreplace({sym: 0})
    if s == 0:                  # the ratio does not depend on sym: a condition on the other sizes
        return _positive(e0, or_equal=not strict)
    root = sp.factor(-e0 / s)
    above, below = (sp.Gt if strict else sp.Ge)(sym, root), (sp.Lt if strict else sp.Le)(sym, root)
    if s.is_positive:
        return sp.true if root.is_positive is False else above
    if s.is_negative:
        return sp.false if root.is_positive is False else below
    if e0.is_negative:          # never at sym = 0: only a positive slope reaches 0, at a positive root
        return sp.And(_positive(s), above, evaluate=False)
    if e0.is_positive:          # holds at sym = 0: a negative slope leaves it past its root
        return sp.Or(_positive(s, or_equal=True), below, evaluate=False)
    return ineq


def _positive(e, or_equal: bool = False):
    """``e > 0`` (or ``>= 0``) as its positive terms against its negative ones: ``D*W_hbm > C*D``."""
    return (sp.Ge if or_equal else sp.Gt)(*_sides(e))


def _sides(e) -> tuple:
    """``e``'s positive terms and its negative terms negated, their common factor divided out: ``e`` is
    positive where the first exceeds the second (how a condition on sizes reads)."""
    terms = sp.Add.make_args(sp.expand(e))
    pos = sp.Add(*[t for t in terms if t.could_extract_minus_sign() is False])
    neg = -sp.Add(*[t for t in terms if t.could_extract_minus_sign() is True])
    g = sp.gcd_terms(sp.factor_terms(pos)), sp.factor_terms(neg)
    common = sp.gcd(*g) if all(x != 0 for x in g) else 1
    return sp.cancel(g[0] / common), sp.cancel(g[1] / common)


def _linear_root(num, den, sym):
    """The one root of ``num = den`` where ``num - den`` is linear in ``sym`` (a ratio of two times, each a
    sum of sizes over rates, balances so), else None. ``factor`` writes a rational function one way, so
    the root it is given reads as the one ``sp.solve`` finds, at a fraction of the cost."""
    e = sp.expand(num - den)
    if not e.has(sym):
        return None
    slope = e.diff(sym)
    if slope.has(sym):
        return None
    return -e.xreplace({sym: 0}) / slope


def symbol_first(rel, sym):
    """``a <= B`` -> ``B >= a``: the solved symbol reads first."""
    if isinstance(rel, sp.And):
        return sp.And(*(symbol_first(a, sym) for a in rel.args), evaluate=False)
    if isinstance(rel, sp.core.relational.Relational) and rel.rhs == sym and rel.lhs != sym:
        return rel.reversed
    return rel


def wins_when(a: sp.Expr, b: sp.Expr) -> str | None:
    """When is ``a < b`` (two times, both positive)? e.g. ``2*B < D`` (book Part 3 Question 4). None when
    never; ``"always"`` when whatever the sizes."""
    if a == 0 and b == 0:
        return None
    if a == 0:
        return "always"
    if b == 0:
        return None
    ratio = sp.cancel(sp.together(a / b))
    if ratio.is_number:
        return None if ratio >= 1 else "always"
    num, den = sp.fraction(ratio)
    cond = sp.Lt(*_sides(num - den))      # a < b  <=>  num - den < 0: the terms both sides share cancel
    if cond is sp.true:
        return "always"
    if cond is sp.false:
        return None
    return str(cond)
