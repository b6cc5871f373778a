"""The pieces of an exact search: each statement of a program planned alone by the engine at every
sharding its tensors can take, and the resources that plan spends.

    >>> from symcost.searching.space import Space
    >>> sp = Space.of("param W[D, F]\\nOut[B, F] = In[B, D] *_D W[D, F]", "X=4")
    >>> ps = statement_pieces(sp, 1, dict(dims={"B": 4096, "D": 8192, "F": 8192}, hw="tpu-v5p", backward=True))
    >>> len(ps), resources(sp.mesh)
    (12, ('compute', 'HBM', 'link X'))

A statement's *key* is what it depends on: for each mesh axis, the dimension that axis splits in each open
tensor the statement writes or reads (as the search assigns roles: one parameter dimension and one
activation dimension an axis). With every open tensor pinned, the planner plans a statement from its
operands' layouts and its output's alone (:mod:`symcost.planner`: an unannotated use takes the tensor as it
is), so a statement's forward steps are those of the statement planned alone.

Its backward steps are too, unless the statement reads or writes a tensor that several statements read:
then the backward pass reuses layouts another statement's gradient made, and the gradient adds up in the
layout its first contribution took. Such a piece keeps its forward resources (its plans derived without
the backward pass, which it does not read) and, for its backward, a floor no plan can go under: each
gradient einsum's FLOPs and bytes spread evenly over every device (a block is never smaller than its
share), and on each axis's links what its weight and input gradients must spend there whatever the route
(:mod:`.floors`: a gradient summed over a dimension the result's gradient splits over an axis is reduced
over it, or that split is moved; where the result's gradient arrives in the result's layout). Where a
statement has equally fast forward plans
(the whole step chooses among them), a piece holds the least of each resource over them. A piece is thus
never more than what that statement spends in any plan of the whole program with those layouts
(:attr:`Piece.exact` where no floor stands in for its backward steps), which is what makes the exact
search's bound a bound.
"""
from __future__ import annotations

import itertools
from contextlib import closing
from dataclasses import dataclass, field, replace

from .. import dtypes
from ..env import Env
from ..errors import SymcostError, UsageError
from ..notation import Apply, Declaration, Einsum, Program, Ranking
from ..pricing import totals
from ..program import derive_program, derive_tied
from . import alike
from .floors import backward_links, floored, shared
from .pool import mapped
from .space import GROUPS, Candidate, Space


#: the most equally fast forward plans of one statement weighed (the planner keeps six runner-ups)
TIES = 7


@dataclass(frozen=True)
class Piece:
    """One statement at one key: ``splits`` is ``{tensor: per mesh axis, the dimension it splits (or
    None)}`` for each open tensor the statement touches; ``vector`` the resources it spends, in the order
    of :func:`resources` (seconds)."""

    statement: int
    splits: tuple[tuple[str, tuple[str | None, ...]], ...]
    vector: tuple[float, ...]
    exact: bool = True
    program: str = field(default="", compare=False)   # the statement alone, its layouts written


def resources(mesh) -> tuple[str, ...]:
    """The sums a step time is the largest of (book Part 1: T = max(T_math, T_hbm, T_comms), communication
    on each mesh axis being a channel of its own): compute, HBM traffic, each axis's links."""
    return ("compute", "HBM") + tuple(f"link {a.name}" for a in mesh.axes)


def statements(space: Space) -> tuple[int, ...]:
    """The indices of the statements that do work (einsums, elementwise work); a program of anything else
    (a collective written in it) is refused."""
    out = []
    for i, st in enumerate(space.program.statements):
        if isinstance(st, Einsum) and (len(st.operands) > 1 or st.result_name) or isinstance(st, Apply):
            out.append(i)
        elif not isinstance(st, (Declaration, Ranking, Einsum)):
            raise UsageError(f"--exact plans programs of einsums and elementwise work; line {st.span.line} is "
                             f"{type(st).__name__.lower()} work "
                             f"({st}), which it does not split into pieces yet: search without --exact ranks them")
    return tuple(out)


