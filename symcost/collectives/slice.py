"""Slice_X: ``A[I, J] -> A[I_X, J]`` shards a replicated dimension, appending X last. Local: each
device keeps the part its own coordinate selects; no communication, no time (book Part 3, Case 2: "slice
the replicated operand"). Its transpose gathers.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..notation import format_axes
from .base import Move, MoveRule, append_axes, gradient, register, shardable


@register
@dataclass(frozen=True)
class Slice(MoveRule):
    name = "Slice"
    signature = "Slice_X(A[I, J]) -> A[I_X, J]"
    summary = "shards a replicated dimension (local: no communication)"
    communicates = False

    def edges(self, layout, mesh):
        used = layout.used_axes
        for a in (a for a in mesh.names if a not in used):
            for i in shardable(layout):
                yield Move(self.name, (a,), layout, append_axes(layout, i, (a,)))

    def volume(self, move, env):
        return env.zero

    def link_time(self, move, env):
        return env.zero, env.zero

    def ring_bytes(self, move, env):
        return env.zero

    def transpose(self, move):
        return Move("AllGather", move.axes, gradient(move.after), gradient(move.before))

    def explain(self, move, mesh=None):
        return f"slices the replicated {move.tensor} over {format_axes(move.axes)[1:]} (no communication)"

    def simulate(self, blocks, move, grid):
        added = [aft[len(ax):] for ax, aft in zip(move.before.axes, move.after.axes)]
        out = {}
        for d, blk in blocks.items():
            sl = []
            for i, new in enumerate(added):
                size = blk.shape[i] // grid.count(new)
                k = grid.block_index(d, new)
                sl.append(slice(k * size, (k + 1) * size))
            out[d] = blk[tuple(sl)].copy()
        return out

    def lower_jax(self, move, mesh, var):
        out = []
        for i, (ax, aft) in enumerate(zip(move.before.axes, move.after.axes)):
            for axis in aft[len(ax):]:
                n = mesh.axis(axis).size
                out.append(f"{var} = jax.lax.dynamic_slice_in_dim({var}, jax.lax.axis_index({axis!r}) * "
                           f"({var}.shape[{i}] // {n}), {var}.shape[{i}] // {n}, axis={i})")
        return out
