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
from .cost import Env, Move, collective_bandwidth_time
from .layout import bytes_per_device

ZERO = sp.Integer(0)


def comm_bytes(plan, phase: str | None = None) -> sp.Expr:
    """Bytes in the book's table convention: each collective's throughput time times W_ici (so an
    AllGather or ReduceScatter counts V, an AllReduce 2V, an AllToAll V/4), one link per axis."""
    env = Env.symbolic(plan.mesh)
    total = ZERO
    for s in plan.steps:
        if (phase is None or s.phase == phase) and isinstance(s.op, Move) and s.kind != "Slice":
            total += collective_bandwidth_time(s.op, env)
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


def memory_per_device(plan, params=None, *, param_bytes=2, grad_bytes=0, optimizer_bytes=8,
                      checkpoints=(), layers=1, sizes=None) -> dict:
    """Bytes one device holds while training (book Part 5, Question 2's accounting).

    Each parameter counts its per-device block at ``param_bytes`` per element (bf16), plus
    ``optimizer_bytes`` (Adam's two fp32 moments: 8) and ``grad_bytes`` (0: the book does not count the
    gradients separately); ``checkpoints`` names the activations saved per layer, counted at their layout
    in the plan (per device) times ``layers``.
    """
    layouts = {l.name: l for l in plan.layouts}
    env_sizes = dict(plan.sizes) if sizes is None else sizes
    # without names: the tensors named W..., the rule the backward pass uses for undeclared parameters
    names = list(params) if params is not None else [n for n in layouts if n[:1] == "W"]
    elems = ZERO
    for n in names:
        lay = layouts[n]
        elems += sp.sympify(bytes_per_device(lay, plan.mesh, env_sizes)) / lay.dtype_bytes
    out = {"params": elems * param_bytes, "gradients": elems * grad_bytes,
           "optimizer": elems * optimizer_bytes}
    act = ZERO
    for n in checkpoints:
        act += sp.sympify(bytes_per_device(layouts[n], plan.mesh, env_sizes))
    out["activations"] = act * layers
    out["total"] = sum(out.values(), ZERO)
    return out


def train_seconds(total_flops, chips, flops_per_chip, mfu) -> float:
    """Wall time of a run: total FLOPs / (chips x peak FLOPs/s x MFU)."""
    return float(total_flops) / (float(chips) * float(flops_per_chip) * float(mfu))
