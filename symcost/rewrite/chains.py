"""Plans of einsums and chains: every assignment of mesh axes to dimensions, priced end to end.

Book Part 3's four cases fall out of one search. A local einsum is possible when every dimension is split
by the same axes wherever it appears and no axis splits two dimensions; such a choice, ``sigma``
(dimension -> axes), fixes each operand's local layout, the FLOPs, and the result's layout (contracting
axes become unreduced: Case 3). Each ``sigma`` is priced with the cheapest routes to its operand layouts
and from its result to the requested layout. A chain carries its intermediate's layout from one einsum
to the next, which is how the Megatron layer comes out as AllGather + ReduceScatter::

    >>> from symcost.mesh import parse_mesh
    >>> from symcost.layout import Layout
    >>> mesh = parse_mesh("X=4")
    >>> a, b = Layout.of("A", "IJ", [(), ("X",)]), Layout.of("B", "JK")
    >>> small_k = Ranker.make(mesh, {"I": 256, "J": 8192, "K": 64})
    >>> best = plan_chain([a, b], [None], "C", ("I", "K"), Layout.of("C", "IK"), mesh, small_k)[0]
    >>> [s.kind for s in best.steps]          # Case 2, small K: slice B, multiply, AllReduce the partial sums
    ['Slice', 'Einsum', 'AllReduce']
    >>> [s.kind for s in plan_chain([a, b], [None], "C", ("I", "K"), Layout.of("C", "IK"), mesh,
    ...                             Ranker.make(mesh, {"I": 1024, "J": 256, "K": 8192}))[0].steps]
    ['AllGather', 'Einsum']
"""
from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import NamedTuple

from .. import caching, dtypes
from ..einsum import LocalEinsum
from ..errors import ShardingError
from ..layout import Layout
from ..mesh import Mesh
from .ranking import Ranker
from .routes import Entry, Route, direct_route, graph, reachable, route_to, search

ANY = "any"  # a target meaning "whatever layout is cheapest, partial sums included"


@dataclass(frozen=True)
class Candidate:
    """A whole plan: moves and local einsums in order, with its numeric objective and (to break ties, where
    latency floors make plans equally fast) the throughput time of its moves, both priced by ``ranker`` when
    first read: the one plan a chain has when only the best is asked for is never ranked, and pricing its
    dependency graph was most of its cost."""

    steps: tuple
    ranker: Ranker = field(compare=False, repr=False)
    bounded: bool = False   # some search behind it stopped at LAYOUT_LIMIT

    @cached_property
    def cost(self) -> float:
        return self.ranker.total(self.steps)

    @cached_property
    def moved(self) -> float:
        return self.ranker.moved(self.steps)

    @cached_property
    def rank(self) -> tuple:
        """How plans are ordered: the objective, then the moves' throughput time (nine significant digits,
        so that sums taken in different orders tie), then fewer steps (kept: a walk compares the plans of
        every einsum it meets again, and their ties)."""
        return (float(f"{self.cost:.9g}"), float(f"{self.moved:.9g}"), len(self.steps))


def sigmas(dims, mesh_axes):
    """Every assignment of mesh axes to dimensions (each axis to at most one dimension, ordered)."""
    return _sigmas(tuple(dims), tuple(mesh_axes))


@caching.memoize(maxsize=1024)
def _sigmas(dims, mesh_axes) -> tuple:
    return tuple(MappingProxyType(a) for a in _assignments(list(dims), mesh_axes))


def _assignments(dims, mesh_axes):
    for choice in itertools.product([None] + dims, repeat=len(mesh_axes)):
        per = {d: [] for d in dims}
        for a, d in zip(mesh_axes, choice):
            if d is not None:
                per[d].append(a)
        multi = [d for d in dims if len(per[d]) > 1]
        for perms in itertools.product(*(itertools.permutations(per[d]) for d in multi)):
            out = {d: tuple(per[d]) for d in dims}
            out.update(zip(multi, perms))
            yield out


