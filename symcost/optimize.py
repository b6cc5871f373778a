"""Optimal mesh splits (book Part 5, "mixed FSDP and tensor parallelism").

With ``X * Y = N`` chips, the FSDP traffic grows with X and the tensor-parallel traffic shrinks with it;
the split that balances them minimises ``T_comms`` (collectives on different axes overlap, so T_comms is
the max of the two)::

    >>> from symcost.program import derive_program
    >>> plan = derive_program(open("derivations/fsdp_tp.sc").read(), mesh="X:M_X,Y:M_Y")
    >>> optimum(plan, ("X", "Y"), "N")["X"]
    sqrt(B)*sqrt(M_X)*sqrt(N)/(sqrt(F)*sqrt(M_Y))

which is the book's ``X_opt = sqrt(B N M_X / (F M_Y))``.
"""
from __future__ import annotations

import math

import sympy as sp

from . import symbols
from .errors import UsageError
from .env import RANKING_DEFAULTS
from .solve import pieces, solve_inequality


def _chips(chips):
    if chips is None:
        raise UsageError("--chips is required: a number or a symbol such as N")
    if isinstance(chips, int):
        return sp.Integer(chips)
    s = str(chips).strip()
    if s.isdigit():
        n = int(s)
        if n < 1:
            raise UsageError(f"--chips must be positive, not {n}")
        return sp.Integer(n)
    if s.replace("_", "").isalnum() and s[:1].isalpha():
        return symbols.axis(s)
    raise UsageError(f"--chips must be a number or a name, not {chips!r}")


def optimum(plan, vary, chips) -> dict:
    """The split of ``chips`` over the two axes ``vary`` that minimises the plan's T_comms (throughput
    terms), as exact SymPy expressions: ``{"X": ..., "Y": ..., "t_comms": ...}``."""
    if len(vary) != 2:
        raise UsageError("--vary takes two mesh axes, e.g. --vary X,Y")
    for a in vary:
        if a not in plan.mesh:
            raise UsageError(f"--vary names {a!r}, which is not an axis of the mesh "
                             f"({', '.join(plan.mesh.names)})")
        if plan.mesh.axis(a).size is not None:
            raise UsageError(f"mesh axis {a} has a fixed size; give it symbolically (--mesh {a}) to vary it")
    N = _chips(chips)
    if isinstance(N, sp.Symbol):
        taken = {s.name for e in (plan.t_math, plan.t_hbm, plan.t_comms_bw) for s in e.free_symbols}
        if N.name in taken - set(vary):
            raise UsageError(f"--chips {N.name} names the chips with a symbol the program already uses "
                             f"({N.name} is one of its sizes); call the chips something else, e.g. --chips N_chips")
    x, y = (symbols.axis(a) for a in vary)
    comms = plan.t_comms_bw
    t = comms.xreplace({y: N / x})
    terms = pieces(t)
    cands = []
    try:
        if len(terms) >= 2:  # the max is smallest where the increasing and decreasing terms meet
            for i in range(len(terms)):
                for j in range(i + 1, len(terms)):
                    cands += sp.solve(sp.Eq(terms[i], terms[j]), x)
        else:
            cands += sp.solve(sp.diff(t, x), x)
    except NotImplementedError:   # a transcendental balance: no closed form (the integer split still exists)
        cands = []
    cands = [c for c in cands if c.is_positive is not False and not c.has(sp.I) and _admissible(c, N, plan)]
    if not cands:
        raise UsageError(f"T_comms does not trade {vary[0]} against {vary[1]} in closed form: no interior optimum "
                         f"between 1 and the chips")
    best = min(cands, key=lambda c: sp.count_ops(c))
    best = sp.powsimp(sp.simplify(best), force=True)
    return {vary[0]: best, vary[1]: sp.simplify(N / best), "t_comms": sp.simplify(t.xreplace({x: best})),
            "chips": N, "t_comms_of_x": t}


def _admissible(root, chips, plan) -> bool:
    """A root is a split when it lies between 1 and the chips: checked with the plan's numbers, the ranking
    defaults standing in for what is unbound (a quadratic balance has a negative root too)."""
    defaults = {s: RANKING_DEFAULTS.get(s.name, RANKING_DEFAULTS["dim"]) for s in (root - chips).free_symbols}
    bind = {**defaults, **plan.bindings()}
    try:
        r, n = complex(root.xreplace(bind)), complex(sp.sympify(chips).xreplace(bind))
    except TypeError:
        return True
    return abs(r.imag) < 1e-9 and 1 - 1e-9 <= r.real <= n.real + 1e-9


