"""Send_Z: ``Send_Z(A[B, D]) -> A[B, D]`` sends each device's block ``distance`` hops along Z (a pipeline
stage handing its activations to the next). The layout is unchanged; the blocks shift. One block over
the one-way link per hop (book Part 5, pipelining); the transpose sends the gradients back.

Written by the user only: the engine never inserts a send.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ExportError, SimulationError
from ..notation import format_axes
from . import links
from .base import Move, MoveRule, gradient, register


@register
@dataclass(frozen=True)
class Send(MoveRule):
    name = "Send"
    signature = "Send_X(A[I, J]) -> A[I, J] (each device's block goes one hop along X)"
    summary = "sends each device's block to its neighbour along the axes (pipelines)"
    inserted = False

    def volume(self, move, env):
        return env.local_bytes(move.before)

    def link_time(self, move, env):
        g = links.group(move.axes, env)
        if links.trivial(g):
            return env.zero, env.zero
        hops = abs(move.distance) or 1
        return env.T_min * hops, self.volume(move, env) / links.one_way(g, env)

    def ring_bytes(self, move, env):
        return env.local_bytes(move.before)

    def transpose(self, move):
        return Move(self.name, move.axes, gradient(move.after), gradient(move.before), -(move.distance or 1))

    def explain(self, move):
        back = " back" if move.distance < 0 else ""
        return f"sends each block one hop{back} along {format_axes(move.axes)[1:]}"

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
