"""The rewriter: from input layouts to the cheapest plan of collectives and local einsums.

Book Part 3's four cases fall out of one search. A local einsum is possible when every dimension is split
by the same axes wherever it appears and no axis splits two dimensions; such a choice, ``sigma``
(dimension -> axes), fixes each operand's local layout, the FLOPs, and the result's layout (contracting
axes become unreduced: Case 3). The rewriter enumerates every ``sigma``, prices reaching each operand's
layout with the cheapest sequence of moves (AllGather, Slice, AllToAll, ReduceScatter, AllReduce,
Permute: a shortest-path search over layouts), and prices taking the result to the requested layout the
same way. Chains are planned as a whole: the intermediate's layout is a free choice carried from one
einsum to the next, which is how the Megatron layer comes out as AllGather + ReduceScatter::

    >>> from symcost.mesh import parse_mesh
    >>> from symcost.layout import Layout
    >>> mesh = parse_mesh("X=4")
    >>> a, b = Layout.of("A", "IJ", [(), ("X",)]), Layout.of("B", "JK")
    >>> best = plan_chain([a, b], [None], "C", ("I", "K"), Layout.of("C", "IK"), mesh, Ranker(mesh))[0]
    >>> [s.kind for s in best.steps]          # Case 2: slice B, multiply, AllReduce the partial sums
    ['Slice', 'Einsum', 'AllReduce']

Costs used for the search are floats from a numeric :class:`~symcost.cost.Env` (the bound numbers, or
``RANKING_DEFAULTS`` for what is unbound); the plan's SymPy costs are built afterwards.
"""
from __future__ import annotations

import functools
import heapq
import itertools
from dataclasses import dataclass, replace

from .cost import Env, LocalEinsum, Move, collective_time, einsum_times
from .errors import ShardingError
from .layout import Layout
from .mesh import Mesh

INF = float("inf")
ANY = "any"  # a target meaning "whatever layout is cheapest, partial sums included"


# ------------------------------------------------------------------------------------------ moves


def _subsets(items):
    items = list(items)
    for r in range(1, len(items) + 1):
        yield from itertools.combinations(items, r)


def moves_from(layout: Layout, mesh: Mesh):
    """Every move one step away from ``layout``: the edges of the layout graph.

    Each is exact on the devices' blocks (DESIGN section 2, X-major order): AllGather removes the last
    axes of dimensions, Slice / ReduceScatter append an axis last, AllToAll moves the last axis of one
    dimension to the end of another, and Permute reorders a dimension's axes (the collective-permute a
    change of major axis needs).
    """
    used = layout.used_axes
    kinds = {a.name: a.kind for a in mesh.axes}
    shardable = [i for i, d in enumerate(layout.dims) if not d.isdigit()]
    # AllGather: a suffix of each dimension's axes, one collective over all of them (same link kind)
    choices = [range(len(ax) + 1) for ax in layout.axes]
    for cut in itertools.product(*choices):
        if not any(cut):
            continue
        removed = tuple(a for ax, c in zip(layout.axes, cut) for a in ax[len(ax) - c:])
        if len({kinds[a] for a in removed}) != 1:
            continue
        new_axes = tuple(ax[:len(ax) - c] for ax, c in zip(layout.axes, cut))
        yield Move("AllGather", mesh.order(removed), layout, replace(layout, axes=new_axes))
    free = [a for a in mesh.names if a not in used]
    for a in free:
        for i in shardable:
            yield Move("Slice", (a,), layout, _append(layout, i, (a,)))
    for i, ax in enumerate(layout.axes):
        if not ax:
            continue
        a = ax[-1]
        for j in shardable:
            if j != i:
                moved = replace(layout, axes=_set(layout.axes, i, ax[:-1]))
                yield Move("AllToAll", (a,), layout, _append(moved, j, (a,)))
        if len(ax) >= 2:
            for perm in itertools.permutations(ax):
                if perm != ax:
                    yield Move("Permute", tuple(a for a in mesh.names if a in ax), layout,
                               replace(layout, axes=_set(layout.axes, i, perm)))
    for subset in _subsets(mesh.order(layout.unreduced)):
        if len({kinds[a] for a in subset}) != 1:
            continue
        rest = layout.unreduced - set(subset)
        yield Move("AllReduce", subset, layout, replace(layout, unreduced=rest))
        for order in itertools.permutations(subset):
            for j in shardable:
                yield Move("ReduceScatter", subset, layout,
                           _append(replace(layout, unreduced=rest), j, order))


