"""AllToAll_X: ``A[I_X, J] -> A[I, J_X]`` moves the last axis of one dimension to the end of another
(book Part 3). V / (4 W_ici) on a 1D ring (a quarter of an AllGather), V max(sizes) / (4 N W_ici) on an
N-device torus; its transpose is the AllToAll the other way.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..notation import format_axes
from . import links
from .base import Move, MoveRule, append_axes, changed_dims, gradient, jax_axes, register, set_axes, shardable


@register
@dataclass(frozen=True)
class AllToAll(MoveRule):
    name = "AllToAll"
    signature = "AllToAll_X(A[I_X, J]) -> A[I, J_X]"
    summary = "moves the last axis of one dimension to the end of another"

    def edges(self, layout, mesh):
        for i, ax in enumerate(layout.axes):
            if not ax:
                continue
            moved = replace(layout, axes=set_axes(layout.axes, i, ax[:-1]))
            for j in shardable(layout):
                if j != i:
                    yield Move(self.name, (ax[-1],), layout, append_axes(moved, j, (ax[-1],)))

    def volume(self, move, env):
        return env.local_bytes(move.before) * env.group_size(move.axes)   # the whole array over the group

    def link_time(self, move, env):
        g = links.group(move.axes, env)
        if links.trivial(g):
            return env.zero, env.zero
        bw, frac = links.bandwidth(g, env)
        V = self.volume(move, env)
        if g.kind == "ici" and g.ring:
            big = g.sizes[0] if len(g.sizes) == 1 else env.max(*g.sizes)
            t = V * big / (4 * g.n * bw)
        elif g.kind == "ici":        # a line: each block crosses (n-1)/2 links on average, one way
            t = V * frac / bw / 2
        else:                        # switched or DCN: each device sends (n-1)/n of its block
            t = V * (g.n - 1) / (g.n * g.n) / bw
        return env.T_min * links.hops(g, env), t

    def ring_bytes(self, move, env):
        n = env.group_size(move.axes)
        return env.local_bytes(move.before) * (n - 1) / n

    def transpose(self, move):
        return Move(self.name, move.axes, gradient(move.after), gradient(move.before))

    def explain(self, move):
        return f"moves axis {format_axes(move.axes)[1:]} to another dimension of {move.tensor}"

    def reason(self, axes, src, want):
        missing = [a for a in axes if a not in src.sharding_axes]
        if missing:
            return f"mesh axis {missing[0]!r} does not shard any dimension of {src.name}"
        return None

    def simulate(self, blocks, move, grid):
        """Split along the gaining dimension, exchange, concatenate along the losing one."""
        import numpy as np   # only when simulating: it costs a tenth of a second to import
        (a,) = move.axes
        i, j = changed_dims(move)
        n = grid.size(a)
        out = {}
        for d in blocks:
            pieces = []
            for p in grid.group(d, (a,)):
                blk = blocks[p]
                size = blk.shape[j] // n
                sl = [slice(None)] * blk.ndim
                sl[j] = slice(grid.coord(d, a) * size, (grid.coord(d, a) + 1) * size)
                pieces.append(blk[tuple(sl)])
            out[d] = np.concatenate(pieces, axis=i)
        return out

    def lower_jax(self, move, mesh, var):
        i, j = changed_dims(move)
        return [f"{var} = jax.lax.all_to_all({var}, {jax_axes(move.axes)}, split_axis={j}, concat_axis={i}, "
                f"tiled=True)"]
