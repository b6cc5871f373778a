"""Ground truth for a traced function: the collectives XLA's SPMD partitioner inserts for the same function
and shardings (parsed as ``symcost xla-check`` parses them), and XLA's FLOP count
(``jax.jit(fn).lower(...).compile().cost_analysis()``). Needs as many devices as the mesh has (on a CPU:
``XLA_FLAGS=--xla_force_host_platform_device_count=8``).
"""
from __future__ import annotations

from ..errors import ExportError
from ..export.xla_check import hlo_collectives
from ..mesh import parse_mesh

KINDS = {"AllGather": "all-gather", "ReduceScatter": "reduce-scatter", "AllReduce": "all-reduce",
         "AllToAll": "all-to-all"}


def _pspec(spec: str | None, rank: int):
    from jax.sharding import PartitionSpec as P

    from .specs import parse_spec
    if spec is None:
        return P()
    if not isinstance(spec, str):
        return spec
    return P(*[(ax[0] if len(ax) == 1 else tuple(ax)) if ax else None for _, ax in parse_spec(spec)])


def _concrete_mesh(mesh: str):
    import jax
    import numpy as np
    from jax.sharding import AxisType, Mesh
    m = parse_mesh(mesh)
    n = 1
    for a in m.axes:
        n *= a.size
    devices = jax.devices("cpu")
    if len(devices) < n:
        raise ExportError(f"comparing with XLA needs {n} devices; run with "
                          f"XLA_FLAGS=--xla_force_host_platform_device_count={n}")
    return m, Mesh(np.array(devices[:n]).reshape([a.size for a in m.axes]), m.names,
                   axis_types=(AxisType.Auto,) * len(m.axes))


def xla_collectives(fn, args, mesh: str, in_specs: list) -> list[dict]:
    """The collectives of ``fn`` compiled on ``mesh`` with the arguments laid out as ``in_specs``."""
    import jax
    from jax.sharding import NamedSharding
    m, jmesh = _concrete_mesh(mesh)
    shardings = tuple(NamedSharding(jmesh, _pspec(s, len(a.shape))) for a, s in zip(args, in_specs))
    with jax.set_mesh(jmesh):
        hlo = jax.jit(fn, in_shardings=shardings).lower(*args).compile().as_text()
    return hlo_collectives(hlo, m)


def one_device(mesh: str) -> str:
    """``mesh`` with every axis of size one (its names kept, for the function's sharding constraints)."""
    return ",".join(f"{a.name}=1" for a in parse_mesh(mesh).axes)


def xla_flops(fn, args, mesh: str) -> float:
    """XLA's FLOPs for ``fn`` on one device (every axis of ``mesh`` of size one)."""
    import jax
    _, jmesh = _concrete_mesh(one_device(mesh))
    with jax.set_mesh(jmesh):
        cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0]
    return float(cost["flops"])


def ours(plan) -> list[dict]:
    """The plan's collectives as XLA's are listed: kind and mesh axes."""
    return [{"kind": KINDS.get(s.kind, s.kind.lower()), "axes": list(s.axes)} for s in plan.collectives]


def program_flops(plan) -> float:
    """The program's FLOPs, matmuls and elementwise work, summed over its steps (numbers)."""
    total = 0.0
    for s in plan.steps:
        for f in (s.cost.flops, s.cost.vector_flops):
            v = plan.evaluate(f)
            total += float(v or 0)
    return total


def compare(plan, fn, args, mesh: str, in_specs: list) -> dict:
    """The plan's collectives beside XLA's, as multisets of (kind, axes) (a collective inside a loop is
    listed once by XLA, once per iteration by the plan)."""
    xla = xla_collectives(fn, args, mesh, in_specs)

    def key(c):
        return (c["kind"], tuple(sorted(c["axes"])))
    a, b = sorted(map(key, ours(plan))), sorted(map(key, xla))
    return {"symcost": a, "xla": b, "same": a == b}


def versus_xla(plan, one, fn, args, mesh: str, in_specs: list) -> dict:
    """The forward plan's collectives beside XLA's, and the program's FLOPs (``one``: its plan with every
    axis of size one) beside XLA's cost analysis: what ``symcost trace --xla-check`` prints."""
    import jax
    forward = plan.phase("forward") if any(s.phase == "backward" for s in plan.steps) else plan
    c = compare(forward, fn, args, mesh, in_specs)
    return {"symcost": c["symcost"], "xla": c["xla"], "same": c["same"], "flops": program_flops(one),
            "xla_flops": xla_flops(fn, args, mesh), "jax": jax.__version__}
