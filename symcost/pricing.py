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

from dataclasses import dataclass

from . import caching
from .collectives import Move
from .einsum import LocalEinsum, flops, hbm_bytes
from .env import Env
from .mesh import Mesh

OVERLAPS = ("program", "step", "none")


@dataclass(frozen=True)
class OpCost:
    """One operation's cost on one device: FLOPs and bytes (V for a collective; read + written for an
    einsum), T_math, T_hbm, and a collective's latency floor and throughput term."""

    flops: object
    bytes: object
    t_math: object
    t_hbm: object
    latency: object
    throughput: object
    axes: tuple[str, ...]
    local: bool                # an einsum (or a local slice), not a collective
    t_comms: object
    seconds: object


def op_cost(op, env: Env, on_chip=frozenset()) -> OpCost:
    """The cost of a move or a local einsum in ``env`` (floats or SymPy)."""
    z = env.zero
    if isinstance(op, LocalEinsum):
        f, b = flops(op, env), hbm_bytes(op, env, on_chip)
        tm, th = f / env.C, b / env.W_hbm
        return OpCost(f, b, tm, th, z, z, op.mesh_axes(env.mesh), True, z, env.max(tm, th))
    lat, bw = op.rule.link_time(op, env)
    t = env.max(lat, bw)
    return OpCost(z, op.rule.volume(op, env), z, z, lat, bw, op.axes, not op.rule.communicates, t, t)


@caching.memoize(maxsize=8192)
def symbolic_cost(op, mesh: Mesh) -> OpCost:
    """The closed-form cost of ``op`` on ``mesh`` (kept: plans share their steps)."""
    return op_cost(op, Env.symbolic(mesh))


@dataclass(frozen=True)
class Totals:
    flops: object
    t_math: object
    t_hbm: object
    t_comms: object          # latency floors included
    t_comms_bw: object       # throughput terms only (what critical values are solved from)
    t_step: object
    t_einsums: object        # the einsums one after another, each bound by max(T_math, T_hbm)

    def as_dict(self) -> dict:
        return {"flops": self.flops, "t_math": self.t_math, "t_hbm": self.t_hbm, "t_comms": self.t_comms,
                "t_step": self.t_step}


def _by_axis(costs, field: str, env: Env, concurrent: bool):
    comm = [c for c in costs if not c.local]
    if not concurrent:
        return env.total(getattr(c, field) for c in comm)
    per_axis: dict[str, object] = {}
    for c in comm:
        for a in c.axes:
            per_axis[a] = per_axis.get(a, env.zero) + getattr(c, field)
    return env.max(*per_axis.values()) if per_axis else env.zero


def totals(costs, env: Env, overlap: str = "program") -> Totals:
    """Totals of a sequence of :class:`OpCost` under an overlap policy (see the module docstring). The
    one place a plan's step time is decided: the ranker, plans, solve and the serving models call it."""
    if overlap not in OVERLAPS:
        raise ValueError(f"overlap must be one of {OVERLAPS}, not {overlap!r}")
    costs = list(costs)
    fl = env.total(c.flops for c in costs)
    tm = env.total(c.t_math for c in costs)
    th = env.total(c.t_hbm for c in costs)
    concurrent = overlap != "none"
    tc = _by_axis(costs, "t_comms", env, concurrent)
    tc_bw = _by_axis(costs, "throughput", env, concurrent)
    if overlap == "program":
        step = env.max(tm, th, tc)
    elif overlap == "step":
        step = env.max(env.total(c.seconds for c in costs if c.local), tc)   # the einsums' sum, or comms
    else:
        step = env.total(c.seconds for c in costs)
    return Totals(fl, tm, th, tc, tc_bw, step, env.total(c.seconds for c in costs if c.local))


def policy(overlap) -> str:
    """``True`` / ``False`` (the command line's --no-overlap) or a policy name, as a policy name."""
    if overlap is True:
        return "program"
    if overlap is False:
        return "none"
    return str(overlap)