def product_dims(left_dims, right_dims, contract, later: set, out_dims=None):
    """Dimensions of ``left * right``: the final output's when given, else those still needed."""
    if out_dims is not None:
        return tuple(out_dims)
    union = list(left_dims) + [d for d in right_dims if d not in left_dims]
    if contract is not None:
        return tuple(d for d in union if d not in contract)
    shared = set(left_dims) & set(right_dims)
    return tuple(d for d in union if d not in shared or d in later)


def plan_chain(operands, contracts, final_name, out_dims, target, mesh: Mesh, ranker: Ranker,
               out_dtype: str | None = None, keep: int = 6, names=None, ties_only: bool = False) -> list[Candidate]:
    """Plan ``operands[0] * operands[1] * ...`` (left to right) into ``target`` (a layout; None: the
    cheapest fully reduced layout of ``out_dims``; ANY: the cheapest, partial sums included).
    An operand may be a tuple of layouts the tensor already has (each free to start from). Returns
    the best plan first, then the best plan of each other final choice (distinct routes, at most ``keep``;
    ``keep=0``: the best plan alone, without the searches the alternatives need). ``ties_only``: the best
    plan and those as fast (a search's candidate, whose runners-up nobody reads): another route is priced
    whole only where a lower bound of its time (:meth:`Ranker.least`) does not already show it slower; the
    best and its ties are the same. Answers are values: the same question is answered once."""
    ops = tuple(tuple(o) if isinstance(o, list) else o for o in operands)
    return list(_plan_chain(ops, tuple(contracts), final_name, tuple(out_dims), target, mesh, ranker,
                            out_dtype, keep, tuple(names) if names else None, ties_only))


@caching.memoize(maxsize=2048)
def _plan_chain(operands, contracts, final_name, out_dims, target, mesh, ranker, out_dtype, keep, names,
                ties_only=False) -> tuple:
    cands = _candidates(operands, contracts, final_name, out_dims, target, mesh, ranker, out_dtype, names, keep,
                        ties_only)
    if not cands:
        raise ShardingError(f"no plan reaches {target}" if target not in (None, ANY) else "no plan found")
    if len(cands) == 1:     # the best, unranked (it may never need its price)
        return tuple(cands)
    seen, out = set(), []
    for c in sorted(cands, key=lambda c: c.rank):
        k = _route_key(c.steps)
        if k not in seen:
            seen.add(k)
            out.append(c)
        if len(out) > keep:
            break
    return tuple(out)


def _route_key(steps):
    return tuple(("E", s.inputs, s.output.axes) if isinstance(s, LocalEinsum)
                 else (s.kind, s.axes, s.after.dims, s.after.axes) for s in steps)


#: the most moves one search looks at (layouts are settled cheapest first, so the routes to those it
#: settles stay exact); past it, costlier layouts are not explored and the plan says so. Meshes of up to
#: four axes stay under it (every relabelling of six axes is a move, so five axes already do not).
LAYOUT_LIMIT = 20_000


class _Bounded:
    """Searches for one plan, at most LAYOUT_LIMIT layouts each; remembers whether one stopped short."""

    def __init__(self, mesh, ranker):
        self.mesh, self.ranker, self.short = mesh, ranker, False

    def __call__(self, sources, target=None, accept=None, limit=LAYOUT_LIMIT):
        """``sources``: {layout: Entry}, or ``(layout, entry)`` pairs, each layout once."""
        pairs = sources.items() if isinstance(sources, dict) else sources
        if target is None and accept is None and all(e.cost == 0.0 and not e.steps for _, e in pairs):
            found = reachable(tuple(lay for lay, _ in pairs), self.mesh, self.ranker, limit)
        else:
            found = search(sources, self.mesh, self.ranker, target=target, accept=accept, limit=limit)
        self.short = self.short or not found.complete
        return found

    def to(self, sources, target: Layout, limit=LAYOUT_LIMIT) -> Entry | None:
        """The cheapest route from ``sources`` to ``target`` alone (None: not reached)."""
        found, complete = route_to(sources, self.ranker, target, limit=limit)
        self.short = self.short or not complete
        return found


