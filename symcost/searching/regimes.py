"""Regimes: over a range of one symbol (the batch B, a sequence length), which candidate is best, and
where exactly the best changes.

The envelope is found on a grid (every candidate's step time is a vectorised function of the symbol, see
:func:`symcost.searching.price.curve`); each change of the best between two grid points is then solved
exactly: the two candidates' step times are equal there, and within the interval each is one branch of its
``Max``, so the boundary is the root of branch = branch, solved by SymPy (:func:`symcost.solve.roots`) with
the hardware figures and the other sizes kept as symbols, and checked to lie between the grid points. A
boundary where the best stops fitting in memory is the root of its memory = HBM. Ties (two candidates both
compute-bound take the same time) go to the one that communicates less.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import sympy as sp

from ..solve import roots
from .price import curve, over_grid

POINTS = 400


@dataclass(frozen=True)
class Boundary:
    """Where the best changes: the exact value (SymPy, None where it could not be solved), its number,
    and why (``time``: equal step times; ``comms``: equal communication among compute-bound ties;
    ``memory``: the best stops or starts fitting)."""

    exact: object
    value: float
    reason: str

    def as_dict(self) -> dict:
        return {"exact": None if self.exact is None else str(self.exact), "value": self.value, "reason": self.reason}


@dataclass(frozen=True)
class Regime:
    """An interval of the symbol over which one candidate is best."""

    best: int                    # index into the search's ranked candidates
    start: Boundary | None       # None: the start of the range
    end: Boundary | None         # None: the end of the range
    bound: str                   # what limits the best candidate in the middle of the interval


def envelope(priced, symbol: str, lo: float, hi: float, hbm: float | None, points: int = POINTS):
    """The regimes of ``priced`` (a list of :class:`~symcost.searching.price.Priced`) over ``lo..hi``. A
    candidate priced with its curves over this grid (:attr:`~symcost.searching.price.Priced.curves`, from a
    worker process) is not planned again unless a boundary needs its closed forms."""
    import numpy as np
    xs = grid_of(lo, hi, points)
    rows = [p.curves[1:] if p.curves is not None and np.array_equal(p.curves[0], xs)
            else over_grid(p.plan, p.memory_expr, symbol, xs) for p in priced]
    T = np.array([r[0] for r in rows])
    K = np.array([r[1] for r in rows])
    M = np.array([r[4] for r in rows])
    fits = M <= hbm if hbm is not None else np.ones_like(T, dtype=bool)
    T = np.where(fits, T, np.inf)
    best = _best(T, K)
    bounds = _bounds(rows, xs, best)
    regimes, start = [], None
    for i in range(1, len(xs)):
        a, b = best[i - 1], best[i]
        if a == b and bounds[i - 1] == bounds[i]:
            continue
        sa, sb = priced[a].plan.bindings(), priced[b].plan.bindings()
        if a == b:        # the same candidate turns compute-, HBM- or comms-bound
            ea, eb = (_total(priced[a], bounds[i - 1]), _total(priced[a], bounds[i]))
            edge = _solve(ea, eb, sa, sa, symbol, xs[i - 1], xs[i], f"{bounds[i]}-bound")
        else:
            edge = _boundary(priced[a], priced[b], sa, sb, symbol, xs[i - 1], xs[i], hbm)
        regimes.append(Regime(int(a), start, edge, bounds[i - 1]))
        start = edge
    regimes.append(Regime(int(best[-1]), start, None, bounds[-1]))
    return [r for r in regimes if r.best >= 0]


def grid_of(lo: float, hi: float, points: int = POINTS):
    """The values of the symbol the envelope is found on (geometric)."""
    import numpy as np
    return np.geomspace(lo, hi, points)


def _total(p, bound: str):
    return {"compute": p.plan.t_math, "HBM": p.plan.t_hbm, "comms": p.plan.t_comms}[bound]


def _bounds(rows, xs, best) -> list[str]:
    """What limits the best candidate at each grid point."""
    import numpy as np
    out = [""] * len(xs)
    for b in set(int(x) for x in best if x >= 0):
        r = rows[b]
        curves = np.array([r[2], r[3], r[1]])
        which = np.argmax(curves, axis=0)
        for i in np.nonzero(best == b)[0]:
            out[i] = ("compute", "HBM", "comms")[which[i]]
    return out


def _best(T, K):
    """The best candidate at each point: least step time; among ties (to 1e-9), least communication;
    among those, the first in the ranking. -1 where none fits."""
    import numpy as np
    m = T.min(axis=0)
    tied = T <= m * (1 + 1e-9)
    k = np.where(tied, K, np.inf).min(axis=0)
    out = np.argmax(tied & (K <= k * (1 + 1e-9)), axis=0)
    return np.where(np.isfinite(m), out, -1)


def _boundary(pa, pb, sa, sb, symbol, x0, x1, hbm) -> Boundary:
    def num(expr, subs, x):
        return _at(expr, subs, symbol, x)

    # which event: memory, a tie broken by communication, or step times crossing
    if hbm is not None and num(pa.memory_expr, sa, x1) > hbm:
        return _solve(pa.memory_expr, sp.Float(hbm), sa, sa, symbol, x0, x1, "memory", const=True)
    if hbm is not None and num(pb.memory_expr, sb, x0) > hbm:
        return _solve(pb.memory_expr, sp.Float(hbm), sb, sb, symbol, x0, x1, "memory", const=True)
    ta0, tb0, ta1, tb1 = (num(pa.plan.t_step, sa, x0), num(pb.plan.t_step, sb, x0),
                          num(pa.plan.t_step, sa, x1), num(pb.plan.t_step, sb, x1))
    if abs(ta1 - tb1) <= 1e-9 * max(ta1, tb1) and abs(ta0 - tb0) <= 1e-9 * max(ta0, tb0):
        return _solve(pa.plan.t_comms, pb.plan.t_comms, sa, sb, symbol, x0, x1, "comms")
    return _solve(pa.plan.t_step, pb.plan.t_step, sa, sb, symbol, x0, x1, "time")


def _at(expr, subs, symbol, x) -> float:
    return float(curve(expr, subs, symbol, [x])[0])


def _solve(ea, eb, sa, sb, symbol, x0, x1, reason, const=False) -> Boundary:
    """The root of ea = eb between x0 and x1: numerically by bisection, then exactly from the branches of
    each side's Max that are active there."""
    def diff(x):
        return _at(ea, sa, symbol, x) - (float(eb) if const else _at(eb, sb, symbol, x))
    lo, hi = float(x0), float(x1)
    flo = diff(lo)
    for _ in range(200):
        mid = (lo + hi) / 2
        fm = diff(mid)
        if (fm > 0) == (flo > 0) and fm != 0:
            lo, flo = mid, fm
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    x = (lo + hi) / 2
    exact = None
    syms = {s.name: s for e in (sp.sympify(ea), sp.sympify(eb)) for s in e.free_symbols}
    sym = syms.get(symbol)
    if sym is not None:
        # the branches active just below and just above the root (at a kink either side may be the one)
        sides = (x * (1 - 1e-6), x, x * (1 + 1e-6))
        pas = {_active(sp.sympify(ea), sa, symbol, v) for v in sides}
        pbs = {sp.sympify(eb)} if const else {_active(sp.sympify(eb), sb, symbol, v) for v in sides}
        best_gap = None
        for pa, pb in itertools.product(pas, pbs):
            for r in roots(pa, pb, sym):
                try:
                    v = float(sp.sympify(r).xreplace({**sa, **sb}))
                except (TypeError, ValueError):
                    continue
                gap = abs(v - x) / x
                if gap < 1e-6 and (best_gap is None or gap < best_gap):
                    exact, best_gap = sp.factor(r), gap
    value = float(exact.xreplace({**sa, **sb})) if exact is not None else x
    return Boundary(exact, value, reason)


def _active(expr, subs, symbol, x):
    """``expr`` with each Max replaced by its largest argument at ``symbol = x``."""
    if isinstance(expr, sp.Max):
        args = [_active(a, subs, symbol, x) for a in expr.args]
        return max(args, key=lambda a: _at(a, subs, symbol, x))
    if expr.args:
        return expr.func(*[_active(a, subs, symbol, x) for a in expr.args])
    return expr
