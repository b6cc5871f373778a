"""Comparing plans with what XLA's SPMD partitioner inserts, under one ring cost model.

Both sides are priced the same way: bytes each device sends on a ring of n devices (a model number, not
a measurement): AllGather (n-1)/n of its result block, ReduceScatter (n-1)/n of its operand block,
AllReduce twice that, AllToAll (n-1)/n of its block, a collective-permute one block::

    >>> import symcost
    >>> plan = symcost.derive("A[I, J_X] * B[J_X, K] -> C[I, K]", mesh="X=4", dims="I=256,J=1024,K=512")
    >>> ring_link_bytes(plan)             # AllReduce of the 256 x 512 bf16 partial sums: 2 * 3/4 * 262144
    393216

On the CPU backend XLA writes a ReduceScatter as AllReduce + dynamic-slice; :func:`xla_link_bytes`
prices such a pair as the ReduceScatter it stands for (the ``canonical`` fields of the reference data).
"""
from __future__ import annotations

from .collectives import Move
from .env import Env
from .notation import format_axes


def step_link_bytes(m: Move, env: Env) -> float:
    """Bytes each device sends for one move under the ring model (each kind states its own)."""
    return m.rule.ring_bytes(m, env)


def ring_link_bytes(plan, phase: str | None = None, sizes=None) -> int:
    """Bytes each device sends for the plan's collectives under the ring model (numbers bound)."""
    env = Env.numeric(plan.mesh, dict(plan.sizes) if sizes is None else sizes)
    total = sum(step_link_bytes(s.op, env) for s in plan.steps
                if (phase is None or s.phase == phase) and not s.is_einsum)
    return int(round(total))


def xla_link_bytes(records) -> int:
    """The same model over XLA's collectives (records as the reference data stores them)."""
    return int(sum(r.get("canonical_link_bytes_per_device", r.get("link_bytes_per_device", 0))
                   for r in records))


def spec_to_notation(name: str, dims: str, spec: str) -> str:
    """A JAX PartitionSpec in the reference data's syntax (``'None,X+Y'``) as notation: ``A[I, J_XY]``."""
    parts = [p.strip() for p in spec.split(",")] if spec else []
    out = []
    for d, p in zip(dims, parts or [""] * len(dims)):
        if p in ("", "None", "_", "-"):
            out.append(d)
        else:
            axes = p.replace("(", "").replace(")", "").replace("+", ",").split(",")
            axes = [a.strip() for a in axes if a.strip()]
            out.append(d + format_axes(axes))
    return f"{name}[{', '.join(out)}]"
