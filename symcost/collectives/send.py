"""Send_Z: ``Send_Z(A[B, D]) -> A[B, D]`` sends each device's block one hop along Z (a pipeline stage
handing its activations to the next); ``Send_{Z,k}`` sends it k devices along Z (``Send_{Z,-1}`` one back),
the devices a stage apart when stages are laid out k apart. The layout is unchanged; the blocks shift
(cyclically: the last device's block reaches the first).

Priced by its route on the link model (book Part 5, pipelining; Part 3's latency of one hop per step):
``T_min`` per hop of the longest route, and the blocks that cross one link one way over the one-way
bandwidth -- every stage sends at once, so a shift of k on a ring puts k blocks on each link (k hops); on
a line the wrapping block goes back n - k hops; a switched domain is one hop. Unbound axis sizes: the ring
with |k| < |Z| / 2. The transpose sends the gradients back.

Written by the user only: the engine never inserts a send.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ExportError, SimulationError
from ..notation import format_axes
from . import links
from .base import Move, MoveRule, gradient, register


def shift_pairs(n: int, k: int) -> tuple:
    """(source, destination) coordinates of a cyclic shift by ``k`` along an axis of ``n`` devices."""
    return tuple(((c,), ((c + k) % n,)) for c in range(n))


@register
@dataclass(frozen=True)
class Send(MoveRule):
    name = "Send"
    signature = "Send_X(A[I, J]) -> A[I, J] (each device's block goes one hop along X; Send_{X,2}: two)"
    summary = "sends each device's block k devices along an axis (pipelines; one hop unless written)"
    inserted = False

    def volume(self, move, env):
        return env.local_bytes(move.before)

    def link_time(self, move, env):
        (a,) = move.axes
        k = move.distance or 1
        block = self.volume(move, env)
        sizes = links.sizes_known((a,), env)
        if sizes is not None:
            return links.permute_time(shift_pairs(sizes[0], k), (a,), block, env)
        info = env.axis_info(a)
        g = links.group((a,), env)
        if info.kind != "ici":
            hops, load = 1, 1
        elif info.ring:
            hops = load = abs(k)
        else:               # a line: the blocks that wrap go back the other way
            hops, load = env.axis(a) - abs(k), abs(k)
        return env.T_min * hops, block * load / links.one_way(g, env)

    def ring_bytes(self, move, env):
        return env.local_bytes(move.before)

    def transpose(self, move):
        return Move(self.name, move.axes, gradient(move.after), gradient(move.before), -(move.distance or 1))

    def explain(self, move, mesh=None):
        k = move.distance or 1
        hops = "one hop" if abs(k) == 1 else f"{abs(k)} devices"
        back = " back" if k < 0 else ""
        return f"sends each block {hops}{back} along {format_axes(move.axes)[1:]}"

    def reason(self, axes, src, want):
        return f"it keeps the layout of {src.name}"

    def simulate(self, blocks, move, grid):
        a = move.axes[0]
        n, step = grid.size(a), move.distance or 1
        return {d: blocks[grid.moved(d, {a: (grid.coord(d, a) - step) % n})].copy() for d in blocks}

    def reference(self, full, move, grid):
        """What the send does to the whole array: blocks along the sending axis shift by ``distance``."""
        import numpy as np   # only when simulating: it costs a tenth of a second to import
        a = move.axes[0]
        for i, ax in enumerate(move.before.axes):
            if a in ax:
                if ax != (a,):
                    raise SimulationError("a send over an axis that shares its dimension is not simulated")
                return np.roll(full, (move.distance or 1) * (full.shape[i] // grid.size(a)), axis=i)
        return full   # replicated over the axis: every copy is the same

    def lower_jax(self, move, mesh, var):
        raise ExportError("cannot export a send (a pipeline hop): its result is not an einsum's")