def alone(space: Space, at: int) -> Space:
    """The space of statement ``at`` planned alone: the sizes, the parameters it reads and the statement,
    every tensor the whole program pins written with its axes."""
    prog = space.program
    st = prog.statements[at]
    pinned = {}
    for i, s in enumerate(prog.statements[:at]):
        for j, t in enumerate(getattr(s, "tensors", ())):
            if (i, j) not in space.open_tensors and t.annotated:
                pinned.setdefault(t.name, t)
    names = {t.name for t in st.operands}
    decls = []
    for s in prog.statements[:at]:
        if isinstance(s, Declaration):
            used = tuple(pinned.get(t.name, t) for t in s.tensors if t.name in names)
            if used:
                decls.append(replace(s, tensors=used))
    if not decls:      # a strategy stays one (the moves it allows): a parameter it does not read, pinned
        decls = [replace(s, tensors=(_pinned_param(s.tensors[0]),))
                 for s in prog.statements[:at] if isinstance(s, Declaration)][:1]
    body = replace(st, operands=tuple(pinned.get(t.name, t) for t in st.operands))
    rank = [s for s in prog.statements if isinstance(s, Ranking)]
    stmts = tuple(rank + decls + [body])
    return replace(Space.of(Program(stmts, "\n".join(str(s) for s in stmts)), space.mesh), hardware=space.hardware)


def _pinned_param(t):
    """A parameter written so that it is not open (its dtype written): declared, never read."""
    return replace(t, dtype=t.dtype or dtypes.DEFAULT)


def splits_of(sub: Space, cand: Candidate) -> tuple:
    """``((tensor, per axis the dimension it splits or None), ...)`` of a candidate's open tensors."""
    return splitter(sub)(cand)


def splitter(sub: Space):
    """:func:`splits_of` for one statement alone, its open tensors read once (a search asks it of every
    candidate). A statement's splits depend on each axis's role only through the dimensions its tensors
    have (:func:`seer`), so they are made once for each roles so seen (a three-axis search's 80,190
    candidates give the attention's product 343)."""
    shown, seen_as = _open(sub), seer(sub)
    seen_roles: dict = {}        # a role -> the role as this statement sees it
    made: dict = {}              # the roles as seen -> the splits

    def split(cand: Candidate) -> tuple:
        roles = tuple(seen_roles.get(r) or seen_roles.setdefault(r, seen_as(r)) for r in cand.roles)
        out = made.get(roles)
        if out is None:
            out = made[roles] = tuple((name, tuple(r[group] if r[group] in dims else None for r in roles))
                                      for name, group, dims in shown)
        return out
    return split


def seer(sub: Space):
    """``role -> the role as statement ``sub`` sees it``: a dimension none of its open tensors of that group
    has is no split to it (two roles seen alike give every candidate the same splits there)."""
    shown = _open(sub)
    seen = [frozenset().union(*(dims for _, g, dims in shown if g == group)) for group in range(len(GROUPS))]
    return lambda role: tuple(d if d in dims else None for d, dims in zip(role, seen))


def _open(sub: Space) -> list:
    """The open tensors of a statement alone, each once: ``(name, group, its dimensions)``, sorted."""
    tensors: dict = {}
    for i, j in sorted(sub.open_tensors):
        st = sub.program.statements[i]
        t = st.tensors[j]
        group = GROUPS.index("param" if isinstance(st, Declaration) else "activation")
        tensors.setdefault(t.name, (t.name, group, frozenset(d.name for d in t.dims)))
    return sorted(tensors.values())


def keys(sub: Space):
    """Every candidate of a statement planned alone, one a distinct sharding of its tensors, with each
    axis taken apart (the exact search gives every axis its own variables: interchangeable axes are not
    collapsed)."""
    axes = tuple(a.name for a in sub.mesh.axes)
    seen, split = set(), splitter(sub)
    for roles in itertools.product(sub.roles, repeat=len(axes)):
        cand = Candidate(tuple(roles), axes)
        s = split(cand)
        if s not in seen:
            seen.add(s)
            yield cand, s


def statement_pieces(space: Space, at: int, options: dict, on_piece=None) -> list[Piece]:
    """Every piece of statement ``at``: the statement planned alone by the engine at each key
    (``options``: :func:`~.price.planned`'s), those the engine refuses left out; ``on_piece()`` is called
    after each (progress)."""
    return all_pieces(space, {at: alone(space, at)}, options, on_piece)[0]


