"""Routes between layouts: the cheapest sequence of moves, a shortest path over the layout graph.

    >>> from symcost.layout import Layout
    >>> from symcost.mesh import parse_mesh
    >>> mesh = parse_mesh("X=4")
    >>> _, moves = reshard(Layout.of("A", "IJ", [("X",), ()]), Layout.of("A", "IJ", [(), ("X",)]), mesh,
    ...                    Ranker.make(mesh))
    >>> [str(m) for m in moves]
    ['AllToAll_X(A[I_X, J]) -> A[I, J_X]']
"""
from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping
from dataclasses import replace
from functools import cached_property
from typing import NamedTuple

from .. import caching, progress
from ..errors import ShardingError
from ..layout import Layout
from ..mesh import Mesh
from .ranking import Ranker

INF = float("inf")
SETTLED = -INF


class Entry(NamedTuple):
    """The cheapest way found to a layout: its cost in the search's weights and its moves."""

    cost: float
    steps: tuple


class Found(dict):
    """{layout: Entry} of the layouts a search settled; ``complete`` is False when it stopped at its limit
    with layouts left unexplored."""

    complete = True
    ids: dict = {}            # {layout number: Entry} in the numbering ``generation`` of the graph searched
    generation = -1

    @cached_property
    def unreduced_sets(self) -> list:
        """The nonempty sets of unreduced axes among the settled layouts, in a fixed order (kept: the
        operands' searches are shared by every plan of a candidate)."""
        return sorted({lay.unreduced for lay in self} - {frozenset()}, key=sorted)


#: a graph's numbering, unique in the process: a table of layout numbers is read only in the numbering that
#: made it (a graph starting again, or another context's graph, numbers layouts afresh)
_GENERATIONS = itertools.count()


class Graph:
    """The layout graph one ranker searches, its layouts numbered as they are met and each one's priced moves
    kept as ``(move, number of the layout it leads to, weight)``: a search then keys its tables by small
    integers instead of hashing layouts at every edge. Bounded: past :data:`GRAPH_LIMIT` layouts it starts
    again (between searches, never during one)."""

    def __init__(self, ranker: Ranker):
        self.ranker = ranker
        self.restart()

    def restart(self) -> None:
        self.generation = next(_GENERATIONS)     # what a number means: tables keyed by numbers check it
        self.number: dict[Layout, int] = {}
        self.layouts: list[Layout] = []
        self.out: list[tuple | None] = []

    def of(self, lay: Layout) -> int:
        i = self.number.get(lay)
        if i is None:
            i = self.number[lay] = len(self.layouts)
            self.layouts.append(lay)
            self.out.append(None)
        return i

    def edges(self, i: int) -> tuple:
        out = self.out[i]
        if out is None:
            of = self.of
            out = self.out[i] = tuple((m, of(m.after), w) for m, w in self.ranker.edges(self.layouts[i]))
        return out


#: the most layouts a ranker's graph keeps numbered (each with its priced moves) before it starts again
GRAPH_LIMIT = 50_000


@caching.memoize(maxsize=16, holds_state=True)
def graph(ranker: Ranker) -> Graph:
    """The numbered layout graph of ``ranker`` (kept: every search of a plan, and of a search's candidates,
    walks the same one)."""
    return Graph(ranker)


def search(sources, mesh: Mesh, ranker: Ranker, target: Layout | None = None, accept=None,
           limit: int | None = None) -> Found:
    """Cheapest move sequences from ``sources`` ({layout: Entry}, or ``(layout, entry)`` pairs, each layout
    once) to every reachable layout (Dijkstra).

    Stops early once ``target`` (or the first layout ``accept`` approves) is settled, or once it has looked
    at ``limit`` moves (the layouts settled by then are the cheapest ones, and exact; ``complete`` says
    whether anything was left).
    """
    settled, complete, g = _settled(sources, ranker, target, accept, limit)
    best = Found(zip(map(g.layouts.__getitem__, settled), settled.values()))
    best.complete = complete
    best.ids, best.generation = settled, g.generation     # the same, by layout number
    return best


def route_to(sources, ranker: Ranker, target: Layout, limit: int | None = None) -> tuple[Entry | None, bool]:
    """:func:`search` to ``target`` read for the target alone: ``(its entry or None, complete)``, without
    the table of every layout settled on the way (most of a plan's searches ask for one layout)."""
    settled, complete, g = _settled(sources, ranker, target, None, limit)
    return settled.get(g.of(target)), complete


