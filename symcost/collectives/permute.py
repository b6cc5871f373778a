"""Permute: a collective-permute. Each device sends its one block to one other device: a relabelling of
which devices hold which block, every block keeping its shape (each dimension is split into as many
blocks before as after).

- ``Permute_XY(A[I_XY]) -> A[I_YX]`` reorders a dimension's axes (with X-major block order, removing a
  major axis needs it first);
- ``Permute_XY(A[I_X]) -> A[I_Y]`` (|X| = |Y|) and ``Permute_XYZ(A[B_YZ, D]) -> A[B_XZ, D]`` put the blocks
  on other devices, where the engine would otherwise gather and slice.

Which copy a device receives: the one whose coordinates on the axes the move leaves alone are its own, and
where the old layout was replicated (over X in ``A[I_Y] -> A[I_X]``) the coordinate the new layout frees
(Y) -- so every device sends exactly one block and receives exactly one, a permutation (as XLA's SPMD
partitioner relabels). Time: by its route on the link model (:func:`.links.route`): a torus neighbour
shift is one hop and one block over the one-way link; a switched domain is one hop (book Part 3's
latency of one hop per step, its one-way ICI bandwidth; with unbound axis sizes the worst route, each axis
crossed end to end). Its transpose is the permute back.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import sympy as sp

from .. import caching
from ..notation import format_axes
from . import links
from .base import Move, MoveRule, gradient, jax_axes, register


def differing(before, after) -> list[int]:
    """Indices of the dimensions whose axes the move changes."""
    return [i for i, (b, a) in enumerate(zip(before, after)) if b != a]


def changes(before, after) -> tuple:
    """The (old axes, new axes) of each dimension the move changes: all that decides where blocks go."""
    return tuple(sorted((before[i], after[i]) for i in differing(before, after)))


def moved_axes(before, after, order) -> tuple[str, ...]:
    """The axes the permute runs over (those of the changed dimensions, before or after), in ``order``."""
    used = {x for old, new in changes(before, after) for x in old + new}
    return tuple(a for a in order if a in used)


def _linear(coords, axes, size) -> int:
    k = 0
    for x in axes:
        k = k * size[x] + coords[x]
    return k


def _assign(coords: dict, axes, k: int, size) -> None:
    for x in reversed(axes):
        coords[x] = k % size[x]
        k //= size[x]


def source(coords: dict, change: tuple, size: dict, order) -> dict:
    """The coordinates of the device whose block the device at ``coords`` receives (``change``: see
    :func:`changes`; ``order``: the mesh's axis order)."""
    src = dict(coords)
    old = {x for o, _ in change for x in o}
    new = {x for _, n in change for x in n}
    for o, n in change:
        _assign(src, o, _linear(coords, n, size), size)
    freed = [x for x in order if x in old and x not in new]   # replicated after: this device's free coordinates
    taken = [x for x in order if x in new and x not in old]   # replicated before: the source's free coordinates
    _assign(src, taken, _linear(coords, freed, size), size)
    return src


def _steps(change: tuple, axes: tuple) -> list:
    """What :func:`source` does, with positions instead of names: ``(read, write)`` a step, the block number
    read off the device's coordinates at ``read`` (most significant first) and written into the source's at
    ``write`` (least significant first)."""
    pos = {a: i for i, a in enumerate(axes)}
    old = {x for o, _ in change for x in o}
    new = {x for _, n in change for x in n}
    steps = [([pos[x] for x in n], [pos[x] for x in reversed(o)]) for o, n in change]
    steps.append(([pos[x] for x in axes if x in old and x not in new],
                  [pos[x] for x in reversed(axes) if x in new and x not in old]))
    return steps


def _sources(change: tuple, axes: tuple, sizes: tuple) -> np.ndarray:
    """The source coordinates of every device of the permute, one row each, devices X-major (what
    :func:`source` says, with positions instead of names and all devices at once: this runs for every
    relabelling the layout search prices)."""
    grid = _grid(sizes)
    src = grid.copy()
    for read, write in _steps(change, axes):
        k = np.zeros(len(grid), dtype=np.int64)
        for i in read:
            k = k * sizes[i] + grid[:, i]
        for i in write:
            src[:, i] = k % sizes[i]
            k //= sizes[i]
    return src


def _digits(change: tuple, axes: tuple, sizes: tuple) -> tuple | None:
    """Where each step reads and writes as many axes, of the same sizes digit for digit (the common case:
    a mesh of equal axes), each source coordinate is one of the device's own: ``columns[i]`` the axis whose
    coordinate the source has on axis ``i`` (so the sources are :func:`_grid`'s columns in that order,
    :func:`_sources` without computing them). None where a step's digits do not line up."""
    columns = list(range(len(axes)))
    for read, write in _steps(change, axes):
        if len(read) != len(write):
            return None
        for w, r in zip(write, reversed(read)):
            if sizes[w] != sizes[r]:
                return None
            columns[w] = r
    return tuple(columns)


@caching.memoize(maxsize=64)
def _grid(sizes: tuple) -> np.ndarray:
    """Every device's coordinates, X-major (the order of ``itertools.product``), one row each."""
    grid = np.indices(sizes, dtype=np.int64).reshape(len(sizes), -1).T.copy()
    grid.flags.writeable = False
    return grid


@caching.memoize(maxsize=64)
def _grid_tuples(sizes: tuple) -> tuple:
    return tuple(map(tuple, _grid(sizes).tolist()))


def _as_pairs(src: np.ndarray, sizes: tuple) -> tuple:
    return tuple(zip(map(tuple, src.tolist()), _grid_tuples(sizes)))


def pairs(change: tuple, axes: tuple, sizes: tuple) -> tuple:
    """(source, destination) coordinates over ``axes`` of every device of the permute."""
    return _as_pairs(_sources(change, axes, sizes), sizes)


@caching.memoize(maxsize=65536)
def routed(change: tuple, axes: tuple, sizes: tuple, rings: tuple, kinds: tuple) -> tuple:
    """:func:`.links.route` of the permute (kept: many layouts share one change, and many changes one
    permutation, so the route is also kept by the permutation itself)."""
    columns = _digits(change, axes, sizes)
    if columns is not None:         # many changes, few permutations: kept by the columns they take
        return _route_by_columns(columns, sizes, rings, kinds)
    return _route_by(_sources(change, axes, sizes).tobytes(), sizes, rings, kinds)


@caching.memoize(maxsize=16384)
def _route_by_columns(columns: tuple, sizes: tuple, rings: tuple, kinds: tuple) -> tuple:
    return _route_by(np.ascontiguousarray(_grid(sizes)[:, list(columns)]).tobytes(), sizes, rings, kinds)


@caching.memoize(maxsize=16384)
def _route_by(sources: bytes, sizes: tuple, rings: tuple, kinds: tuple) -> tuple:
    src = np.frombuffer(sources, dtype=np.int64).reshape(-1, len(sizes))
    return links.route(_as_pairs(src, sizes), sizes, rings, kinds)


def _count(axes, mesh):
    out = sp.Integer(1)
    for a in axes:
        out = out * mesh.size_expr(a)
    return out


@caching.memoize(maxsize=4096)
def _options(current, free, mesh):
    """Ordered tuples of distinct ``free`` axes splitting a dimension into as many blocks as ``current``."""
    if not current:
        return ((),)
    want = _count(current, mesh)
    usable = [a for a in free if a in current or mesh.size_expr(a) != 1]
    fits = {frozenset(c) for r in range(1, len(usable) + 1) for c in itertools.combinations(usable, r)
            if _count(c, mesh) == want}                   # the product depends only on which axes
    return tuple(t for r in range(1, len(usable) + 1) for t in itertools.permutations(usable, r)
                 if frozenset(t) in fits)


@register
@dataclass(frozen=True)
class Permute(MoveRule):
    name = "Permute"
    signature = "Permute_XY(A[I_XY, J]) -> A[I_YX, J]"
    summary = "a collective-permute: each device's block goes to one other device (reorders or relabels the axes)"
    premium = 1e-6       # a route without a permute wins a tie

    def edges(self, layout, mesh):
        free = tuple(a for a in mesh.names if a not in layout.unreduced)
        options = [_options(ax, free, mesh) for ax in layout.axes]
        for choice in itertools.product(*options):
            if choice == layout.axes:
                continue
            flat = [a for ax in choice for a in ax]
            if len(flat) != len(set(flat)):
                continue
            yield Move(self.name, moved_axes(layout.axes, choice, mesh.names), layout, layout.with_axes(choice))

    def volume(self, move, env):
        return env.local_bytes(move.before)           # one block

    def link_time(self, move, env):
        block = self.volume(move, env)
        return env.kept_link_time((self.name, move.axes, move.before.axes, move.after.axes, block),
                                  lambda: self._routed_time(move, block, env))

    @staticmethod
    def _routed_time(move, block, env):
        sizes = links.sizes_known(move.axes, env)
        if sizes is None:
            return links.diameter_time(move.axes, block, env)
        change = changes(move.before.axes, move.after.axes)
        info = [env.axis_info(a) for a in move.axes]
        hop, loads = routed(change, move.axes, sizes, tuple(a.ring for a in info), tuple(a.kind for a in info))
        return links.routed_time(hop, loads, move.axes, block, env)

    def ring_bytes(self, move, env):
        return env.local_bytes(move.before)

    def transpose(self, move):
        return Move(self.name, move.axes, gradient(move.after), gradient(move.before))

    def explain(self, move, mesh=None):
        diff = differing(move.before.axes, move.after.axes)
        if len(diff) == 1 and set(move.before.axes[diff[0]]) == set(move.after.axes[diff[0]]):
            return f"reorders the blocks over {format_axes(move.axes)[1:]} (a collective-permute)"
        return (f"puts each block of {move.tensor} on another device (a collective-permute over "
                f"{format_axes(move.axes)[1:]}; no device gathers)")

    def device_pairs(self, move, mesh) -> list[tuple[int, int]]:
        """(source, destination) devices, numbered X-major over the permute's axes (as ``ppermute`` numbers them)."""
        sizes = tuple(mesh.axis(a).size for a in move.axes)
        size = dict(zip(move.axes, sizes))

        def lin(c):
            return _linear(dict(zip(move.axes, c)), move.axes, size)
        return [(lin(s), lin(t)) for s, t in pairs(changes(move.before.axes, move.after.axes), move.axes, sizes)]

    def simulate(self, blocks, move, grid):
        size = {a: grid.size(a) for a in grid.names}
        out = {}
        for d in blocks:
            coords = dict(zip(grid.names, d))
            src = source(coords, changes(move.before.axes, move.after.axes), size, grid.names)
            out[d] = blocks[tuple(src[a] for a in grid.names)].copy()
        return out

    def lower_jax(self, move, mesh, var):
        return [f"{var} = jax.lax.ppermute({var}, {jax_axes(move.axes)}, perm={self.device_pairs(move, mesh)})"]
