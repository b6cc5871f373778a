"""Pricing: each operation's cost, and the one function that totals a plan under an overlap policy.

    >>> from symcost.env import Env
    >>> from symcost.layout import Layout
    >>> from symcost.mesh import parse_mesh
    >>> from symcost.collectives import Move
    >>> mesh = parse_mesh("X=4,Y=4,Z=4")
    >>> a = Layout.of("A", "BD", [("X",), ("Y",)])
    >>> env = Env.numeric(mesh, {"B": 1024, "D": 4096}, {"W_ici": 9e10, "T_min": 1e-6})
    >>> round(op_cost(Move("AllGather", ("X",), a, a.with_dim_axes("B", ())), env).t_comms * 1e6, 1)
    23.3

(the book's Part 3 Question 2: 2 B D / (Y W_ici) on a v4p 4x4x4). Overlap policies (:data:`OVERLAPS`):

- ``program`` (the book's, the default): compute, HBM traffic and communication overlap across the
  whole program, and collectives on different mesh axes run concurrently:
  T_step = max(sum T_math, sum T_hbm, max over axes of that axis's collective time);
- ``step``: each einsum is bound by the larger of its own T_math and T_hbm (einsums run one after
  another), collectives still overlap with them, concurrently by axis;
- ``none``: every step's time adds up.
"""
from __future__ import annotations

from typing import NamedTuple

from . import caching
from .collectives import Move
from .einsum import LocalEinsum, flops, hbm_bytes
from .env import Env
from .mesh import Mesh

OVERLAPS = ("program", "step", "none")


class OpCost(NamedTuple):
    """One operation's cost on one device: FLOPs and bytes (V for a collective; read + written for an
    einsum), T_math, T_hbm, and a collective's latency floor and throughput term."""

    flops: object
    bytes: object
    t_math: object
    t_hbm: object
    latency: object
    throughput: object
    axes: tuple[str, ...]     # the channels it occupies: its mesh axes (a host transfer: 'pcie')
    local: bool                # an einsum (or a local slice), not a collective
    t_comms: object
    seconds: object


def op_cost(op, env: Env, on_chip=frozenset()) -> OpCost:
    """The cost of a move or a local einsum in ``env`` (floats or SymPy)."""
    z = env.zero
    if isinstance(op, LocalEinsum):
        f, b = flops(op, env), hbm_bytes(op, env, on_chip)
        tm, th = f / env.C, b / env.W_hbm
        return OpCost(f, b, tm, th, z, z, (), True, z, env.max(tm, th))
    lat, bw = op.rule.link_time(op, env)
    t = env.max(lat, bw)
    return OpCost(z, op.rule.volume(op, env), z, z, lat, bw, op.rule.channels(op), not op.rule.communicates, t, t)


@caching.memoize(maxsize=8192)
def symbolic_cost(op, mesh: Mesh, padded=frozenset()) -> OpCost:
    """The closed-form cost of ``op`` on ``mesh`` (kept: plans share their steps); ``padded`` names the
    (dimension, axes) whose blocks are rounded up (see :func:`padded_blocks`)."""
    return op_cost(op, Env.symbolic(mesh, padded))


def padded_blocks(op, mesh: Mesh, sizes) -> frozenset:
    """The (dimension, axes) of ``op`` whose bound size does not divide by the axes' devices."""
    sizes = dict(sizes)
    if not sizes:
        return frozenset()
    if isinstance(op, LocalEinsum):
        pairs = set(zip(op.dims, op.axes)) | {p for t in op.inputs + (op.output,) for p in zip(t.dims, t.axes)}
    else:
        pairs = {p for t in (op.before, op.after) for p in zip(t.dims, t.axes)}
    out = set()
    for d, axes in pairs:
        n = int(d) if d.isdigit() else sizes.get(d)
        if not axes or n is None or any(mesh.axis(a).size is None for a in axes):
            continue
        k = 1
        for a in axes:
            k *= mesh.axis(a).size
        if n % k:
            out.add((d, tuple(axes)))
    return frozenset(out)


class Totals(NamedTuple):
    flops: object
    t_math: object
    t_hbm: object
    t_comms: object          # latency floors included
    t_comms_bw: object       # throughput terms only (what critical values are solved from)
    t_step: object
    t_einsums: object        # the einsums one after another, each bound by max(T_math, T_hbm)

    def as_dict(self) -> dict:
        """The five totals a plan reports."""
        return {"flops": self.flops, "t_math": self.t_math, "t_hbm": self.t_hbm, "t_comms": self.t_comms,
                "t_step": self.t_step}


def totals(costs, env: Env, overlap: str = "program") -> Totals:
    """Totals of a sequence of :class:`OpCost` under an overlap policy (see the module docstring). The
    one place a plan's step time is decided: the ranker, plans, solve and the serving models call it."""
    if overlap not in OVERLAPS:
        raise ValueError(f"overlap must be one of {OVERLAPS}, not {overlap!r}")
    z = env.zero
    fl = tm = th = local = serial = z
    per_axis: dict[str, list] = {}        # axis -> [time, throughput term] of its collectives
    comm, comm_bw = z, z
    for c in costs:
        fl, tm, th, serial = fl + c.flops, tm + c.t_math, th + c.t_hbm, serial + c.seconds
        if c.local:
            local = local + c.seconds
            continue
        comm, comm_bw = comm + c.t_comms, comm_bw + c.throughput
        for a in c.axes:
            acc = per_axis.setdefault(a, [z, z])
            acc[0], acc[1] = acc[0] + c.t_comms, acc[1] + c.throughput
    if overlap == "none":
        return Totals(fl, tm, th, comm, comm_bw, serial, local)
    tc = env.max(*(v[0] for v in per_axis.values())) if per_axis else z
    tc_bw = env.max(*(v[1] for v in per_axis.values())) if per_axis else z
    step = env.max(tm, th, tc) if overlap == "program" else env.max(local, tc)
    return Totals(fl, tm, th, tc, tc_bw, step, local)


def policy(overlap) -> str:
    """``True`` / ``False`` (the command line's --no-overlap) or a policy name, as a policy name."""
    if overlap is True:
        return "program"
    if overlap is False:
        return "none"
    return str(overlap)