def optimize_plan(plan, vary, chips, derive_at=None) -> dict:
    """Everything ``symcost optimize`` reports (its --json keys and more).

    The closed-form optimum comes from the plan's symbolic T_comms. The best integer split is found by
    deriving the program at every divisor of the chips (``derive_at(sizes) -> Plan``; by default the
    plan's own program, re-derived), so the numbers it reports are exactly what ``derive`` says at that
    mesh: placement on the hardware, latency floors and all."""
    opt = optimum(plan, vary, chips)
    a, b = vary
    x = symbols.axis(a)
    out = {"vary": list(vary), "optimum": {a: opt[a], b: opt[b]}, "t_comms": opt["t_comms"],
           "numeric": None, "chosen": None}
    bind = plan.bindings()
    xv = opt[a].xreplace(bind)
    if not xv.free_symbols:
        out["numeric"] = {a: float(xv), b: float(opt[b].xreplace(bind))}
    n = opt["chips"].xreplace(bind)
    derive_at = derive_at or rederive(plan)
    if n.is_Integer:
        out["chosen"] = best_split(plan, a, b, int(n), derive_at)
    placed = _placed_again(plan, vary, chips, out["chosen"], derive_at)
    if placed is not None:   # the closed form with the link kinds the hardware gives the best split
        plan, opt = placed
        out.update(optimum={a: opt[a], b: opt[b]}, t_comms=opt["t_comms"], numeric=None)
        xv = opt[a].xreplace(bind)
        if not xv.free_symbols:
            out["numeric"] = {a: float(xv), b: float(opt[b].xreplace(bind))}
    out["placement"] = {v: plan.mesh.axis(v).kind for v in vary}
    out["placed_again"] = placed is not None
    # compute-bound at the optimum: T_math >= T_comms (book: B/N > alpha^2 / (M_X M_Y F))
    t_math = plan.t_math.xreplace({symbols.axis(b): opt["chips"] / x}).xreplace({x: opt[a]})
    cond = sp.Gt(sp.simplify(t_math), opt["t_comms"])
    out["compute_bound_when"] = _batch_condition(cond)
    out["t_math"] = sp.simplify(t_math)
    return out


def _placed_again(plan, vary, chips, chosen, derive_at):
    """When the hardware lays the best integer split's axes on other links than the symbolic mesh assumed
    (an H100 axis of 32 crosses InfiniBand, not NVLink), the plan again with those link kinds written and
    its optimum; None when nothing changes or the closed form does not survive."""
    if not chosen or "kinds" not in chosen:
        return None
    kinds = chosen["kinds"]
    if all(plan.mesh.axis(v).kind == kinds[v] for v in vary):
        return None
    try:
        again = derive_at({}, kinds)
        return again, optimum(again, vary, chips)
    except UsageError:
        return None


def rederive(plan):
    """``sizes -> Plan``: the plan's program derived again with some mesh axes given sizes."""
    from dataclasses import replace

    from .mesh import Mesh
    from .program import derive_program
    backward = any(s.phase == "backward" for s in plan.steps)

    def at(sizes: dict, kinds: dict | None = None):
        kinds = kinds or {}
        mesh = Mesh(tuple(replace(ax, size=sizes.get(ax.name, ax.size), kind=kinds.get(ax.name, ax.kind),
                                  kind_written=ax.kind_written or ax.name in kinds) for ax in plan.mesh.axes))
        return derive_program(plan.expression, mesh, dict(plan.sizes), plan.hardware, backward=backward,
                              overlap=plan.overlap, objective=plan.objective, alternatives=False)
    return at


def _number(plan, expr) -> float | None:
    """``expr`` at the plan's numbers, the ranking defaults standing in for unbound hardware figures."""
    val = sp.sympify(expr).xreplace(plan.bindings())
    val = val.xreplace({symbols.hw(k): RANKING_DEFAULTS[k] for k in symbols.HARDWARE_SYMBOLS})
    return None if val.free_symbols else float(val)


def _batch_condition(cond):
    """``lhs >= rhs`` solved for the batch B when it appears (a critical B and the side where it holds)."""
    syms = {s.name: s for s in cond.free_symbols}
    if "B" not in syms:
        return sp.simplify(cond)
    return solve_inequality(cond, syms["B"])


def best_split(plan, a: str, b: str, n: int, derive_at) -> dict | None:
    """The integer split (``a`` a divisor of ``n``) with the lowest T_comms, each derived; ties go to the
    lower T_step, then to powers of two. ``t_comms`` and ``t_step`` are the derived plan's, in seconds."""
    best = None
    for d in (d for d in range(1, n + 1) if n % d == 0):
        p = derive_at({a: d, b: n // d})
        tc, ts = _number(p, p.t_comms), _number(p, p.t_step)
        if tc is None or ts is None or math.isnan(tc):
            return None
        key = (round(tc, 15), round(ts, 15), 0 if d & (d - 1) == 0 else 1)
        if best is None or key < best[0]:
            best = (key, {a: d, b: n // d, "t_comms": tc, "t_step": ts, "hardware_bound": p.hardware is not None,
                          "kinds": {v: p.mesh.axis(v).kind for v in (a, b)},
                          "spelled": {v: p.mesh.axis(v).spelled for v in (a, b)},
                          "links": {v: p.mesh.axis(v).links for v in (a, b)}})
    return best[1] if best else None
