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

from dataclasses import dataclass, field, replace
from functools import cached_property

from .. import caching, dtypes
from ..einsum import LocalEinsum
from ..errors import ShardingError
from ..layout import Layout
from ..mesh import Mesh
from .products import einsum_results
from .ranking import Ranker
from .routes import Entry, Frontier, Route, direct_route, reachable, route_to, search

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

    def toward(self, frontier: Frontier, target: Layout) -> Entry | None:
        """:meth:`to` the search ``frontier`` goes on (from the sources it began with)."""
        found, complete = frontier.to(target)
        self.short = self.short or not complete
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
    prep = _prepared(operands, contracts, final_name, out_dims, mesh, ranker, out_dtype, names)
    search = _Bounded(mesh, ranker)
    search.short = prep.short
    return _finish(prep.finals, target, search, keep, ties_only, prep), search.short


#: the chains kept with their searches toward targets (and the result layouts with theirs): a search asks a
#: chain for another target soon after the first, or never (the searches are large: a wider context keeps
#: no more of them)
PREPARED = 512


class _Prepared:
    """A chain's einsum results, whatever its target, and its searches from them toward targets (one
    :class:`~.routes.Frontier` for each set of partial sums a target keeps, the results that hold them)."""

    def __init__(self, finals: list, short: bool):
        self.finals, self.short = finals, short
        self.frontiers: dict[frozenset, Frontier] = {}

    def frontier(self, keeps: frozenset, starts: list, ranker) -> Frontier:
        got = self.frontiers.get(keeps)
        if got is None or not got.current:
            got = self.frontiers[keeps] = Frontier(starts, ranker, LAYOUT_LIMIT)
        return got


@caching.memoize(maxsize=PREPARED, holds_state=True, widens=False)
def _prepared(operands, contracts, final_name, out_dims, mesh, ranker, out_dtype, names) -> _Prepared:
    """What a chain plan does before its target (kept, with the searches toward targets it makes: a search
    asks the chain of the same operands for several targets)."""
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
        results = einsum_results(left_layout, dist_left, right, dist_right, dims_out, name, dtype, mesh, ranker)
        if not results:
            raise ShardingError(_stuck(left_layout, right, ranker))
        if last:
            finals = results
        else:
            dist_left = search(results)      # each result layout once (see :func:`~.products.einsum_results`), in order
            left_dims = dims_out
    if n == 1:  # a one-operand einsum: a sum over dimensions or a transpose
        finals = einsum_results(operands[0], dist_left, None, None, out_dims, final_name,
                                 out_dtype or operands[0].dtype, mesh, ranker)
    return _Prepared(finals, search.short)


def _stuck(left: Layout, right: Layout, ranker) -> str:
    allowed = "none" if ranker.moves == () else ", ".join(ranker.moves) if ranker.moves else "every kind"
    return (f"no local einsum multiplies {left} by {right} with the moves the planner may insert ({allowed}): "
            f"write the collectives it needs, or allow more moves (--moves all)")


#: how many result layouts get a search of their own for the alternatives (the best plan always comes from
#: one search over every result at once)
ALTERNATIVE_RESULTS = 12


def _finish(finals, target, search, keep: int = 8, ties_only: bool = False, prep: _Prepared | None = None):
    """From the einsum's result layouts to the target. One search from all of them at once (each starting at
    its own cost) finds the cheapest whole plan in the search's additive cost; the cheapest few results
    each get a search of their own, for the alternatives and for the overlapped objective, which ranks
    the candidates in the end. The search to the target is not bounded (a plan must come out); the
    alternatives' searches are."""
    ranker = search.ranker
    order = finals     # each result once, cheapest first (as :func:`~.products.einsum_results` gives them)
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
    reached = _to_target(order, target, search, frontier=prep.frontier if prep is not None else None)
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
    got = _to_target([(layout, Entry(0.0, ()))], target, _Bounded(mesh, ranker),
                     frontier=lambda keeps, starts, ranker: _from_one(layout, ranker))
    return None if got is None else Route(got.cost, got.steps)


@caching.memoize(maxsize=PREPARED, holds_state=True, widens=False)
def _from_one(layout: Layout, ranker) -> Frontier:
    """The search from one result layout toward the targets its chains ask (kept: a result is asked for
    several)."""
    return Frontier([(layout, Entry(0.0, ()))], ranker, LAYOUT_LIMIT)


def _to_target(sources: list, target, search, limit=LAYOUT_LIMIT, frontier=None) -> Entry | None:
    """The cheapest way from any of ``sources`` (``(layout, entry)`` pairs, each layout once) to ``target``
    (None: the cheapest fully reduced layout); ``frontier(keeps, starts, ranker)``: the search from the
    sources that keep the target's partial sums, kept and gone on from where it stopped (a
    :class:`~.routes.Frontier`)."""
    if target is not None:
        starts = sources if not target.unreduced else [(lay, e) for lay, e in sources
                                                       if target.unreduced <= lay.unreduced]
        if not starts:
            return None
        name = starts[0][0].name
        tgt = target if target.name == name else Layout(name, target.dims, target.axes, target.unreduced, target.dtype)
        if frontier is not None:
            got = frontier(target.unreduced, starts, search.ranker)
            if got.current:
                return search.toward(got, tgt)
        return search.to(starts, tgt, limit)
    found = search(sources, accept=lambda l: not l.unreduced, limit=limit)     # each layout once, in order
    done = [l for l in found if not l.unreduced]
    return found[done[0]] if done else None
