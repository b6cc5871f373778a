"""Permute: a collective-permute that reorders a dimension's axes, ``A[I_{XY}] -> A[I_{YX}]``.

With X-major block order, removing or inserting a major axis leaves blocks on the wrong devices; a
permute first makes it exact. Each device sends its block to one other device: V/n bytes, one hop over
the one-way link (as XLA's collective-permute; book Part 3's latency of one hop). Its transpose is the
permute back.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from ..notation import format_axes
from . import links
from .base import Move, MoveRule, gradient, jax_axes, register, set_axes


@register
@dataclass(frozen=True)
class Permute(MoveRule):
    name = "Permute"
    signature = "Permute_XY(A[I_XY, J]) -> A[I_YX, J]"
    summary = "reorders the blocks of a dimension over its axes (a collective-permute)"
    premium = 1e-6       # a route without a permute wins a tie

    def edges(self, layout, mesh):
        for i, ax in enumerate(layout.axes):
            if len(ax) < 2:
                continue
            for perm in itertools.permutations(ax):
                if perm != ax:
                    yield Move(self.name, tuple(a for a in mesh.names if a in ax), layout,
                               replace(layout, axes=set_axes(layout.axes, i, perm)))

    def volume(self, move, env):
        return env.local_bytes(move.before)           # one block

    def link_time(self, move, env):
        g = links.group(move.axes, env)
        if links.trivial(g):
            return env.zero, env.zero
        return env.T_min, self.volume(move, env) / links.one_way(g, env)

    def ring_bytes(self, move, env):
        return env.local_bytes(move.before)

    def transpose(self, move):
        return Move(self.name, move.axes, gradient(move.after), gradient(move.before))

    def explain(self, move):
        return f"reorders the blocks over {format_axes(move.axes)[1:]} (a collective-permute)"

    def pairs(self, move, mesh) -> list[tuple[int, int]]:
        """(source, destination) devices, numbered X-major over the permuted axes."""
        i = next(k for k, (a, b) in enumerate(zip(move.before.axes, move.after.axes)) if a != b)
        old, new = move.before.axes[i], move.after.axes[i]
        names = mesh.order(old)
        sizes = [mesh.axis(x).size for x in names]

        def linear(coords, order):
            out = 0
            for x in order:
                out = out * mesh.axis(x).size + coords[x]
            return out
        coords = [dict(zip(names, c)) for c in itertools.product(*(range(s) for s in sizes))]
        return [(linear(next(s for s in coords if linear(s, old) == linear(c, new)), names), linear(c, names))
                for c in coords]

    def simulate(self, blocks, move, grid):
        i = next(k for k, (a, b) in enumerate(zip(move.before.axes, move.after.axes)) if a != b)
        old, new = move.before.axes[i], move.after.axes[i]
        out = {}
        for d in blocks:
            want = grid.block_index(d, new)
            src = next(p for p in grid.group(d, old) if grid.block_index(p, old) == want)
            out[d] = blocks[src].copy()
        return out

    def lower_jax(self, move, mesh, var):
        names = mesh.order(move.before.axes[next(k for k, (a, b) in enumerate(
            zip(move.before.axes, move.after.axes)) if a != b)])
        return [f"{var} = jax.lax.ppermute({var}, {jax_axes(names)}, perm={self.pairs(move, mesh)})"]
