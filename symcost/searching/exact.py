"""Exact search: the best sharding of a program with a proven lower bound on every other, solved as a
mixed-integer program over the engine's pieces (:mod:`.pieces`, :mod:`.milp`).

    >>> from symcost.searching import search
    >>> r = search('''
    ...     param W_in[D, F], W_out[F, D]
    ...     Out[B, D] = In[B, D] *_D W_in[D, F] *_F W_out[F, D]
    ... ''', mesh="X=4", dims="B=65536,D=8192,F=32768", hw="tpu-v5p", backward=True, exact=True)
    >>> round(r.best.t_step * 1e3, 3), round(r.bound * 1e3, 3), r.gap    # ms; no plan is faster
    (114.982, 114.982, 0.0)

Two spaces, one after the other, each solved the same way:

1. **the search's**: every statement sharded by the same roles of the mesh axes (:mod:`.space`). Its best is
   what the ordinary search finds (to within ``gap``), the engine choosing each statement's plan there;
2. **the joint one**: every open tensor its own layout, each statement's layouts those of some roles
   (the pieces), statements agreeing on the tensors they share. It holds the first.

In each, the program's optimum is a lower bound (each piece spends no more than its statement does in
any plan with those layouts, :mod:`.pieces`; the step time is at least the largest resource sum); its
solution, written as a program with every open tensor pinned, is derived by the engine, whose step time
is the truth; the solution is cut off and the program solved again, until the best step time found is
within ``gap`` of the bound on all that is left (or ``seconds`` pass, or Ctrl-C). ``bound`` is then
proven: every plan either was derived (no faster than the best) or is bounded by the last solve.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, replace

from .. import progress as bars
from ..errors import UsageError
from ..pricing import policy
from ..searches import Pace
from ..notation import Apply, Declaration, DimRef, Einsum, Program, TensorRef
from . import alike, milp, pieces as pcs
from .price import Priced, none_priced, planned, priced, replanner
from .space import GROUPS, Candidate, Space

#: the relative gap at which an exact search stops (it is proven either way: ``gap`` says how far)
GAP = 1e-3
#: seconds an exact search spends improving its bound after pricing its pieces
SECONDS = 120.0


@dataclass(frozen=True)
class Pinned:
    """A sharding of the joint space that no roles make: for each open tensor, per mesh axis, the
    dimension it splits (or None)."""

    splits: tuple[tuple[str, tuple[str | None, ...]], ...]
    axes: tuple[str, ...]

    def describe(self, batch: frozenset, activation_dims=frozenset(), params: bool = True) -> str:
        return "each tensor its own layout"


class PinnedSpace(Space):
    """The search's space, whose candidates may also be :class:`Pinned` (each open tensor its layout)."""

    def program_for(self, cand) -> Program:
        if not isinstance(cand, Pinned):
            return super().program_for(cand)
        split = dict(cand.splits)
        statements = []
        for i, st in enumerate(self.program.statements):
            tensors = getattr(st, "tensors", ())
            if not any((i, j) in self.open_tensors for j in range(len(tensors))):
                statements.append(st)
                continue
            new = [_written(t, split.get(t.name), cand.axes) if (i, j) in self.open_tensors else t
                   for j, t in enumerate(tensors)]
            if isinstance(st, (Einsum, Apply)):
                n = len(st.operands)
                statements.append(replace(st, operands=tuple(new[:n]),
                                          output=new[n] if st.output is not None else None))
            else:
                statements.append(replace(st, tensors=tuple(new)))
        return Program(tuple(statements), str(Program(tuple(statements))))

    def written(self, cand, t: TensorRef, group: str) -> TensorRef:
        if not isinstance(cand, Pinned):
            return super().written(cand, t, group)
        return _written(t, dict(cand.splits).get(t.name), cand.axes)


def _written(t: TensorRef, split, axes) -> TensorRef:
    """``t`` with the axes each dimension is split over (in mesh order)."""
    if split is None:
        return t
    by_dim: dict[str, tuple] = {}
    for a, d in zip(axes, split):
        if d is not None:
            by_dim[d] = by_dim.get(d, ()) + (a,)
    return replace(t, dims=tuple(DimRef(d.name, by_dim.get(d.name, ()), None, d.span) if d.size is None else d
                                 for d in t.dims))


@dataclass(frozen=True)
class Exact:
    """What an exact search found: the candidates it derived (ranked), the proven ``bound`` on every plan
    of the joint space and ``gap`` = (best - bound) / best; the search's space's best (``search_best``,
    the plan the ordinary search finds) and its own bound."""

    space: Space
    ranked: tuple[Priced, ...]
    bound: float
    gap: float
    search_best: Priced | None
    search_bound: float
    pieces: int
    solves: int
    complete: bool            # both spaces ran to their end (False: one stopped at the time limit or by Ctrl-C)
    interrupted: bool = False  # stopped by Ctrl-C