def all_pieces(space: Space, subs: dict, options: dict, on_piece=None, jobs=1, work=None,
               floors: dict | None = None) -> list[list[Piece]]:
    """The pieces of each statement of ``subs`` (``{statement: its space alone}``, :func:`alone`; see
    :func:`statement_pieces`), the keys of them all planned in ``jobs`` processes (:func:`~.pool.mapped`:
    each worker plans a key and sends back its two resource vectors), in order, so the pieces are the same
    however many plan them. ``work``: ``(statement, candidate, splits)`` of the keys to plan (default: every
    key, :func:`keys`; :class:`.keyed.Keyed` gives those a search's candidates take). ``floors``: each
    statement's backward floor once made (kept by a caller that plans its pieces a few at a time)."""
    if work is None:
        work = [(at, cand, splits) for at in subs for cand, splits in keys(subs[at])]
    exact = exactly(space, subs, backward=options.get("backward", False))
    floors = {} if floors is None else floors
    out: dict = {at: [] for at in subs}
    forms = {at: alike.form(subs[at]) for at in subs}     # a piece alike another (alike.py) is planned once
    same = [alike.key(forms[at], splits, exact[at]) for at, _, splits in work]
    firsts = dict(reversed(list(zip(same, work))))      # each key's first piece (reversed: the first wins)
    distinct = [firsts[k] for k in dict.fromkeys(same)]
    answers = mapped(key_vectors, [(at, cand) for at, cand, _ in distinct], jobs=jobs, space=space, options=options)
    with closing(answers) as vectors:         # stopped (Ctrl-C), the workers go at once
        got: dict = {}
        for (at, cand, splits), k in zip(work, same):
            vec = got[k] if k in got else got.setdefault(k, next(vectors))
            full = _full(at, vec, exact[at], floors, subs, options, space.mesh)
            if full is not None:
                out[at].append(Piece(at, splits, full, exact[at] is True, str(subs[at].program_for(cand))))
            if on_piece is not None:
                on_piece()
    return [out[at] for at in subs]


def exactly(space: Space, subs: dict, *, backward: bool) -> dict:
    """``{statement: whether its piece is exact}``: it touches no tensor that several statements read, or
    there is no backward pass (``backward`` False: a statement's forward steps are those it has alone); else
    where its gradients have a floor on the links (:func:`floored`), that floor's ``(its result, the
    operands whose gradients end in their own layouts)``, or False."""
    prog = space.program
    names, floors = shared(prog) if backward else frozenset(), floored(space, subs, backward=backward)
    out = {}
    for at in subs:
        st = prog.statements[at]
        touched = {t.name for t in st.operands} | {st.result_name}
        out[at] = True if not touched & names else floors.get(at, False)
    return out


def vector_here(space: Space, subs: dict, at: int, cand: Candidate, options: dict, exact, floors: dict):
    """One piece's resource vector, planned in this process (None where the engine refuses it)."""
    return _full(at, _priced(subs[at], cand, options, space.mesh, exact), exact, floors, subs, options, space.mesh)


def _full(at: int, vec, exact, floors: dict, subs: dict, options: dict, mesh):
    """A piece's resources from :func:`_priced`'s two vectors: the whole plan's where the piece is exact,
    else its forward steps' with its backward at the floor no plan goes under (made once a statement)."""
    if vec is None:
        return None
    full, forward = vec
    if exact is True:
        return full
    # the backward steps of a piece that is not exact are not read: its backward is the floor
    if at not in floors:
        floors[at] = _floor(subs[at], options, mesh)
    return tuple(f + b for f, b in zip(forward, floors[at])) if floors[at] else None


def bounds_of(vectors) -> tuple[float, float]:
    """A candidate's bounds from its statements' pieces' resource vectors (in the order of
    :func:`resources`): on its step time, the largest resource's sum (a step is at least each resource's
    sum, and each piece at most what its statement spends); on its communication time, the busiest axis's
    sum of their links."""
    sums = [sum(col) for col in zip(*vectors)]
    return max(sums), max(sums[2:], default=0.0)


def key_vectors(job: dict, item):
    """What a worker sends for one key ``(statement, candidate of it alone)``: :func:`_priced`'s two
    resource vectors (None where the engine refuses it). The statement's space alone is made once a
    process."""
    at, cand = item
    space = job["space"]
    subs = job.setdefault("alone", {})
    if at not in subs:
        subs[at] = alone(space, at)
    if "exact" not in job:
        job["exact"] = exactly(space, {i: None for i in statements(space)},
                               backward=job["options"].get("backward", False))
    return _priced(subs[at], cand, job["options"], space.mesh, job["exact"][at])


