"""The exact search's mixed-integer program: one piece a statement, pieces that agree on the tensors they
share, the step time the largest of the resources' sums (Alpa, Zheng et al., OSDI 2022, section 4, with
symcost's max-of-sums objective), solved by HiGHS through :func:`scipy.optimize.milp`.

    >>> from symcost.searching.pieces import Piece
    >>> a, b = Piece(0, (("A", (None,)),), (2.0, 1.0)), Piece(0, (("A", ("I",)),), (1.0, 1.5))
    >>> s = Model(((a, b),), 2).solve()
    >>> s.value, s.chosen == (b,)
    (1.5, True)

Variables: ``z[p]`` (binary) takes piece p; ``y[t, a, d]`` says axis a splits dimension d of tensor t (None:
none of it); ``T`` the step time. Constraints: one piece a statement; the pieces of every statement that
touches a tensor agree with its ``y`` on each axis (a tensor has one layout, whichever statements read it:
the resharding a consumer needs is in its piece, planned by the engine); ``T >= sum of the pieces'
resource r`` for each resource. Minimise ``T``. A solution already looked at is cut off (``exclude``), so the next solve
gives the next best and a bound on everything not yet looked at.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import UsageError


def _scipy():
    """scipy's MILP solver and sparse matrices, or a clear error (the ``exact`` extra)."""
    try:
        import numpy as np
        from scipy import sparse
        from scipy.optimize import Bounds, LinearConstraint, milp
    except ImportError:
        raise UsageError("search --exact needs scipy (the MILP solver HiGHS): pip install 'symcost[exact]'") from None
    return np, sparse, Bounds, LinearConstraint, milp


#: the relative gap HiGHS closes before it calls a solution optimal
GAP = 1e-9


def available() -> None:
    """Raise the clear error where scipy is missing (before any work is done)."""
    _scipy()


@dataclass(frozen=True)
class Solution:
    """A solve: ``value`` the optimum's step time, ``bound`` a proven lower bound on every solution not
    cut off (HiGHS's dual bound), ``chosen`` the piece taken for each statement, None where nothing is
    left."""

    value: float
    bound: float
    chosen: tuple | None
    stopped: bool = False     # out of time (``chosen`` None: no solution found, the bound stands)


@dataclass
class Model:
    """``statements``: the pieces of each statement (anything with ``splits`` and ``vector``, as
    :class:`~.pieces.Piece`); ``resources``: the vectors' length."""

    statements: tuple
    resources: int
    cuts: list = field(default_factory=list)

    def exclude(self, chosen) -> None:
        """Cut a solution off: the next solve takes at least one other piece."""
        self.cuts.append(tuple(chosen))

    def solve(self, time_limit: float | None = None) -> Solution:
        np, sparse, Bounds, LinearConstraint, milp = _scipy()
        pieces = [p for ps in self.statements for p in ps]
        column = {id(p): i for i, p in enumerate(pieces)}
        scale = max((v for p in pieces for v in p.vector), default=0.0) or 1.0   # seconds -> about 1: the
        rows, lo, hi, n, ints = self._rows(pieces, column, scale)                # solver's tolerances are absolute
        a = sparse.csr_array((rows[2], (rows[0], rows[1])), shape=(len(lo), n))
        c = np.zeros(n)
        c[n - 1] = 1.0
        integrality = np.zeros(n)
        integrality[:ints] = 1
        upper = np.ones(n)
        upper[n - 1] = np.inf
        options = {"mip_rel_gap": GAP, "disp": False}
        if time_limit is not None:
            options["time_limit"] = max(time_limit, 0.1)
        res = milp(c, constraints=LinearConstraint(a, np.array(lo), np.array(hi)), integrality=integrality,
                   bounds=Bounds(np.zeros(n), upper), options=options)
        dual = getattr(res, "mip_dual_bound", None)       # HiGHS's proven bound (scipy >= 1.11)
        if res.x is None:
            if res.status == 2:       # infeasible: every solution cut off
                return Solution(float("inf"), float("inf"), None)
            if res.status == 1:       # out of time before a solution: the bound it proved, if any
                known = dual is not None and np.isfinite(dual)
                return Solution(float("inf"), float(dual) * scale if known else 0.0, None, stopped=True)
            raise UsageError(f"the exact search's solver stopped without a solution ({res.message})")
        bound = dual
        if bound is None or not np.isfinite(bound):         # else proven only where solved to optimality
            bound = float(res.fun) * (1 - GAP) if res.status == 0 else 0.0
        bound = min(float(bound), float(res.fun))
        chosen = tuple(max(ps, key=lambda p: res.x[column[id(p)]]) for ps in self.statements)
        value = max(map(sum, zip(*(p.vector for p in chosen))))
        return Solution(value, min(bound * scale, value), chosen)

    def _rows(self, pieces: list, column: dict, scale: float):
        """The constraint matrix as (row, column, value) triplets, the rows' bounds, the column count and
        how many columns (the first) are integers."""
        ri: list[int] = []
        ci: list[int] = []
        vi: list[float] = []
        lo: list[float] = []
        hi: list[float] = []

        def add(coeffs, low, high):
            for col, v in coeffs:
                ri.append(len(lo))
                ci.append(col)
                vi.append(v)
            lo.append(low)
            hi.append(high)

        for ps in self.statements:            # one piece a statement
            add([(column[id(p)], 1.0) for p in ps], 1.0, 1.0)
        extra = len(pieces)
        groups: dict = {}                     # (tensor, axis) -> {dim: {statement: [columns]}}
        for s, ps in enumerate(self.statements):
            for p in ps:
                for t, split in p.splits:
                    for a, d in enumerate(split):
                        groups.setdefault((t, a), {}).setdefault(d, {}).setdefault(s, []).append(column[id(p)])
        for by_dim in groups.values():
            readers = {s for per in by_dim.values() for s in per}
            if len(readers) < 2:
                continue
            for per in by_dim.values():        # y[t, a, d] = the pieces of each reader that split so
                y = extra
                extra += 1
                for s in readers:
                    add([(col, 1.0) for col in per.get(s, ())] + [(y, -1.0)], 0.0, 0.0)
        t_col = extra
        for k in range(self.resources):       # T >= each resource's sum
            add([(column[id(p)], p.vector[k] / scale) for p in pieces if p.vector[k]] + [(t_col, -1.0)],
                -float("inf"), 0.0)
        for cut in self.cuts:
            add([(column[id(p)], 1.0) for p in cut], -float("inf"), len(cut) - 1.0)
        return (ri, ci, vi), lo, hi, t_col + 1, len(pieces)