def solve(space: Space, options: dict, *, gap: float = GAP, seconds: float = SECONDS, jobs=1) -> Exact:
    """The exact search over ``space`` (``options``: :func:`~.price.planned`'s): the pieces (planned in
    ``jobs`` processes, :func:`~.pieces.all_pieces`), the search's space bounded candidate by candidate, then
    the joint space solved."""
    space = PinnedSpace(**{f: getattr(space, f) for f in space.__dataclass_fields__})
    where = pcs.statements(space)
    subs = {at: pcs.alone(space, at) for at in where}
    forms = {at: alike.form(subs[at]) for at in where}
    exact = pcs.exactly(space, subs, backward=options.get("backward", False))
    keyed = [alike.key(forms[at], s, exact[at]) for at in where for _, s in pcs.keys(subs[at])]
    total, distinct = len(keyed), len(set(keyed))      # pieces alike but for their names are planned once
    bars.say(f"search --exact: {total:,} pieces ({len(where)} statements, each at every sharding of its "
             f"tensors{f'; {distinct:,} distinct but for their names' if distinct < total else ''}) to plan, "
             f"then the program solved")

    pace = Pace("search --exact", "pieces", total)       # as the ordinary search: how long the rest will take

    def tick():
        bars.advance(1, "exact search: statements planned alone", total=total, unit=" pieces")
        pace()

    by_statement = pcs.all_pieces(space, subs, options, tick, jobs=jobs)
    flat = [p for ps in by_statement for p in ps]
    derived: dict = {}

    def evaluate(chosen) -> Priced | None:
        """A solution written as a program (a candidate of the search where roles make it) and derived."""
        splits = tuple(sorted({t: s for p in chosen for t, s in p.splits}.items()))
        if splits not in derived:
            axes = tuple(a.name for a in space.mesh.axes)
            roles = _roles_of(space, splits)
            cand = Candidate(roles, axes) if roles is not None else Pinned(splits, axes)
            got = planned(space, cand, **options)
            derived[splits] = None if got is None else _priced(space, cand, got, options)
        return derived[splits]

    now = time.perf_counter()           # the search's space gets at most half the time, the joint one the rest
    deadline = now + seconds
    first = _roles(space, [subs[at] for at in where], by_statement, evaluate, gap, now + seconds / 2)
    second = first if first.interrupted else _joint(by_statement, len(pcs.resources(space.mesh)), evaluate, gap,
                                                      deadline, first.best)
    found = sorted({id(p): p for p in derived.values() if p is not None}.values(), key=_rank)
    best = second.best
    bound = min(best.t_step, second.bound) if best is not None else second.bound
    return Exact(space, tuple(found), bound, (best.t_step - bound) / best.t_step if best else float("inf"),
                 first.best, first.bound, len(flat), second.solves, first.complete and second.complete,
                 first.interrupted or second.interrupted)


@dataclass(frozen=True)
class _Descent:
    best: Priced | None
    bound: float
    solves: int
    complete: bool
    interrupted: bool = False     # Ctrl-C: what was found is kept, nothing more is started


def _better(p: Priced | None, best: Priced | None) -> Priced | None:
    return p if p is not None and p.fits and (best is None or _rank(p) < _rank(best)) else best


def _roles(space: Space, subs: list, by_statement: list, evaluate, gap: float, deadline: float) -> _Descent:
    """The search's space: every candidate's lower bound (the largest resource sum of its pieces), then
    candidates derived from the least bound up until the best is within ``gap`` of the next bound."""
    lookup = [{p.splits: p for p in ps} for ps in by_statement]
    splits = [pcs.splitter(sub) for sub in subs]
    bounded = []
    for cand in space.candidates():
        chosen = [look.get(split(cand)) for split, look in zip(splits, lookup)]
        if all(p is not None for p in chosen):
            bounded.append((pcs.bounds_of([p.vector for p in chosen])[0], chosen))
    bounded.sort(key=lambda b: b[0])
    best = None
    try:
        for k, (low, chosen) in enumerate(bounded):
            if best is not None and best.t_step - low <= gap * best.t_step:
                return _Descent(best, min(low, best.t_step), k, True)
            if time.perf_counter() > deadline:
                return _Descent(best, low, k, False)
            best = _better(evaluate(chosen), best)
            bars.advance(1, "exact search: the search's space", unit=" plans", label=_label(best, low))
    except KeyboardInterrupt:
        return _Descent(best, 0.0, 0, False, True)
    return _Descent(best, best.t_step if best else float("inf"), len(bounded), True)