def _candidates(operands, contracts, final_name, out_dims, target, mesh, ranker, out_dtype=None, names=None,
                keep: int = 6, ties_only: bool = False):
    cands, short = _candidates_bounded(operands, contracts, final_name, out_dims, target, mesh, ranker, out_dtype,
                                       names, keep, ties_only)
    return [replace(c, bounded=True) for c in cands] if short else cands


def _candidates_bounded(operands, contracts, final_name, out_dims, target, mesh, ranker, out_dtype, names, keep,
                        ties_only):
    search = _Bounded(mesh, ranker)
    n = len(operands)
    at_hand = [o if isinstance(o, tuple) else (o,) for o in operands]  # layouts each operand already has
    operands = [o[0] for o in at_hand]
    later_of = []
    for k in range(1, n):
        later = set(out_dims)
        for t in operands[k + 1:]:
            later |= set(t.dims)
        later_of.append(later)
    dist_left = search({lay: Entry(0.0, ()) for lay in at_hand[0]})
    left_dims, left_layout = operands[0].dims, operands[0]
    finals = []
    for k in range(1, n):
        right = operands[k]
        last = k == n - 1
        dims_out = product_dims(left_dims, right.dims, contracts[k - 1], later_of[k - 1], out_dims if last else None)
        name = final_name if last else (names[k - 1] if names else f"T{k}")
        dtype = out_dtype if (last and out_dtype) else dtypes.wider(operands[0].dtype, right.dtype)
        dist_right = search({lay: Entry(0.0, ()) for lay in at_hand[k]})
        if not dist_left:
            raise ShardingError(_stuck(left_layout, right, ranker))
        left_layout = next(iter(dist_left))
        results = _einsum_results(left_layout, dist_left, right, dist_right, dims_out, name, dtype, mesh, ranker)
        if not results:
            raise ShardingError(_stuck(left_layout, right, ranker))
        if last:
            finals = results
        else:
            dist_left = search(results)      # each result layout once (see :func:`_cheapest`), in order
            left_dims = dims_out
    if n == 1:  # a one-operand einsum: a sum over dimensions or a transpose
        finals = _einsum_results(operands[0], dist_left, None, None, out_dims, final_name,
                                 out_dtype or operands[0].dtype, mesh, ranker)
    return _finish(finals, target, search, keep, ties_only), search.short


def _stuck(left: Layout, right: Layout, ranker) -> str:
    allowed = "none" if ranker.moves == () else ", ".join(ranker.moves) if ranker.moves else "every kind"
    return (f"no local einsum multiplies {left} by {right} with the moves the planner may insert ({allowed}): "
            f"write the collectives it needs, or allow more moves (--moves all)")


#: how many result layouts get a search of their own for the alternatives (the best plan always comes from
#: one search over every result at once)
ALTERNATIVE_RESULTS = 12


def _finish(finals, target, search, keep: int = 8, ties_only: bool = False):
    """From the einsum's result layouts to the target. One search from all of them at once (each starting at
    its own cost) finds the cheapest whole plan in the search's additive cost; the cheapest few results
    each get a search of their own, for the alternatives and for the overlapped objective, which ranks
    the candidates in the end. The search to the target is not bounded (a plan must come out); the
    alternatives' searches are."""
    ranker = search.ranker
    order = finals     # each result once, cheapest first (as :func:`_einsum_results` gives them)
    cands, seen = [], set()
    best = [float("inf")]     # the best objective so far, as ranked (nine digits)

    def add(steps):
        k = _route_key(steps)
        if k in seen:
            return
        seen.add(k)
        if ties_only and best[0] != float("inf"):  # a route whose time is already above the best's (as
            least = ranker.least(steps)                # ranked) is neither
            if least is not None and float(f"{least:.9g}") > best[0]:
                return
        c = Candidate(steps, ranker)
        if ties_only:
            best[0] = min(best[0], c.rank[0])
        cands.append(c)

    if target == ANY:
        for _, ent in order[:ALTERNATIVE_RESULTS + keep]:
            add(ent.steps)
        return cands
    reached = _to_target(order, target, search)
    if reached is None and search.short:   # the search stopped short of the target: go there directly
        lay, ent = order[0]
        goal = replace(target, name=lay.name) if target is not None else replace(lay, unreduced=frozenset())
        tail = direct_route(lay, goal, ranker)
        reached = Entry(ent.cost + tail.cost, ent.steps + tail.steps) if tail is not None else None
    if not keep:            # the best alone: nothing to compare it with
        return [] if reached is None else [Candidate(reached.steps, ranker)]
    if reached is not None:
        add(reached.steps)
    short = search.short   # an alternative's search stopping short leaves the best plan exact
    for lay, ent in order[:ALTERNATIVE_RESULTS]:
        tail = _tail(lay, target, search.mesh, ranker)
        if tail is not None:
            add(ent.steps + tail.steps)
    search.short = short
    return cands