def _settled(sources, ranker: Ranker, target: Layout | None, accept, limit: int | None) -> tuple:
    """The search itself: ``({layout number: Entry} of the layouts settled, complete, the graph)``."""
    f = Frontier(sources, ranker, limit)
    complete = f.advance(f.g.of(target) if target is not None else -1, accept)
    return f.settled, complete, f.g


class Frontier:
    """A search from ``sources`` (Dijkstra's, every search here is one): each :meth:`advance` settles layouts
    until its target is settled, and a target asked later (:meth:`to`) is read off what is settled, or the
    search goes on from where it stopped. While it looks for a target it does not queue a move no cheaper
    than the target's best so far (such a move would come off the queue after the target): it sets it aside,
    in its order, and queues it when a later target is asked. So the layouts are settled in the order one
    search for each target alone settles them, and each target's route and ``complete`` are that search's.
    A search's chain plans ask the same einsum results for several targets, whose searches settled the same
    layouts again (the LLaMA 3 8B layer's bounded search on ``X=4,Y=2,Z=2``: about two targets a chain's
    results, about fifteen a result layout alone; 17 million moves looked at, not 33 million)."""

    def __init__(self, sources, ranker: Ranker, limit: int | None):
        self.g = g = graph(ranker)
        if len(g.layouts) > GRAPH_LIMIT:
            g.restart()
        self.generation, self.limit, gen = g.generation, limit, g.generation
        pairs = sources.items() if isinstance(sources, Mapping) else sources
        self.waiting = sorted([(ent.cost, k, ent.number if getattr(ent, "generation", -1) == gen else g.of(lay), ent)
                               for k, (lay, ent) in enumerate(pairs)])
        self.tentative: dict[int, float] = {}
        for cost, _, i, _ in self.waiting:
            if cost < self.tentative.get(i, INF):
                self.tentative[i] = cost
        self.settled: dict[int, Entry] = {}
        self.heap: list = []
        self.aside: list = []     # moves no cheaper than the last target's best: queued when a later one is asked
        self.tick = itertools.count().__next__
        self.w, self.looked, self.stopped = 0, 0, False
        self.unexpanded: tuple | None = None     # (layout number, cost) settled as a target, its moves not queued

    @property
    def current(self) -> bool:
        """Whether the graph still numbers layouts as when the search began (it starts again past
        :data:`GRAPH_LIMIT`)."""
        return self.g.generation == self.generation

    def to(self, target: Layout) -> tuple[Entry | None, bool]:
        """``(target's entry or None, complete)``, as :func:`route_to` gives them."""
        goal = self.g.of(target)
        got = self.settled.get(goal)
        if got is not None:
            return got, True
        if self.stopped:
            return None, False
        complete = self.advance(goal, None)
        return self.settled.get(goal), complete

    def advance(self, goal: int, accept) -> bool:
        """Settle layouts until layout number ``goal`` is settled (-1: none), or one ``accept`` approves, or
        none is left (True), or :attr:`limit` moves have been looked at (False: the search stopped short)."""
        settled, tentative, heap, waiting = self.settled, self.tentative, self.heap, self.waiting
        layouts = self.g.layouts
        tget, push, pop, inf, entry = tentative.get, heapq.heappush, heapq.heappop, INF, tuple.__new__
        edges, priced, limit, tick, aside = self.g.edges, self.g.out, self.limit, self.tick, self.aside.append
        if self.aside:
            heap.extend(self.aside)
            heapq.heapify(heap)
            self.aside.clear()
        bound = tget(goal, inf)      # the target's best so far
        n_waiting, w, looked = len(waiting), self.w, self.looked
        i, cost = self.unexpanded if self.unexpanded is not None else (-1, 0.0)
        self.unexpanded = None
        try:
            while True:
                if i >= 0:       # the moves out of the layout settled last (priced once a graph and kept)
                    out = priced[i] or edges(i)
                    looked += len(out)
                    if len(settled) % 256 == 0:
                        progress.advance(256, "searching layouts", inner=True)
                    if limit is not None and looked > limit:
                        self.stopped = True
                        return False
                    for m, j, weight in out:
                        new = cost + weight
                        if new < tget(j, inf):
                            tentative[j] = new
                            # a move no cheaper than the target's best would come off the queue after the
                            # target: it is set aside, in its order, for a target asked later
                            if new < bound or j == goal:
                                if j == goal:
                                    bound = new
                                push(heap, (new, tick(), j, i, m))
                            else:
                                aside((new, tick(), j, i, m))
                # the sources wait in their own queue, cheapest first (a source before a move of equal cost,
                # as one heap of them all would give them); a route's steps are written when it is settled
                if w < n_waiting and (not heap or waiting[w][0] <= heap[0][0]):
                    cost, _, i, ent = waiting[w]
                    w += 1
                    if i in settled:
                        i = -1
                        continue
                    settled[i] = entry(Entry, (cost, ent.steps))
                elif heap:
                    cost, _, i, parent, m = pop(heap)
                    if i in settled:
                        i = -1
                        continue
                    settled[i] = entry(Entry, (cost, settled[parent].steps + (m,)))
                else:
                    return True
                tentative[i] = SETTLED
                if i == goal or (accept is not None and accept(layouts[i])):
                    self.unexpanded = (i, cost)
                    return True
        finally:
            self.w, self.looked = w, looked


