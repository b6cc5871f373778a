"""AllGather_X: ``A[I_X, J] -> A[I, J]`` removes the last axes of dimensions (book Part 3).

Time V / (W_ici * links) on a ring, V the gathered block; the transpose is a ReduceScatter. Over axes of
several link kinds (``AllGather_{SX}``, S between slices) it runs the book's way round (book Part 5,
multi-slice): across the slow links first, on 1/|X| of the data, then inside the slice.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..notation import format_axes
from . import links
from .base import Move, MoveRule, changed_dims, gradient, group_bytes, jax_axes, passes, register


@register
@dataclass(frozen=True)
class AllGather(MoveRule):
    name = "AllGather"
    signature = "AllGather_X(A[I_X, J]) -> A[I, J]"
    summary = "removes the last axes of dimensions; every device of the group gets the group's blocks"

    def edges(self, layout, mesh):
        for cut in itertools.product(*(range(len(ax) + 1) for ax in layout.axes)):
            if not any(cut):
                continue
            removed = tuple(a for ax, c in zip(layout.axes, cut) for a in ax[len(ax) - c:])
            kept = tuple(ax[:len(ax) - c] for ax, c in zip(layout.axes, cut))
            yield Move(self.name, mesh.order(removed), layout, layout.with_axes(kept))

    def volume(self, move, env):
        return group_bytes(env, move.after, move.before, move.axes)    # the array it produces, on the group

    def link_time(self, move, env):
        return links.hierarchical(move.axes, self.volume(move, env), env)

    def ring_bytes(self, move, env):
        n = env.group_size(move.axes)
        return self.volume(move, env) * (n - 1) / n

    def transpose(self, move):
        lost, _ = changed_dims(move)
        if sum(len(a) != len(b) for a, b in zip(move.before.axes, move.after.axes)) != 1:
            return None    # gathered from several dimensions: no single ReduceScatter undoes it
        return Move("ReduceScatter", move.axes, gradient(move.after, move.axes), gradient(move.before))

    def explain(self, move, mesh=None):
        out = f"gathers {move.tensor} over {format_axes(move.axes)[1:]}"
        return out + passes(move, mesh, ("AllGather",))

    def reason(self, axes, src, want):
        missing = [a for a in axes if a not in src.sharding_axes]
        if missing:
            return f"mesh axis {missing[0]!r} does not shard any dimension of {src.name}"
        if want.unreduced != src.unreduced:
            return f"it does not change the unreduced axes of {src.name}"
        return None

    def simulate(self, blocks, move, grid):
        """Each device concatenates the blocks of its group along each dimension, in the order of that
        dimension's gathered axes (as a real all_gather does)."""
        import numpy as np   # only when simulating: it costs a tenth of a second to import
        gathered = [tuple(a for a in ax if a in move.axes) for ax in move.before.axes]
        out = {}
        for d, local in blocks.items():
            new = np.empty([s * grid.count(g) for s, g in zip(local.shape, gathered)])
            for p in grid.group(d, move.axes):
                sl = tuple(slice(grid.block_index(p, g) * s, (grid.block_index(p, g) + 1) * s)
                           for s, g in zip(local.shape, gathered))
                new[sl] = blocks[p]
            out[d] = new
        return out

    def lower_jax(self, move, mesh, var):
        out = []
        for i, (ax, aft) in enumerate(zip(move.before.axes, move.after.axes)):
            removed = ax[len(aft):]
            if removed:
                out.append(f"{var} = jax.lax.all_gather({var}, {jax_axes(removed)}, axis={i}, tiled=True)")
        return out
