"""Training cost models on derived plans (book Part 5): the per-strategy table, memory per device,
pipeline bubbles, training time.

    >>> from symcost.program import derive_program
    >>> plan = derive_program(open("derivations/fsdp.sc").read(), mesh="X", backward=True)
    >>> row = strategy_row(plan)
    >>> row["compute"], row["comms"]
    ((4*B*D*F/X, 8*B*D*F/X), (4*D*F, 8*D*F))

which is the book's FSDP row: compute 4BDF/X + 8BDF/X, communication 4DF + 8DF bytes per layer.
"""
from __future__ import annotations

import sympy as sp

from . import symbols
from .memory import memory_per_device

__all__ = ["comm_bytes", "strategy_row", "pipeline_bubble", "memory_per_device", "train_seconds"]

ZERO = sp.Integer(0)


def comm_bytes(plan, phase: str | None = None) -> sp.Expr:
    """Bytes in the book's table convention: each collective's throughput time times W_ici (so an
    AllGather or ReduceScatter counts V, an AllReduce 2V, an AllToAll V/4), one link per axis."""
    total = sum((s.cost.throughput for s in plan.steps if s.is_collective and (phase is None or s.phase == phase)),
                ZERO)
    links = {symbols.axis(a.links): 1 for a in plan.mesh.axes if isinstance(a.links, str)}
    bw = {symbols.W_ici: 1, symbols.W_dcn: 1, symbols.W_nvlink: 1}
    return sp.simplify(total.xreplace(links).xreplace(bw))


def strategy_row(plan) -> dict:
    """Per-layer (forward, backward) FLOPs per device and communication bytes of a derived plan."""
    fwd, bwd = plan.phase("forward"), plan.phase("backward")
    return {"compute": (sp.simplify(fwd.flops), sp.simplify(bwd.flops)),
            "comms": (comm_bytes(plan, "forward"), comm_bytes(plan, "backward"))}


def pipeline_bubble(stages, microbatches) -> sp.Expr:
    """Fraction of a pipelined step spent idle: (P - 1) / (M + P - 1) for P stages, M microbatches
    (book Part 5, pipelining; the classic GPipe schedule)."""
    P, M = sp.sympify(stages), sp.sympify(microbatches)
    return (P - 1) / (M + P - 1)


def train_seconds(total_flops, chips, flops_per_chip, mfu) -> float:
    """Wall time of a run: total FLOPs / (chips x peak FLOPs/s x MFU)."""
    return float(total_flops) / (float(chips) * float(flops_per_chip) * float(mfu))
