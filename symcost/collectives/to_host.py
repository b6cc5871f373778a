"""ToHost: ``ToHost(Opt[D_X, F]) -> Opt[D_X, F]`` moves each device's block from its HBM to its host's
memory over PCIe (offloaded optimizer state, a KV cache kept on the host); :mod:`.to_device` brings it
back. The layout is unchanged: each chip moves its own block over its own PCIe link.

Time V / W_pcie with V the block, and a latency floor of one ``T_min`` (book Part 2: "PCIe ... about
1.5e10 B/s per chip" on TPUs; PCIe Gen5 x16 on GPUs, HARDWARE.md). The PCIe links are a channel of their
own: a host transfer overlaps with collectives on the mesh axes, not with another host transfer. Written
by the user only; the transpose moves the gradient the other way.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import links
from .base import Move, MoveRule, gradient, register

#: the channel host transfers occupy (as a mesh axis is the channel of its collectives)
PCIE = "pcie"


class HostTransfer(MoveRule):
    """A move between a chip's HBM and its host's memory (the base of ToHost and ToDevice)."""

    inserted = False
    space = ""        # the memory the block ends in: "Host" or "Device" (jax.memory.Space)
    opposite = ""     # the kind that moves it back

    def volume(self, move, env):
        return env.local_bytes(move.before)

    def link_time(self, move, env):
        return links.pcie_time(self.volume(move, env), env)

    def ring_bytes(self, move, env):
        return env.zero           # it crosses no mesh link

    def channels(self, move):
        return (PCIE,)

    def transpose(self, move):
        return Move(self.opposite, (), gradient(move.after), gradient(move.before))

    def reason(self, axes, src, want):
        return f"it keeps the layout of {src.name}"

    def simulate(self, blocks, move, grid):
        return {d: b.copy() for d, b in blocks.items()}

    def lower_jax(self, move, mesh, var):
        return [f"{var} = jax.device_put({var}, jax.memory.Space.{self.space})"]


@register
@dataclass(frozen=True)
class ToHost(HostTransfer):
    name = "ToHost"
    signature = "ToHost(A[I_X, J]) -> A[I_X, J] (each device's block to its host's memory over PCIe)"
    summary = "moves each device's block from HBM to its host's memory over PCIe (offloading)"
    space = "Host"
    opposite = "ToDevice"

    def explain(self, move, mesh=None):
        return f"offloads each device's block of {move.tensor} to its host's memory over PCIe"
