"""``symcost xla-check``: compile a plan's sharded einsum with XLA's SPMD partitioner on forced host
devices, and list the collectives XLA inserted beside symcost's, priced in one ring model.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 symcost xla-check "A[I_X, J] * B[J, K_X] -> C[I_X, K]" \\
        --mesh X=4 --dims I=256,J=1024,K=512
"""
from __future__ import annotations

import re

from ..einsum import LocalEinsum
from ..env import Env
from ..errors import ExportError
from ..xla import ring_link_bytes, step_link_bytes
from .jax import concrete_sizes



_HLO = re.compile(r"=\s*(\(?[a-z0-9]+\[[^\]]*\][^=]*?)\s(all-gather|reduce-scatter|all-reduce|all-to-all|"
                  r"collective-permute)(?:-start)?\((.*)$")


def _group_axes(line: str, mesh):
    """(mesh axes, group size) of a collective from its replica groups: the named-mesh form
    ``mesh['axis_0'=1,'axis_1'=4] {'axis_1'}`` (its axes of size > 1 are the mesh's, in order) or the
    explicit ``{{0,1},{2,3}}`` form."""
    m = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", line)
    if m:
        hlo_axes = [(a.strip().strip("'"), int(n)) for a, n in re.findall(r"'?([\w]+)'?=(\d+)", m.group(1))]
        chosen = {c.strip().strip("'") for c in m.group(2).split(",") if c.strip()}
        real = [a for a, n in hlo_axes if n > 1]
        names = dict(zip(real, [a.name for a in mesh.axes if (a.size or 1) > 1]))
        axes = [names[a] for a, _ in hlo_axes if a in chosen and a in names]
        size = 1
        for a, n in hlo_axes:
            if a in chosen:
                size *= n
        return axes, size
    m = re.search(r"replica_groups=\{\{([0-9,\s]*)\}", line)
    if m:
        import numpy as np
        group = [int(x) for x in m.group(1).split(",") if x.strip()]
        shape = [a.size for a in mesh.axes]
        coords = [np.unravel_index(g, shape) for g in group]
        return [a.name for k, a in enumerate(mesh.axes) if len({c[k] for c in coords}) > 1], len(group)
    return [], 1


def _elements(type_str: str) -> int:
    total = 0
    for _, dims in re.findall(r"([a-z0-9]+)\[([0-9,]*)\]", type_str):
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        total += n
    return total


def _sliced_later(name: str, lines, depth: int = 3) -> bool:
    """Is the value ``name`` cut by a dynamic-slice soon after (an AllReduce + slice = a ReduceScatter)?"""
    frontier = {name}
    for _ in range(depth):
        nxt = set()
        for line in lines:
            if "=" not in line:
                continue
            lhs, rhs = line.split("=", 1)
            if any(re.search(rf"%{re.escape(n)}\b", rhs) for n in frontier):
                user = lhs.strip().split()[-1].lstrip("%")
                if "dynamic-slice" in user or " dynamic-slice(" in rhs:
                    return True
                nxt.add(user)
        frontier = nxt
        if not frontier:
            break
    return False


def hlo_collectives(hlo: str, mesh, elem_bytes: int = 2) -> list[dict]:
    """The collectives in a compiled SPMD module's text: kind (an AllReduce whose result is sliced right
    after counted as the ReduceScatter it is), mesh axes, bytes and bytes over one link in the ring model."""
    found = []
    lines = hlo.splitlines()
    for line in lines:
        m = _HLO.search(line)
        if not m or "-done" in line:
            continue
        kind = m.group(2)
        axes, n = _group_axes(line, mesh)
        result = _elements(m.group(1)) * elem_bytes
        frac = (n - 1) / n if n else 0
        name = line.split("=")[0].strip().split()[-1].lstrip("%")
        canonical = "reduce-scatter" if kind == "all-reduce" and _sliced_later(name, lines) else kind
        link = {"all-gather": result * frac, "reduce-scatter": result * n * frac if kind == "reduce-scatter"
                else result * frac, "all-reduce": 2 * result * frac, "all-to-all": result * frac,
                "collective-permute": result}[canonical]
        found.append({"kind": canonical, "hlo": kind, "axes": axes, "bytes": int(result), "link_bytes": int(link)})
    return found


def xla_check(plan) -> dict:
    """Compile the plan's single einsum with XLA's SPMD partitioner on forced host devices and compare."""
    try:
        import numpy as np
        import jax
        import jax.numpy as jnp
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    except ImportError:
        raise ExportError("xla-check needs JAX: pip install 'symcost[jax]'") from None
    mesh = plan.mesh
    if not mesh.bound:
        raise ExportError("xla-check needs every mesh axis sized (--mesh X=4,...)")
    einsums = [s.op for s in plan.steps if isinstance(s.op, LocalEinsum)]
    if len(einsums) != 1:
        raise ExportError("xla-check compares one einsum; this plan has " + str(len(einsums)))
    e = einsums[0]
    ndev = 1
    for a in mesh.axes:
        ndev *= a.size
    if len(jax.devices("cpu")) < ndev:
        raise ExportError(f"xla-check needs {ndev} devices; run with "
                          f"XLA_FLAGS=--xla_force_host_platform_device_count={ndev}")
    sizes = concrete_sizes(plan, "check with XLA")
    first = {}
    for s in plan.steps:
        op = s.op
        for t in (op.inputs if s.is_einsum else (op.before,)):
            first.setdefault(t.name, t)
    ins = [first[t.name] for t in e.inputs]
    final = {l.name: l for l in plan.layouts}[e.output.name]
    jmesh = Mesh(np.array(jax.devices("cpu")[:ndev]).reshape([a.size for a in mesh.axes]), mesh.names)

    def spec(t):
        return P(*[(ax if len(ax) > 1 else ax[0]) if ax else None for ax in t.axes])

    shapes = [tuple(int(sizes[d]) if not d.isdigit() else int(d) for d in t.dims) for t in ins]
    f = jax.jit(lambda *xs: jnp.einsum(e.subscripts(), *xs),
                in_shardings=tuple(NamedSharding(jmesh, spec(t)) for t in ins),
                out_shardings=NamedSharding(jmesh, spec(final)))
    args = [jax.ShapeDtypeStruct(sh, jnp.bfloat16) for sh in shapes]
    hlo = f.lower(*args).compile().as_text()
    found = hlo_collectives(hlo, mesh)
    env = Env.numeric(mesh, sizes)
    ours = [{"signature": s.signature(), "link_bytes": int(round(step_link_bytes(s.op, env)))}
            for s in plan.collectives]
    return {"xla": {"collectives": found, "link_bytes": int(sum(c["link_bytes"] for c in found))},
            "symcost": {"collectives": ours, "link_bytes": ring_link_bytes(plan, sizes=sizes)},
            "jax": jax.__version__}
