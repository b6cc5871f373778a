"""``symcost xla-check``: compile a plan's program with XLA's SPMD partitioner on forced host devices, and
list the collectives XLA inserted beside symcost's, priced in one ring model.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 symcost xla-check "A[I_X, J] * B[J, K_X] -> C[I_X, K]" \\
        --mesh X=4 --dims I=256,J=1024,K=512

A plan of one einsum is compiled as that einsum from its operands' layouts to its result's. A program of
several statements (einsums, elementwise work) is compiled whole, as the plan's steps compute it on whole
arrays (:func:`symcost.export.lowering.lower`), from its inputs' layouts to its results' final layouts: XLA lays
out what lies between as its partitioner chooses, so the two lists compare two plans of one program.
"""
from __future__ import annotations

import re

from ..einsum import LocalEinsum
from ..elementwise import Elementwise
from ..env import Env
from ..errors import ExportError
from ..xla import ring_link_bytes, step_link_bytes
from .lowering import concrete_sizes, elementwise_expr, lower



_HLO = re.compile(r"=\s*(\(?[a-z0-9]+\[[^\]]*\][^=]*?)\s(all-gather|reduce-scatter|all-reduce|all-to-all|"
                  r"collective-permute)(?:-start)?\((.*)$")


def _group_axes(line: str, mesh):
    """(mesh axes, group size) of a collective from its replica groups: the named-mesh form
    ``mesh['axis_0'=1,'axis_1'=4] {'axis_1'}`` (its axes of size > 1 are the mesh's, in order), the
    explicit ``{{0,1},{2,3}}`` form, or the iota form ``[2,4]<=[8]`` (two groups of four: the device ids
    0..7 laid out as ``[8]``, transposed where ``T(...)`` follows, then read as ``[2,4]``)."""
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
    m = re.search(r"replica_groups=\[([0-9,]+)\]<=\[([0-9,]+)\](?:T\(([0-9,]+)\))?", line)
    if m:
        import numpy as np
        ids = np.arange(int(np.prod([int(x) for x in m.group(2).split(",")]))).reshape(
            [int(x) for x in m.group(2).split(",")])
        if m.group(3):
            ids = ids.transpose([int(x) for x in m.group(3).split(",")])
        groups = ids.reshape([int(x) for x in m.group(1).split(",")])
        return _axes_of([int(g) for g in groups.reshape(-1, groups.shape[-1])[0]], mesh)
    m = re.search(r"replica_groups=\{\{([0-9,\s]*)\}", line)
    if m:
        group = [int(x) for x in m.group(1).split(",") if x.strip()]
        return _axes_of(group, mesh)
    return [], 1


def _axes_of(group: list, mesh):
    """(the mesh axes along which one replica group's devices differ, its size)."""
    import numpy as np
    shape = [a.size for a in mesh.axes]
    coords = [np.unravel_index(g, shape) for g in group]
    return [a.name for k, a in enumerate(mesh.axes) if len({c[k] for c in coords}) > 1], len(group)


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


def _whole(plan, jax, jnp):
    """``(input layouts, result layouts, f)``: ``f(*inputs)`` computes the plan's steps on whole arrays (an
    einsum as ``jnp.einsum``, elementwise work as its rule's ``jax`` form, a move that renames its tensor
    as that name) and returns every result the program computes, in its final layout."""
    low = lower(plan, what="check with XLA")
    for t in low.inputs:
        if t.unreduced:
            raise ExportError(f"cannot check with XLA: input {t.name} holds partial sums ({t})")
    for t in low.outputs:
        if t.unreduced:
            raise ExportError(f"cannot check with XLA: the result {t} still holds partial sums")
    # each elementwise step's expression on numbered operands (symcost's text: no name from the program)
    exprs = {i: elementwise_expr(s.op, [f"a{k}" for k in range(len(s.op.inputs))], low.sizes)
             for i, s in enumerate(low.steps) if isinstance(s.op, Elementwise)}

    def f(*xs):
        r = dict(zip([t.name for t in low.inputs], xs))
        for i, s in enumerate(low.steps):
            op = s.op
            if isinstance(op, LocalEinsum):
                r[op.output.name] = jnp.einsum(op.subscripts(), *(r[t.name] for t in op.inputs))
            elif isinstance(op, Elementwise):
                scope = {"jax": jax, "jnp": jnp, **{f"a{k}": r[t.name] for k, t in enumerate(op.inputs)}}
                r[op.output.name] = eval(exprs[i], scope)   # noqa: S307 -- symcost's generated text only
            elif op.after.name != op.before.name:
                r[op.after.name] = r[op.before.name]
        return tuple(r[t.name] for t in low.outputs)
    return low.inputs, low.outputs, f


def xla_check(plan) -> dict:
    """Compile the plan's program (one einsum, or the whole program: see the module docstring) with XLA's
    SPMD partitioner on forced host devices and compare the collectives."""
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
    ndev = 1
    for a in mesh.axes:
        ndev *= a.size
    if len(jax.devices("cpu")) < ndev:
        raise ExportError(f"xla-check needs {ndev} devices; run with "
                          f"XLA_FLAGS=--xla_force_host_platform_device_count={ndev}")
    sizes = concrete_sizes(plan, "check with XLA")
    if len(einsums) == 1 and len([s for s in plan.steps if s.is_compute]) == 1:
        e = einsums[0]
        first = {}
        for s in plan.steps:
            op = s.op
            for t in (op.inputs if s.is_einsum else (op.before,)):
                first.setdefault(t.name, t)
        ins, outs = [first[t.name] for t in e.inputs], [{l.name: l for l in plan.layouts}[e.output.name]]

        def fn(*xs):
            return (jnp.einsum(e.subscripts(), *xs),)
    else:
        ins, outs, fn = _whole(plan, jax, jnp)
    jmesh = Mesh(np.array(jax.devices("cpu")[:ndev]).reshape([a.size for a in mesh.axes]), mesh.names)

    def spec(t):
        return P(*[(ax if len(ax) > 1 else ax[0]) if ax else None for ax in t.axes])

    shapes = [tuple(int(sizes[d]) if not d.isdigit() else int(d) for d in t.dims) for t in ins]
    f = jax.jit(fn, in_shardings=tuple(NamedSharding(jmesh, spec(t)) for t in ins),
                out_shardings=tuple(NamedSharding(jmesh, spec(t)) for t in outs))
    args = [jax.ShapeDtypeStruct(sh, jnp.bfloat16) for sh in shapes]
    hlo = f.lower(*args).compile().as_text()
    found = hlo_collectives(hlo, mesh)
    env = Env.numeric(mesh, sizes)
    ours = [{"signature": s.signature(), "link_bytes": int(round(step_link_bytes(s.op, env)))}
            for s in plan.collectives]
    return {"xla": {"collectives": found, "link_bytes": int(sum(c["link_bytes"] for c in found))},
            "symcost": {"collectives": ours, "link_bytes": ring_link_bytes(plan, sizes=sizes)},
            "jax": jax.__version__}