def _set(axes, i, value):
    return axes[:i] + (tuple(value),) + axes[i + 1:]


def _append(layout: Layout, i: int, new) -> Layout:
    return replace(layout, axes=_set(layout.axes, i, layout.axes[i] + tuple(new)))


# ---------------------------------------------------------------------------------------- ranking


class Ranker:
    """Prices steps with floats for the search. ``objective``: ``time`` (default) or ``comms``."""

    def __init__(self, mesh: Mesh, sizes=None, constants=None, objective: str = "time",
                 overlap: bool = True, moves=None):
        self.env = Env.numeric(mesh, sizes, constants)
        self.allowed = frozenset(moves) if moves is not None else None  # move kinds the search may use
        self.mesh = mesh
        self.objective = objective
        self.overlap = overlap
        self._move_cost: dict = {}
        self._edges: dict = {}

    def edges(self, lay: Layout) -> list:
        """The allowed moves out of ``lay`` with their costs (cached: searches revisit layouts)."""
        out = self._edges.get(lay)
        if out is None:
            out = [(m, self.move(m)) for m in moves_from(lay, self.mesh)
                   if self.allowed is None or m.kind in self.allowed]
            self._edges[lay] = out
        return out

    def move(self, m: Move) -> float:
        key = (m.kind, m.axes, m.before.dims, m.before.axes, m.after.axes, m.before.dtype)
        c = self._move_cost.get(key)
        if c is None:
            c = float(collective_time(m, self.env))
            if m.kind == "Permute":
                c *= 1.000001  # prefer a route without a permute when it costs the same
            self._move_cost[key] = c
        return c

    def einsum(self, e: LocalEinsum) -> float:
        _, _, t_math, t_hbm = einsum_times(e, self.env)
        t = max(t_math, t_hbm)
        return t * 1e-9 if self.objective == "comms" else t

    def total(self, steps) -> float:
        """The objective of a whole plan under the overlap policy (numbers only)."""
        t_math = t_hbm = 0.0
        per_axis: dict[str, float] = {}
        serial = 0.0
        comms = 0.0
        for s in steps:
            if isinstance(s, LocalEinsum):
                _, _, tm, th = einsum_times(s, self.env)
                t_math += tm
                t_hbm += th
                serial += max(tm, th)
            else:
                c = self.move(s)
                comms += c
                serial += c
                for a in s.axes:
                    per_axis[a] = per_axis.get(a, 0.0) + c
        if self.objective == "comms":
            return comms + 1e-9 * max(t_math, t_hbm)
        if not self.overlap:
            return serial
        return max(t_math, t_hbm, max(per_axis.values(), default=0.0))


# --------------------------------------------------------------------------------- layout search


@dataclass
class _Entry:
    cost: float
    steps: tuple


def search(sources: dict, mesh: Mesh, ranker: Ranker, target: Layout | None = None,
           accept=None) -> dict:
    """Cheapest move sequences from ``sources`` ({layout: _Entry}) to every reachable layout.

    Stops early once ``target`` (or the first layout ``accept`` approves) is settled.
    """
    best: dict[Layout, _Entry] = {}
    heap = []
    counter = itertools.count()
    for lay, ent in sources.items():
        heapq.heappush(heap, (ent.cost, next(counter), lay, ent.steps))
    while heap:
        cost, _, lay, steps = heapq.heappop(heap)
        if lay in best:
            continue
        best[lay] = _Entry(cost, steps)
        if (target is not None and lay == target) or (accept is not None and accept(lay)):
            break
        for m, c in ranker.edges(lay):
            if m.after in best:
                continue
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
    found = search({layout: _Entry(0.0, ())}, mesh, ranker, target=target)
    if target not in found:
        raise ShardingError(f"no sequence of collectives takes {layout} to {target}")
    e = found[target]
    return e.cost, e.steps


# ---------------------------------------------------------------------------------- einsum plans


@dataclass(frozen=True)
class Candidate:
    """A whole plan: moves and local einsums in order, with its numeric objective."""

    steps: tuple
    cost: float


