"""ReduceScatter_{X,K}: ``A[I, K]{U_X} -> A[I, K_X]`` sums the partial sums over X and scatters them
along K, appending X last (book Part 3). Time V / (W_ici * links) on a ring, V the consumed array; the
transpose is an AllGather. Over axes of several link kinds it reduces inside the slice first and crosses
the slow links with 1/|inside| of the data (book Part 5, multi-slice).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..notation import format_axes
from . import links
from .base import (Move, MoveRule, append_axes, changed_dims, gradient, group_bytes, jax_axes, passes, register,
                   shardable, subsets)


@register
@dataclass(frozen=True)
class ReduceScatter(MoveRule):
    name = "ReduceScatter"
    signature = "ReduceScatter_X(A[I, J]{U_X}) -> A[I, J_X]"
    summary = "sums partial sums over the axes and scatters the result along a dimension (axes appended last)"

    def edges(self, layout, mesh):
        for subset in subsets(mesh.order(layout.unreduced)):
            rest = layout.with_unreduced(layout.unreduced - set(subset))
            for order in itertools.permutations(subset):
                for j in shardable(layout):
                    yield Move(self.name, subset, layout, append_axes(rest, j, order))

    def volume(self, move, env):
        return group_bytes(env, move.before, move.after, move.axes)    # the array it consumes

    def link_time(self, move, env):
        return links.hierarchical(move.axes, self.volume(move, env), env)

    def ring_bytes(self, move, env):
        n = env.group_size(move.axes)
        return self.volume(move, env) * (n - 1) / n

    def transpose(self, move):
        return Move("AllGather", move.axes, gradient(move.after), gradient(move.before))

    def explain(self, move, mesh=None):
        out = f"sums the partial sums over {format_axes(move.axes)[1:]} and scatters them"
        return out + passes(move, mesh, ("ReduceScatter",))

    def reason(self, axes, src, want):
        missing = [a for a in axes if a not in src.unreduced]
        if missing:
            return f"{src.name} holds no partial sums over {missing[0]!r} (no {{U_{missing[0]}}})"
        return None

    def simulate(self, blocks, move, grid):
        _, j = changed_dims(move)
        order = move.after.axes[j][len(move.before.axes[j]):]
        out = {}
        for d in blocks:
            total = sum(blocks[p] for p in grid.group(d, move.axes))
            size = total.shape[j] // grid.count(order)
            k = grid.block_index(d, order)
            sl = [slice(None)] * total.ndim
            sl[j] = slice(k * size, (k + 1) * size)
            out[d] = total[tuple(sl)].copy()
        return out

    def lower_jax(self, move, mesh, var):
        _, j = changed_dims(move)
        order = move.after.axes[j][len(move.before.axes[j]):]
        return [f"{var} = jax.lax.psum_scatter({var}, {jax_axes(order)}, scatter_dimension={j}, tiled=True)"]
