"""A product's local einsums: every assignment of mesh axes to its dimensions (a *sigma*), and for each
result layout the cheapest of them from where its operands can be (:func:`einsum_results`).

A local einsum is possible when every dimension is split by the same axes wherever it appears and no axis
splits two dimensions; a sigma fixes each operand's local layout, the FLOPs and the result's layout
(contracting axes become unreduced: book Part 3's Case 3)::

    >>> [dict(s) for s in sigmas(("I", "J"), ("X",))]
    [{'I': (), 'J': ()}, {'I': ('X',), 'J': ()}, {'I': (), 'J': ('X',)}]
"""
from __future__ import annotations

import itertools
import operator
from types import MappingProxyType
from typing import NamedTuple, Protocol

from .. import caching
from ..einsum import LocalEinsum
from ..layout import Layout
from .routes import graph


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


def einsum_results(left, dist_left, right, dist_right, dims_out, name, dtype, mesh, ranker):
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


class _Routed(Protocol):
    """What reaches a layout: its cost and its steps (a search's entry, a kept route, a product's)."""

    @property
    def cost(self) -> float: ...

    @property
    def steps(self) -> tuple: ...


class _Product(NamedTuple):
    """A result's route, read as an :class:`~symcost.rewrite.routes.Entry` is: its steps (the operands'
    routes, then the einsum) are joined when asked, since a search reads those of the few results it
    settles and most of an einsum's results are never settled. ``number``: the result layout's number in
    the layout graph's numbering ``generation`` (a search then need not look it up; -1: not known)."""

    cost: float
    left: _Routed
    right: _Routed | None
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