def sigmas(dims, mesh_axes):
    """Every assignment of mesh axes to dimensions (each axis to at most one dimension, ordered)."""
    dims = list(dims)
    slots = [None] + dims
    for choice in itertools.product(slots, repeat=len(mesh_axes)):
        per = {d: [] for d in dims}
        for a, d in zip(mesh_axes, choice):
            if d is not None:
                per[d].append(a)
        multi = [d for d in dims if len(per[d]) > 1]
        if not multi:
            yield {d: tuple(per[d]) for d in dims}
            continue
        for perms in itertools.product(*(itertools.permutations(per[d]) for d in multi)):
            out = {d: tuple(per[d]) for d in dims}
            for d, p in zip(multi, perms):
                out[d] = p
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
               out_dtype: str | None = None, keep: int = 6, names=None) -> list[Candidate]:
    """See :func:`_plan_chain` (results are values: the same question is answered once)."""
    ops = tuple(tuple(o) if isinstance(o, list) else o for o in operands)
    return list(_plan_chain(ops, tuple(contracts), final_name, tuple(out_dims), target, mesh, ranker,
                            out_dtype, keep, tuple(names) if names else None))


@functools.lru_cache(maxsize=1024)
def _plan_chain(operands, contracts, final_name, out_dims, target, mesh: Mesh, ranker: Ranker,
                out_dtype: str | None = None, keep: int = 6, names=None) -> tuple:
    """Plan ``operands[0] * operands[1] * ...`` (left to right) into ``target`` (or, when None, into
    the cheapest fully reduced layout of ``out_dims``). ``operands[0]`` may be a tuple of layouts the
    tensor already has (each free to start from). Returns the best plan first, then the best plan
    of each other final choice of local einsum (distinct routes only, at most ``keep``)."""
    cands = plan_chain_candidates(operands, contracts, final_name, out_dims, target, mesh, ranker,
                                  out_dtype, names)
    if not cands:
        raise ShardingError(f"no plan reaches {target}" if target not in (None, ANY) else "no plan found")
    ranked = sorted(cands, key=lambda c: (c.cost, len(c.steps)))
    seen, out = set(), []
    for c in ranked:
        k = _summary_key(c.steps)
        if k not in seen:
            seen.add(k)
            out.append(c)
        if len(out) > keep:
            break
    return tuple(out)


def _summary_key(steps):
    return tuple((s.kind, s.axes, s.after.dims, s.after.axes) if isinstance(s, Move)
                 else ("E", s.inputs, s.output.axes) for s in steps)


def plan_chain_candidates(operands, contracts, final_name, out_dims, target, mesh, ranker,
                          out_dtype=None, names=None):
    n = len(operands)
    out_dims = tuple(out_dims)
    later_of = []
    for k in range(1, n):
        later = set(out_dims)
        for t in operands[k + 1:]:
            later |= set(t.dims)
        later_of.append(later)
    first = operands[0]
    if isinstance(first, (tuple, list)):  # layouts of the first operand that are already at hand
        operands = [first[0]] + list(operands[1:])
        dist_left = search({lay: _Entry(0.0, ()) for lay in first}, mesh, ranker)
    else:
        dist_left = search({first: _Entry(0.0, ())}, mesh, ranker)
    left_dims = operands[0].dims
    finals = []
    for k in range(1, n):
        right = operands[k]
        last = k == n - 1
        dims_out = product_dims(left_dims, right.dims, contracts[k - 1], later_of[k - 1],
                                out_dims if last else None)
        name = final_name if last else (names[k - 1] if names else f"T{k}")
        dtype = out_dtype if (last and out_dtype) else _wider(operands[0].dtype, right.dtype)
        dist_right = search({right: _Entry(0.0, ())}, mesh, ranker)
        left_proto = next(iter(dist_left))
        results = _einsum_results(left_proto, dist_left, right, dist_right, dims_out, name, dtype,
                                  mesh, ranker)
        if last:
            finals = results
        else:
            sources: dict[Layout, _Entry] = {}
            for lay, ent in results:
                cur = sources.get(lay)
                if cur is None or ent.cost < cur.cost:
                    sources[lay] = ent
            dist_left = search(sources, mesh, ranker)
            left_dims = dims_out
    if n == 1:  # a one-operand einsum: a sum over dimensions or a transpose
        finals = _einsum_results(operands[0], dist_left, None, None, out_dims, final_name,
                                 out_dtype or operands[0].dtype, mesh, ranker)
    return _finish(finals, target, mesh, ranker)


