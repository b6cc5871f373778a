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
from dataclasses import dataclass, replace

from .. import progress
from ..errors import ShardingError
from ..layout import Layout
from ..mesh import Mesh
from .ranking import Ranker

INF = float("inf")


@dataclass
class Entry:
    cost: float
    steps: tuple


class Found(dict):
    """{layout: Entry} of the layouts a search settled; ``complete`` is False when it stopped at its limit
    with layouts left unexplored."""

    complete = True


def search(sources: dict, mesh: Mesh, ranker: Ranker, target: Layout | None = None, accept=None,
           limit: int | None = None) -> Found:
    """Cheapest move sequences from ``sources`` ({layout: Entry}) to every reachable layout (Dijkstra).

    Stops early once ``target`` (or the first layout ``accept`` approves) is settled, or once it has looked
    at ``limit`` moves (the layouts settled by then are the cheapest ones, and exact; ``complete`` says
    whether anything was left).
    """
    best = Found()
    tentative: dict[Layout, float] = {}
    heap = []
    counter = itertools.count()
    push, pop, edges = heapq.heappush, heapq.heappop, ranker.edges
    for lay, ent in sources.items():
        push(heap, (ent.cost, next(counter), lay, ent.steps))
    looked = 0
    while heap:
        cost, _, lay, steps = pop(heap)
        if lay in best:
            continue
        best[lay] = Entry(cost, steps)
        if (target is not None and lay == target) or (accept is not None and accept(lay)):
            break
        out = edges(lay)     # priced once per layout and kept: every search of a plan shares them
        looked += len(out)
        if len(best) % 256 == 0:
            progress.advance(256, "searching layouts")
        if limit is not None and looked > limit:
            best.complete = False
            break
        for m, after, w in out:
            if after in best:
                continue
            new = cost + w
            if new < tentative.get(after, INF):
                tentative[after] = new
                push(heap, (new, next(counter), after, steps + (m,)))
    return best


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