@caching.memoize(maxsize=2048)
def _tail(layout: Layout, target, mesh, ranker) -> Route | None:
    """The cheapest way from one result layout to ``target``, kept: the plans of a search end in the same
    few result and target layouts."""
    got = _to_target([(layout, Entry(0.0, ()))], target, _Bounded(mesh, ranker))
    return None if got is None else Route(got.cost, got.steps)


def _to_target(sources: list, target, search, limit=LAYOUT_LIMIT) -> Entry | None:
    """The cheapest way from any of ``sources`` (``(layout, entry)`` pairs, each layout once) to ``target``
    (None: the cheapest fully reduced layout)."""
    if target is not None:
        starts = sources if not target.unreduced else [(lay, e) for lay, e in sources
                                                       if target.unreduced <= lay.unreduced]
        if not starts:
            return None
        name = starts[0][0].name
        tgt = target if target.name == name else Layout(name, target.dims, target.axes, target.unreduced, target.dtype)
        return search.to(starts, tgt, limit)
    found = search(sources, accept=lambda l: not l.unreduced, limit=limit)     # each layout once, in order
    done = [l for l in found if not l.unreduced]
    return found[done[0]] if done else None


def _einsum_results(left, dist_left, right, dist_right, dims_out, name, dtype, mesh, ranker):
    """For every sigma whose operand layouts are reachable: (result layout, entry), cheapest first."""
    # which unreduced sets an operand may keep (at most one operand keeps any: the product is linear)
    keep_opts = [(frozenset(), frozenset())]
    keep_opts += [(u, frozenset()) for u in dist_left.unreduced_sets]
    if right is not None:
        keep_opts += [(frozenset(), u) for u in dist_right.unreduced_sets]
    lkey, rkey = (left.name, left.dims, left.dtype), None if right is None else (right.name, right.dims, right.dtype)
    dims_out, g = tuple(dims_out), graph(ranker)
    if dist_left.generation == g.generation and (right is None or dist_right.generation == g.generation):
        # both operands' searches numbered their layouts as the ranker's graph does now: each operand and
        # result looked up by its number (a layout hashed in Python at every lookup was most of the time)
        tables = [_numbered_einsums(lkey, rkey, keep, dims_out, name, dtype, mesh, ranker, g.generation)
                  for keep in keep_opts]
        return _cheapest(tables, dist_left.ids.get, dist_right.ids.get if right is not None else None, g.generation)
    tables = [_local_einsums(lkey, rkey, keep, dims_out, name, dtype, mesh, ranker) for keep in keep_opts]
    return _cheapest(tables, dist_left.get, dist_right.get if right is not None else None)


