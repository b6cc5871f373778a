"""AllReduce_X: ``A[I_Y, J]{U_X} -> A[I_Y, J]`` sums the partial sums over X, keeping the sharding
(book Part 3). Twice a ReduceScatter's time (a ReduceScatter then an AllGather); its own transpose. Over
an ICI axis X and a DCN axis S (``AllReduce_{SX}``) it is the book's multi-slice reduction (Part 5): a
ReduceScatter over X inside the slice, an AllReduce over S across slices on 1/|X| of the data, an
AllGather over X.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..notation import format_axes
from . import links
from .base import Move, MoveRule, gradient, jax_axes, passes, register, subsets


@register
@dataclass(frozen=True)
class AllReduce(MoveRule):
    name = "AllReduce"
    signature = "AllReduce_X(A[I_Y, J]{U_X}) -> A[I_Y, J]"
    summary = "sums partial sums over the axes; every device keeps the whole sum (twice a ReduceScatter)"

    def edges(self, layout, mesh):
        for subset in subsets(mesh.order(layout.unreduced)):
            yield Move(self.name, subset, layout, layout.with_unreduced(layout.unreduced - set(subset)))

    def volume(self, move, env):
        return env.local_bytes(move.before)

    def link_time(self, move, env):
        lat, t = links.hierarchical(move.axes, self.volume(move, env), env)
        return 2 * lat, 2 * t

    def ring_bytes(self, move, env):
        n = env.group_size(move.axes)
        return 2 * env.local_bytes(move.before) * (n - 1) / n

    def transpose(self, move):
        return Move(self.name, move.axes, gradient(move.after, move.axes), gradient(move.before))

    def explain(self, move, mesh=None):
        out = f"sums the partial sums over {format_axes(move.axes)[1:]}"
        return out + passes(move, mesh, ("AllReduce",))

    def reason(self, axes, src, want):
        missing = [a for a in axes if a not in src.unreduced]
        if missing:
            return f"{src.name} holds no partial sums over {missing[0]!r} (no {{U_{missing[0]}}})"
        if want.axes != src.axes:
            return f"it keeps the sharding of {src.name}; it cannot change it"
        return None

    def simulate(self, blocks, move, grid):
        return {d: sum(blocks[p] for p in grid.group(d, move.axes)) for d in blocks}

    def lower_jax(self, move, mesh, var):
        return [f"{var} = jax.lax.psum({var}, {jax_axes(move.axes)})"]
