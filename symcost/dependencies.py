"""A plan's dependency graph and what it decides: which step reads which (the last writer of each
layout it reads), the longest path through it, and the chains of collectives that feed each other, whose
times add up (:func:`symcost.pricing.totals` takes the step time from them).

    >>> from symcost.pricing import OpCost
    >>> def step(reads, writes, axes=(), t=0.0):
    ...     return OpCost(0, 0, 0, 0, t, t, axes, not axes, t, t, reads=reads, writes=writes,
    ...                   kernel="collective" if axes else "einsum")
    >>> costs = [step(("x",), ("y",), ("X",), 1.0), step(("y",), ("z",), ("Y",), 2.0), step(("z",), ("w",))]
    >>> depends_on(costs)
    [(), (0,), (1,)]
"""
from __future__ import annotations

from .env import Env


def depends_on(costs) -> list[tuple[int, ...]]:
    """For each operation, the earlier operations whose result it reads (the last writer of each layout it
    reads): the plan's dependency graph. A layout no step wrote is the program's input."""
    writer: dict = {}
    get = writer.get
    out: list[tuple[int, ...]] = []
    for i, c in enumerate(costs):
        reads = c.reads
        if len(reads) == 1:         # most operations read one layout: one lookup, no set
            w = get(reads[0])
            out.append(() if w is None else (w,))
        else:
            out.append(tuple(sorted({w for w in map(get, reads) if w is not None})))
        for t in c.writes:
            writer[t] = i
    return out


def longest_path(costs, deps, env: Env):
    """The longest path of the dependency graph: work that feeds the next runs one after the other,
    whatever else runs beside it. Local work weighs its ``seconds``; a collective its latency, which no
    overlap hides -- its bandwidth term may run beside the einsums it feeds or follows, split into chunks
    as a collective matmul does (and it is counted on its axes); collectives that feed each other directly
    are summed whole by :func:`_collective_chains`."""
    z = env.zero
    dist: list = []
    for c, before in zip(costs, deps):
        dist.append((c.seconds if c.local else c.latency) + (env.max(*(dist[i] for i in before)) if before else z))
    return env.max(*dist) if dist else z


def collective_chains(costs, deps, env: Env) -> list:
    """The times of chains of collectives that feed each other (through views such as a local slice) and
    share no mesh axis: each runs only once the one before it has delivered, so a chain is a sum. Chains
    whose collectives share an axis are already summed on that axis; an einsum or elementwise step breaks a
    chain (the book's collective matmul splits it, so its operands arrive and its result leaves in chunks
    while it computes)."""
    chain = [c.kernel in ("collective", "") for c in costs]     # collectives and views
    # j -> the paths ending at j, each (path, its collectives' time summed in order, how many, the axes
    # they all share): a path's time is its prefix's plus its last collective's, the sum env.total takes
    paths: dict[int, list[tuple]] = {}
    fed = set()
    z = env.zero
    for j, before in enumerate(deps):
        if not chain[j]:
            continue
        c = costs[j]
        preds = [i for i in before if chain[i]]
        fed.update(preds)
        if c.local:
            ps = [(p + (j,), t, n, common) for i in preds for p, t, n, common in paths[i]] or [((j,), z, 0, None)]
        else:
            ax, tc = frozenset(c.axes), c.t_comms
            ps = [(p + (j,), t + tc, n + 1, ax if common is None else common & ax)
                  for i in preds for p, t, n, common in paths[i]] or [((j,), z + tc, 1, ax)]
        if len(ps) > 64:    # keep the longest few: a chain's time only grows along it
            ps = sorted(ps, key=lambda e: len(e[0]))[-64:]
        paths[j] = ps
    out, seen = [], set()
    for j, ps in paths.items():
        if j in fed:
            continue
        for p, t, n, common in ps:
            if n < 2 or common:
                continue
            if p not in seen:
                seen.add(p)
                out.append(t)
    return out


def chains_may_exceed(costs, step: float) -> bool:
    """Whether a chain of collectives may be longer than ``step``: in numbers, only where the collectives
    (and views) that feed each other, taken as groups that read one another's results, sum to more than it
    in some group. A chain lies in one group and sums some of its collectives' times in program order, as
    the group's sum is taken here, so it is never more than that sum (rounding to nearest is monotone and
    the times are not negative). One pass, no dependency graph: most plans' collectives each feed an
    einsum, and then no chain is traced. Numbers only."""
    writer: dict = {}               # layout -> the collective or view that last wrote it (None: other work)
    parent: dict[int, int] = {}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = i = parent[parent[i]]
        return i
    for j, c in enumerate(costs):
        if c.kernel in ("collective", ""):
            parent[j] = j
            for t in c.reads:
                w = writer.get(t)
                if w is not None:
                    parent[root(w)] = root(j)
            for t in c.writes:
                writer[t] = j
        else:
            for t in c.writes:
                writer[t] = None
    sums: dict[int, float] = {}
    for j in parent:               # in program order, as a chain sums its collectives
        c = costs[j]
        if not c.local:
            r = root(j)
            sums[r] = sums.get(r, 0.0) + c.t_comms
    return any(v > step for v in sums.values())