def _priced(sub: Space, cand: Candidate, options: dict, mesh, exact=True):
    """``(resources of the whole plan, of its forward steps)``, each the least over the statement's equally
    fast forward plans; None where the engine refuses the sharding. A piece that is not ``exact`` (its
    value in :func:`exactly`) reads only its forward steps (its backward is the floor, :func:`_full`): its
    plans are derived without the backward pass (the same forward steps: the forward pass is planned alike
    with or without it, and ``choices`` picks its equally fast plans), and the first vector is None; where
    its gradients have a floor on the links (:mod:`.floors`), the second vector carries it too."""
    at = len(sub.program.statements) - 1
    planning = options if exact is True else {**options, "backward": False}
    # the equally fast forward plans: the k-th of as many as tie (or TIES), each the plan choices={at: k}
    # gives, found without planning the statement again where it can be (derive_tied)
    tied = planned_tied(sub, cand, planning, at, TIES if options.get("backward") else 1)
    first = tied[0] if tied else None
    if first is None:
        return None
    plans = [first]                   # (plan, its step costs)
    forward = {_forward(first[0])}
    for got in tied[1:]:
        if got is None:
            continue
        if _forward(got[0]) in forward:
            break
        forward.add(_forward(got[0]))
        plans.append(got)
    fwd = [vector([c for c, s in zip(costs, p.steps) if s.phase != "backward"], mesh) for p, costs in plans]
    least = tuple(min(col) for col in zip(*fwd))
    if exact is not True:      # its backward's links at their floor, from the layouts (every tied plan's)
        if exact:
            least = least[:2] + tuple(f + b for f, b in zip(least[2:], backward_links(first[0], *exact)))
        return None, least
    return tuple(min(col) for col in zip(*(vector(costs, mesh) for _, costs in plans))), least


def _forward(plan) -> tuple:
    return tuple(s for s in plan.steps if s.phase != "backward")


def floor(sub: Space, options: dict, mesh) -> tuple:
    """A statement's steps at their least, forward and (with ``backward``) backward: its work on one device,
    shared evenly by every device, no communication (zero where it cannot be planned on one device)."""
    got = _floor(sub, options, mesh, ("forward", "backward") if options.get("backward") else ("forward",))
    return got or (0.0,) * (2 + len(mesh.axes))


def _floor(sub: Space, options: dict, mesh, phases=("backward",)):
    """The ``phases`` steps of a statement at their least (default: its backward steps): its einsums on one
    device (the mesh's axes of size one), their FLOPs and bytes shared evenly by every device, no
    communication."""
    axes = tuple(a.name for a in mesh.axes)
    prog = sub.program_for(Candidate(tuple((None, None) for _ in axes), axes))
    plan = None
    # its tensors whole, on one device, no move is needed (the planner then searches no layouts): with none
    # allowed first, with the search's own where a tensor is pinned to an axis (of size one here)
    for moves in ((), options.get("moves")):
        try:
            plan = derive_program(prog, {a: 1 for a in axes}, options.get("dims"), options.get("hw"), backward=True,
                                  moves=moves, alternatives=False)
            break
        except SymcostError:
            continue
    if plan is None:
        return None
    if plan.step_costs() is None:
        return None
    n = 1
    for a in mesh.axes:
        n *= a.size
    back = [c for c, s in zip(plan.step_costs(), plan.steps) if s.phase in phases and c.local]
    t = totals(back, Env.numeric(plan.mesh), "none")
    return (float(t.t_math) / n, float(t.t_hbm) / n) + (0.0,) * len(axes)


def planned_tied(sub: Space, cand: Candidate, options: dict, at: int, most: int) -> list:
    """:func:`planned_alone` with ``choices={at: k}`` for k = 0, 1, ... of statement ``at``'s equally fast
    forward plans (at most ``most``), each ``(plan, its step costs)``: empty where the first is refused or not
    every step is priced, None for a later one refused or not priced (:func:`symcost.program.derive_tied`)."""
    try:
        plans = derive_tied(sub.program_for(cand), sub.mesh, options.get("dims"), options.get("hw"), at=at,
                            most=most, backward=options.get("backward", False), overlap=options.get("overlap", True),
                            moves=options.get("moves"))
    except SymcostError:
        return []
    costs = [p.step_costs() if p is not None else None for p in plans]
    if costs[0] is None:
        return []
    return [(p, c) if c is not None else None for p, c in zip(plans, costs)]


def planned_alone(sub: Space, cand: Candidate, options: dict, choices=None):
    """The engine's plan of a candidate of a statement alone, as the search plans candidates; None where it
    is refused or a size is unbound."""
    try:
        plan = derive_program(sub.program_for(cand), sub.mesh, options.get("dims"), options.get("hw"),
                              backward=options.get("backward", False), overlap=options.get("overlap", True),
                              moves=options.get("moves"), alternatives=False, choices=choices)
    except SymcostError:
        return None
    return plan if plan.step_costs() is not None else None


def vector(costs, mesh) -> tuple[float, ...]:
    """The resources a list of numeric step costs spends, totalled by :func:`symcost.pricing.totals`:
    compute, HBM, then each axis's collectives (a collective over several axes occupies each)."""
    env = Env.numeric(mesh)
    t = totals(costs, env, "none")
    links = tuple(float(totals([c for c in costs if not c.local and a.name in c.axes], env, "none").t_comms)
                  for a in mesh.axes)
    return (float(t.t_math), float(t.t_hbm)) + links
