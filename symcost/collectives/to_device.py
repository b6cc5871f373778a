"""ToDevice: ``ToDevice(KV[B_X, S, K, H]) -> KV[B_X, S, K, H]`` brings each device's block back from its
host's memory into HBM over PCIe (an offloaded KV cache or optimizer state, before it is used). Time
V / W_pcie, a latency floor of one ``T_min`` (book Part 2, PCIe per chip; :mod:`.to_host` has the model).
Written by the user only; the transpose offloads the gradient.
"""
from __future__ import annotations

from dataclasses import dataclass

from .base import register
from .to_host import HostTransfer


@register
@dataclass(frozen=True)
class ToDevice(HostTransfer):
    name = "ToDevice"
    signature = "ToDevice(A[I_X, J]) -> A[I_X, J] (each device's block from its host's memory over PCIe)"
    summary = "moves each device's block from its host's memory into HBM over PCIe"
    space = "Device"
    opposite = "ToHost"

    def explain(self, move, mesh=None):
        return f"brings each device's block of {move.tensor} from its host's memory into HBM over PCIe"