def _cheapest(tables, get_l, get_r, generation: int = -1) -> list:
    """(result layout, entry) for each result the sigmas of ``tables`` reach: the first cheapest, its cost the
    operands' entries' (looked up by ``get_l``, ``get_r``: None where an operand cannot be reached) plus the
    einsum's weight; each sigma ``(left's key, right's key or None, result's key, einsum, weight)``; the keys
    are layout numbers in the graph's numbering ``generation`` (-1: the layouts themselves)."""
    best: dict = {}     # result's key -> its _Product: the first cheapest
    new, product, bget = tuple.__new__, _Product, best.get   # a _Product made without a Python-level constructor
    numbered = generation >= 0
    for table in tables:
        for kl, kr, kres, e, t in table:
            ent_l = get_l(kl)
            if ent_l is None:
                continue
            if kr is None:
                ent_r, cost = None, ent_l.cost + t
            else:
                ent_r = get_r(kr)
                if ent_r is None:
                    continue
                cost = ent_l.cost + ent_r.cost + t
            got = bget(kres)
            if got is None or cost < got[0]:
                best[kres] = new(product, (cost, ent_l, ent_r, e, kres, generation) if numbered else
                                 (cost, ent_l, ent_r, e, -1, -1))
    return [(p[3].output, p) for p in sorted(best.values(), key=operator.itemgetter(0))]   # cheapest first, stable


class _Product(NamedTuple):
    """A result's route, read as an :class:`~symcost.rewrite.routes.Entry` is: its steps (the operands'
    routes, then the einsum) are joined when asked, since a search reads those of the few results it
    settles and most of an einsum's results are never settled. ``number``: the result layout's number in
    the layout graph's numbering ``generation`` (a search then need not look it up; -1: not known)."""

    cost: float
    left: object
    right: object
    einsum: LocalEinsum
    number: int
    generation: int

    @property
    def steps(self) -> tuple:
        right = self.right.steps if self.right is not None else ()
        return self.left.steps + right + (self.einsum,)


@caching.memoize(maxsize=512)
def _local_einsums(left, right, keep, dims_out, name, dtype, mesh, ranker) -> tuple:
    """Every local einsum of ``left * right`` (each ``(name, dims, dtype)``) with ``keep`` (the unreduced sets
    the left and the right operand keep): ``(left layout, right layout or None, result layout, einsum, its
    search weight)`` for each sigma. They depend on the operands' names and dimensions, not on where the
    operands are, so every plan of a search that multiplies the same tensors shares them."""
    (lname, ldims, ldtype), (keep_l, keep_r) = left, keep
    rdims = right[1] if right is not None else ()
    all_dims = list(ldims) + [d for d in rdims if d not in ldims]
    shardable = [d for d in all_dims if not d.isdigit()]
    summed = [d for d in all_dims if d not in dims_out]
    kept = keep_l | keep_r
    out = []
    for sigma in sigmas(shardable, [a for a in mesh.names if a not in kept]):
        lay_l = Layout(lname, ldims, tuple(sigma.get(d, ()) for d in ldims), keep_l, ldtype)
        lay_r = None if right is None else Layout(right[0], rdims, tuple(sigma.get(d, ()) for d in rdims),
                                                  keep_r, right[2])
        unreduced = kept | {a for d in summed for a in sigma.get(d, ())}
        res = Layout(name, dims_out, tuple(sigma.get(d, ()) for d in dims_out), frozenset(unreduced), dtype)
        ins = (lay_l,) if lay_r is None else (lay_l, lay_r)
        e = LocalEinsum(ins, res, tuple(all_dims), tuple(sigma.get(d, ()) for d in all_dims))
        out.append((lay_l, lay_r, res, e, ranker.einsum(e)))
    return tuple(out)


@caching.memoize(maxsize=512)
def _numbered_einsums(left, right, keep, dims_out, name, dtype, mesh, ranker, generation) -> tuple:
    """:func:`_local_einsums` with each layout's number in the ranker's graph, numbering ``generation``:
    ``(left's number, right's or None, result's, einsum, its search weight)``."""
    of = graph(ranker).of
    return tuple((of(lay_l), None if lay_r is None else of(lay_r), of(res), e, t)
                 for lay_l, lay_r, res, e, t in _local_einsums(left, right, keep, dims_out, name, dtype, mesh, ranker))