class Route(NamedTuple):
    """A kept route: its cost and its moves (read as an :class:`~symcost.rewrite.routes.Entry` is)."""

    cost: float
    steps: tuple


class Reachable(Mapping):
    """A search's settled layouts, read-only: {layout: Entry} (an immutable pair), ``complete`` and
    ``unreduced_sets`` as :class:`~symcost.rewrite.routes.Found` has them. Kept answers are shared by every
    plan that starts from the same layouts, so none of them may be changed by one: ``found`` is taken as it
    is (a search's own table, which nothing else holds) and only read from here on."""

    __slots__ = ("_routes", "complete", "unreduced_sets", "get", "ids", "generation")
    __frozen_value__ = True

    def __init__(self, found: Found):
        self._routes = found
        self.complete = found.complete
        self.unreduced_sets = tuple(found.unreduced_sets)
        self.get = found.get  # type: ignore[method-assign]  # the planner's hot path: a dict's own lookup
        numbered = len(found.ids) == len(found)     # the search's own table, by layout number
        self.ids = found.ids if numbered else {}
        self.generation = found.generation if numbered else -1
    def __getitem__(self, layout):
        return self._routes[layout]

    def __iter__(self):
        return iter(self._routes)

    def __len__(self) -> int:
        return len(self._routes)

    def __contains__(self, layout) -> bool:
        return layout in self._routes


@caching.memoize(maxsize=128)
def reachable(layouts: tuple, mesh, ranker, limit) -> Reachable:
    """Every layout reachable from ``layouts`` (each where a tensor already is) and its cheapest route:
    the same operand layouts recur in every plan of a search, so the answer is kept (read-only). Keyed in
    the caller's order: of two equally cheap routes the search takes the one from the earlier source, so a
    set here would make the plan depend on the process's string hashing."""
    return Reachable(search({lay: Entry(0.0, ()) for lay in layouts}, mesh, ranker, limit=limit))


def _distance(lay: Layout, target: Layout) -> int:
    """How far ``lay`` is from ``target``: partial sums it must still reduce, and for each dimension the
    axes after the prefix the two share (to gather on one side, to slice on the other)."""
    d = len(lay.unreduced ^ target.unreduced)
    for have, want in zip(lay.axes, target.axes):
        common = next((i for i, (a, b) in enumerate(zip(have, want)) if a != b), min(len(have), len(want)))
        d += len(have) - common + len(want) - common
    return d


def direct_route(layout: Layout, target: Layout, ranker: Ranker) -> Entry | None:
    """A route from ``layout`` to ``target`` without a search: at each step the cheapest allowed move that
    brings it closer (reduce, gather the axes out of place, slice the target's in). Not the cheapest route in
    general; what a bounded search falls back on. None when no move brings it closer."""
    cost, steps, lay = 0.0, [], layout
    while lay != target:
        here = _distance(lay, target)
        closer = [m for m in ranker.moves_out(lay) if _distance(m.after, target) < here]
        if not closer:
            return None
        m = min(closer, key=ranker.weight)
        cost, lay = cost + ranker.weight(m), m.after
        steps.append(m)
    return Entry(cost, tuple(steps))


def reshard(layout: Layout, target: Layout, mesh: Mesh, ranker: Ranker) -> tuple[float, tuple]:
    """The cheapest moves from ``layout`` to ``target`` (same tensor, dimensions and dtype)."""
    if layout.dims != target.dims:
        raise ShardingError(f"cannot reshard {layout} to {target}: the dimensions differ")
    if not target.unreduced <= layout.unreduced:
        extra = ", ".join(sorted(target.unreduced - layout.unreduced))
        raise ShardingError(f"{target} asks for partial sums over {extra}, which {layout} does not hold")
    target = replace(target, name=layout.name, dtype=layout.dtype)
    found = search({layout: Entry(0.0, ())}, mesh, ranker, target=target)
    if target not in found:
        raise ShardingError(f"no sequence of collectives takes {layout} to {target}")
    e = found[target]
    return e.cost, e.steps
