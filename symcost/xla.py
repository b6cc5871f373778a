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

from . import dtypes
from .collectives import Move
from .collectives import links
from .env import Env
from .layout import Layout
from .notation import format_axes
from .pricing import op_cost


def step_link_bytes(m: Move, env: Env) -> float:
    """Bytes each device sends for one move under the ring model (each kind states its own)."""
    return m.rule.ring_bytes(m, env)


def ring_link_bytes(plan, phase: str | None = None, sizes=None) -> int:
    """Bytes each device sends for the plan's collectives under the ring model (numbers bound)."""
    env = Env.numeric(plan.mesh, dict(plan.sizes) if sizes is None else sizes)
    total = sum(step_link_bytes(s.op, env) for s in plan.steps
                if (phase is None or s.phase == phase) and not s.is_compute)
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


# ---------------------------------------------------------------------------- the book's time model
def book_env(plan) -> Env:
    """The numbers a plan is priced with: its sizes, and its hardware's figures (the ranking defaults
    without one)."""
    hw = plan.hardware.bindings(plan.compute_dtype) if plan.hardware is not None else None
    return Env.numeric(plan.mesh, dict(plan.sizes), hw)


def plan_seconds(plan, env: Env | None = None) -> float:
    """The plan's collectives, one after another, under the book's time model (each one max(latency floor,
    bytes over its links), a collective over k mesh axes on k axes' links)."""
    env = env or book_env(plan)
    return float(sum(op_cost(s.op, env).t_comms for s in plan.collectives))


def _record_move(r: dict, mesh) -> Move:
    """An XLA collective as the move it is, on a one- or two-dimensional array of its bytes."""
    axes = mesh.order(r["mesh_axes"])
    dtype = r.get("dtype", "bf16")
    b = dtypes.nbytes(dtype)
    n = 1
    for a in axes:
        n *= mesh.axis(a).size
    kind = r.get("canonical_kind", r["kind"])
    dims: tuple[str, ...]
    if kind == "all-gather":
        dims = (str(int(r["result_bytes"] // b)),)
        return Move("AllGather", axes, Layout("T", dims, (axes,), dtype=dtype), Layout("T", dims, ((),), dtype=dtype))
    if kind in ("reduce-scatter", "all-reduce"):
        dims = (str(int(r["operand_bytes"] // b)),)
        before = Layout("T", dims, ((),), frozenset(axes), dtype)
        after = Layout("T", dims, (axes,) if kind == "reduce-scatter" else ((),), dtype=dtype)
        return Move("ReduceScatter" if kind == "reduce-scatter" else "AllReduce", axes, before, after)
    if kind == "all-to-all":
        dims = (str(int(r["operand_bytes"] // b)), str(n))
        return Move("AllToAll", axes, Layout("T", dims, (axes, ()), dtype=dtype),
                    Layout("T", dims, ((), axes), dtype=dtype))
    raise ValueError(f"no move for an XLA {kind}")


def record_seconds(r: dict, env: Env) -> float:
    """One collective XLA inserted, under the same model: gathers, reductions and all-to-alls as the moves
    they are, a collective-permute by the route of its source-target pairs (devices numbered over the mesh,
    first axis major)."""
    mesh = env.mesh
    if r.get("canonical_kind", r["kind"]) != "collective-permute":
        return float(op_cost(_record_move(r, mesh), env).t_comms)
    names = mesh.names
    sizes = tuple(mesh.axis(a).size for a in names)

    def coords(k):
        out = []
        for s in reversed(sizes):
            out.append(k % s)
            k //= s
        return tuple(reversed(out))
    info = [env.axis_info(a) for a in names]
    hop, loads = links.route(tuple((coords(s), coords(t)) for s, t in r["source_target_pairs"]), sizes,
                             tuple(a.ring for a in info), tuple(a.kind for a in info))
    lat, thr = links.routed_time(hop, loads, names, float(r["operand_bytes"]), env)
    return float(max(lat, thr))


def xla_seconds(records, env: Env) -> float:
    """XLA's collectives for one case, one after another, under the book's time model."""
    return sum(record_seconds(r, env) for r in records)
