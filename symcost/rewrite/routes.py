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

from ..errors import ShardingError
from ..layout import Layout
from ..mesh import Mesh
from .ranking import Ranker


@dataclass
class Entry:
    cost: float
    steps: tuple


def search(sources: dict, mesh: Mesh, ranker: Ranker, target: Layout | None = None, accept=None) -> dict:
    """Cheapest move sequences from ``sources`` ({layout: Entry}) to every reachable layout (Dijkstra).

    Stops early once ``target`` (or the first layout ``accept`` approves) is settled.
    """
    best: dict[Layout, Entry] = {}
    heap = []
    counter = itertools.count()
    for lay, ent in sources.items():
        heapq.heappush(heap, (ent.cost, next(counter), lay, ent.steps))
    while heap:
        cost, _, lay, steps = heapq.heappop(heap)
        if lay in best:
            continue
        best[lay] = Entry(cost, steps)
        if (target is not None and lay == target) or (accept is not None and accept(lay)):
            break
        for m, c in ranker.edges(lay):
            if m.after not in best:
                heapq.heappush(heap, (cost + c, next(counter), m.after, steps + (m,)))
    return best


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
