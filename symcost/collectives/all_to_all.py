"""AllToAll_X: ``A[I_X, J] -> A[I, J_X]`` moves the last axes of one dimension to the end of another
(book Part 3); ``AllToAll_{XY}(A[I_{XY}, J]) -> A[I, J_{XY}]`` moves a group of them at once, in their
order. Its transpose is the AllToAll the other way.

Time: the bytes on the busiest link of its route (:func:`.links.all_to_all_load`): on an A x B x ... torus
of N devices with wraparound the book's V max(A, B, ...) / (4 N W_ici) (Part 3, "ND AllToAll"), V the
whole array over the group -- V / (4 W_ici) on one ring, a quarter of an AllGather; on a line of n the
middle link carries n^2/4 blocks of V / n^2 each way, V / (2 W_ici); a switched domain (NVLink, DCN) sends
(N-1)/N of each device's block through its link, V (N-1) / (N^2 W). Over axes of several link kinds the
passes run one kind after another and their times add up (book Part 5).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..notation import format_axes
from . import links
from .base import (Move, MoveRule, append_axes, changed_dims, gradient, jax_axes, passes, register, set_axes,
                   shardable)


def moved_group(move: Move) -> tuple[str, ...]:
    """The axes that move, in their order in the dimension they leave (and join)."""
    i, _ = changed_dims(move)
    assert i is not None             # an AllToAll takes axes off one dimension
    return move.before.axes[i][len(move.after.axes[i]):]


def pass_time(g: links.Group, V, env):
    """(latency, throughput) of one AllToAll pass over the group ``g`` (one link kind), V the array over it:
    the busiest link of its route (:func:`.links.all_to_all_load`)."""
    if links.trivial(g):
        return env.zero, env.zero
    return env.T_min * links.hops(g, env), links.all_to_all_load(g, V, env)


@register
@dataclass(frozen=True)
class AllToAll(MoveRule):
    name = "AllToAll"
    signature = "AllToAll_X(A[I_X, J]) -> A[I, J_X]"
    summary = "moves the last axes of one dimension, in their order, to the end of another"

    def edges(self, layout, mesh):
        for i, ax in enumerate(layout.axes):
            for k in range(1, len(ax) + 1):
                group = ax[len(ax) - k:]
                moved = layout.with_axes(set_axes(layout.axes, i, ax[:len(ax) - k]))
                ordered = mesh.order(group)
                for j in shardable(layout):
                    if j != i:
                        yield Move(self.name, ordered, layout, append_axes(moved, j, group))

    @staticmethod
    def block(move, env):
        """Bytes of each device's block as the move exchanges it: its block before, or after where the
        dimension it splits does not divide by its devices (the padded blocks of a batch of 1 split over 8
        devices are 8 rows, 7 of them padding)."""
        _, j = changed_dims(move)
        before = env.local_bytes(move.before)
        if j is not None and env.pads(move.after.dims[j], move.after.axes[j]):
            return env.max(before, env.local_bytes(move.after))
        return before

    def volume(self, move, env):
        return self.block(move, env) * env.group_size(move.axes)   # the whole array over the group

    def link_time(self, move, env):
        block = self.block(move, env)
        return env.kept_link_time((self.name, move.axes, block), lambda: self._passes(move.axes, block, env))

    @staticmethod
    def _passes(axes, block, env):
        lat = thr = env.zero
        for g in links.phases(axes, env):
            l, t = pass_time(g, block * g.n, env)
            lat, thr = lat + l, thr + t
        return lat, thr

    def ring_bytes(self, move, env):
        n = env.group_size(move.axes)
        return self.block(move, env) * (n - 1) / n

    def transpose(self, move):
        return Move(self.name, move.axes, gradient(move.after), gradient(move.before))

    def explain(self, move, mesh=None):
        i, j = changed_dims(move)
        group = format_axes(moved_group(move))[1:]
        word = "axis" if len(move.axes) == 1 else "axes"
        return (f"moves {word} {group} of {move.tensor} from {move.before.dims[i]} to {move.before.dims[j]}"
                + passes(move, mesh, ("AllToAll",)))

    def reason(self, axes, src, want):
        missing = [a for a in axes if a not in src.sharding_axes]
        if missing:
            return f"mesh axis {missing[0]!r} does not shard any dimension of {src.name}"
        return None

    def simulate(self, blocks, move, grid):
        """Split along the gaining dimension, exchange, concatenate along the losing one."""
        import numpy as np   # only when simulating: it costs a tenth of a second to import
        group = moved_group(move)
        i, j = changed_dims(move)
        n = grid.count(group)
        out = {}
        for d in blocks:
            k = grid.block_index(d, group)
            pieces = []
            for p in grid.group(d, group):      # in block order along the losing dimension
                blk = blocks[p]
                size = blk.shape[j] // n
                sl = [slice(None)] * blk.ndim
                sl[j] = slice(k * size, (k + 1) * size)
                pieces.append(blk[tuple(sl)])
            out[d] = np.concatenate(pieces, axis=i)
        return out

    def lower_jax(self, move, mesh, var):
        i, j = changed_dims(move)
        return [f"{var} = jax.lax.all_to_all({var}, {jax_axes(moved_group(move))}, split_axis={j}, concat_axis={i}, "
                f"tiled=True)"]