def _joint(by_statement: list, nres: int, evaluate, gap: float, deadline: float, best) -> _Descent:
    """The joint space: the mixed-integer program solved (its optimum, with every piece that another
    piece of its statement dominates left out, is the bound), its solution derived, cut off, solved again
    while the gap is open and time is left."""
    kept = undominated(by_statement)
    model = milp.Model(kept, nres)
    bound, solves = 0.0, 0
    try:
        while True:
            left = deadline - time.perf_counter()
            sol = model.solve(time_limit=max(left, 1.0))
            solves += 1
            if solves == 1:
                bound = sol.bound       # the later solves bound only the kept pieces' combinations
            if sol.chosen is None:      # every solution cut off (or the time ran out first)
                return _Descent(best, bound if best is None else min(bound, best.t_step), solves, not sol.stopped)
            best = _better(evaluate(sol.chosen), best)
            model.exclude(sol.chosen)
            bars.advance(1, "exact search: the joint space", unit=" plans", label=_label(best, bound))
            if best is not None and best.t_step - bound <= gap * best.t_step:
                return _Descent(best, bound, solves, True)
            if time.perf_counter() > deadline:
                return _Descent(best, bound, solves, False)
    except KeyboardInterrupt:
        return _Descent(best, bound, solves, False, True)


def _label(best, bound) -> str:
    return f"best {best.t_step * 1e3:.4g} ms, bound {bound * 1e3:.4g} ms" if best is not None else ""


def _rank(p: Priced):
    return (not p.fits, float(f"{p.t_step:.9e}"), p.t_comms)


def _priced(space: Space, cand, got, options: dict) -> Priced:
    plan, memory, numbers = got
    p = priced(space, cand, numbers, replanner(space, cand, options))
    p.__dict__["_derived"] = (plan, memory)
    return p


def _role_splits(space: Space, sub: Space, s: int) -> dict:
    """``{role index: the split of statement s's open tensors on one axis}`` for every role of the space."""
    out = {}
    for r, role in enumerate(space.roles):
        splits = pcs.splits_of(sub, Candidate((role,), ("_",)))
        out[r] = tuple((t, sp[0]) for t, sp in splits)
    return out


def _roles_of(space: Space, splits) -> tuple | None:
    """The roles that make a joint sharding, where one role an axis does (else None)."""
    want = dict(splits)
    axes = tuple(a.name for a in space.mesh.axes)
    groups = {}
    for i, j in space.open_tensors:
        st = space.program.statements[i]
        t = st.tensors[j]
        groups[t.name] = (GROUPS.index("param" if isinstance(st, Declaration) else "activation"),
                          {d.name for d in t.dims})
    roles = []
    for a in range(len(axes)):
        fits = [r for r in space.roles
                if all(want.get(t, (None,) * len(axes))[a] == (r[g] if r[g] in dims else None)
                       for t, (g, dims) in groups.items())]
        if not fits:
            return None
        roles.append(fits[0])
    return tuple(roles)


def exact_search(space: Space, sizes: dict, options: dict, *, objective: str = "time", vs=None,
                 gap: float = GAP, seconds: float = SECONDS, jobs=1):
    """``search(..., exact=True)``: the :class:`~.result.SearchResult` of an exact search, ``ranked`` the
    candidates it derived, with ``bound``, ``gap`` and ``search_best``; its pieces planned in ``jobs``
    processes."""
    from .result import SearchResult
    milp.available()
    if objective != "time" or vs is not None:
        raise UsageError("--exact finds the plan with the least step time: leave out --objective and --vs")
    if policy(options.get("overlap", True)) != "program":
        raise UsageError("--exact solves the book's overlap policy (a step is the largest of its resources' "
                         "sums): leave out --no-overlap")
    start = time.perf_counter()
    found = solve(space, options, gap=gap, seconds=seconds, jobs=jobs)
    if not found.ranked:
        if found.interrupted:       # stopped before a plan was derived: nothing to show
            raise KeyboardInterrupt
        raise none_priced(space, options)
    hbm = getattr(space.hardware, "hbm_bytes", None)
    return SearchResult(found.space, space.size, space.assignments, len(found.ranked),
                        sum(p.fits for p in found.ranked), time.perf_counter() - start, found.ranked,
                        hbm_bytes=hbm, complete=not found.interrupted, sizes=sizes, bound=found.bound,
                        gap=found.gap, search_best=found.search_best,
                        time_limit=seconds if not found.interrupted and found.gap > gap else None)


def undominated(by_statement: list) -> tuple:
    """Each statement's pieces less those another piece of it dominates (no more of any resource, the
    same layouts of every tensor another statement touches): the joint optimum never needs them."""
    touched: Counter = Counter()
    for ps in by_statement:
        touched.update({t for p in ps for t, _ in p.splits})
    out = []
    for ps in by_statement:
        groups: dict = {}
        for p in ps:
            groups.setdefault(tuple(x for x in p.splits if touched[x[0]] > 1), []).append(p)
        kept = []
        for group in groups.values():
            group = sorted(group, key=lambda p: p.vector)
            front: list = []
            for p in group:
                if not any(all(a <= b for a, b in zip(q.vector, p.vector)) for q in front):
                    front.append(p)
            kept.extend(front)
        out.append(tuple(kept))
    return tuple(out)