def _finish(finals, target, mesh, ranker, keep: int = 8):
    """From each result layout, the cheapest way to the target; one candidate per distinct route.
    Results are taken cheapest first and the search stops once a result cannot beat the ``keep``-th
    best whole plan found so far in the search's additive cost (the way on costs nothing at best); the
    plans kept are then ranked by the overlapped objective."""
    cands = []
    by_result: dict[Layout, list] = {}
    for lay, ent in finals:
        by_result.setdefault(lay, []).append(ent)
    order = sorted(by_result.items(), key=lambda kv: min(e.cost for e in kv[1]))
    bound = INF
    additive: list[float] = []
    for lay, ents in order:
        if min(e.cost for e in ents) > bound:
            break
        if target == ANY:
            tail = _Entry(0.0, ())
        elif target is not None:
            tgt = replace(target, name=lay.name)
            if not tgt.unreduced <= lay.unreduced:
                continue
            found = search({lay: _Entry(0.0, ())}, mesh, ranker, target=tgt)
            tail = found.get(tgt)
        else:
            found = search({lay: _Entry(0.0, ())}, mesh, ranker, accept=lambda l: not l.unreduced)
            done = [l for l in found if not l.unreduced]
            tail = found[done[0]] if done else None
        if tail is None:
            continue
        for ent in ents:
            steps = ent.steps + tail.steps
            cands.append(Candidate(steps, ranker.total(steps)))
            additive.append(ent.cost + tail.cost)
        if len(additive) >= keep:
            bound = sorted(additive)[keep - 1]
    return cands


def _wider(a: str, b: str) -> str:
    from .notation import DTYPE_BYTES
    return a if DTYPE_BYTES[a] >= DTYPE_BYTES[b] else b


def _einsum_results(left, dist_left, right, dist_right, dims_out, name, dtype, mesh, ranker):
    """For every sigma whose operand layouts are reachable: (result layout, entry)."""
    operands = [left] if right is None else [left, right]
    all_dims = list(left.dims) + ([d for d in right.dims if d not in left.dims] if right else [])
    shardable = [d for d in all_dims if not d.isdigit()]
    summed = [d for d in all_dims if d not in dims_out]
    # which unreduced sets an operand may keep (at most one operand keeps any: the product is linear)
    keep_opts = [(frozenset(), frozenset())]
    keep_opts += [(u, frozenset()) for u in {lay.unreduced for lay in dist_left} if u]
    if right is not None:
        keep_opts += [(frozenset(), u) for u in {lay.unreduced for lay in dist_right} if u]
    out = []
    best_per_result: dict[Layout, _Entry] = {}
    for keep_l, keep_r in keep_opts:
        kept = keep_l | keep_r
        axes_avail = [a for a in mesh.names if a not in kept]
        for sigma in sigmas(shardable, axes_avail):
            lay_l = replace(left, axes=tuple(sigma.get(d, ()) for d in left.dims), unreduced=keep_l)
            ent_l = dist_left.get(lay_l)
            if ent_l is None:
                continue
            if right is not None:
                lay_r = replace(right, axes=tuple(sigma.get(d, ()) for d in right.dims), unreduced=keep_r)
                ent_r = dist_right.get(lay_r)
                if ent_r is None:
                    continue
                ins = (lay_l, lay_r)
                base = ent_l.cost + ent_r.cost
                steps = ent_l.steps + ent_r.steps
            else:
                ins = (lay_l,)
                base = ent_l.cost
                steps = ent_l.steps
            unreduced = kept | {a for d in summed for a in sigma.get(d, ())}
            res = Layout(name, tuple(dims_out), tuple(sigma.get(d, ()) for d in dims_out),
                         frozenset(unreduced), dtype)
            e = LocalEinsum(ins, res, tuple(all_dims), tuple(sigma.get(d, ()) for d in all_dims))
            cost = base + ranker.einsum(e)
            cur = best_per_result.get(res)
            if cur is None or cost < cur.cost:
                best_per_result[res] = _Entry(cost, steps + (e,))
    out.extend(best_per_result.items())
    return out

