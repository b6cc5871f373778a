"""Plans as JAX programs: PartitionSpecs for every input and a ``shard_map`` that performs each step with
``jax.lax`` collectives; and ``xla_check``, which compiles the same sharded einsum with XLA's automatic
partitioner and lists the collectives it inserted beside symcost's.

    symcost export-jax "In[B_X, D_Y] * W[D_Y, F] -> Out[B_X, F]" --mesh X=4,Y=2 -o layer.py
    python layer.py        # runs on forced host devices, compares with jnp.einsum, exits 0 when equal

The exported file does not import symcost.
"""
from __future__ import annotations

import itertools
import re

from ..cost import LocalEinsum, Move
from ..errors import SymcostError


class ExportError(SymcostError):
    """A plan that cannot be written as a JAX program."""

    exit_code = 1


def _spec(layout) -> str:
    parts = []
    for ax in layout.axes:
        if not ax:
            parts.append("None")
        elif len(ax) == 1:
            parts.append(repr(ax[0]))
        else:
            parts.append("(" + ", ".join(repr(a) for a in ax) + ")")
    return "P(" + ", ".join(parts) + ")"


def _shape(layout, sizes) -> str:
    dims = []
    for d in layout.dims:
        if d.isdigit():
            dims.append(d)
        elif d in sizes:
            dims.append(str(sizes[d]))
        else:
            raise ExportError(f"cannot export: dimension {d} has no size; bind it with --dims")
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def _var(name: str) -> str:
    return "t_" + re.sub(r"\W", "_", name)


def _axes(ax) -> str:
    return repr(ax[0]) if len(ax) == 1 else "(" + ", ".join(repr(a) for a in ax) + ")"


def _move_code(m: Move, mesh, sizes) -> list[str]:
    v = _var(m.before.name)
    b, a = m.before, m.after
    k = m.kind
    if k == "AllGather":
        out = []
        for i, (ax, aft) in enumerate(zip(b.axes, a.axes)):
            removed = ax[len(aft):]
            if removed:
                out.append(f"{v} = jax.lax.all_gather({v}, {_axes(removed)}, axis={i}, tiled=True)")
        return out
    if k == "ReduceScatter":
        j = next(i for i, (ax, aft) in enumerate(zip(b.axes, a.axes)) if ax != aft)
        order = a.axes[j][len(b.axes[j]):]
        return [f"{v} = jax.lax.psum_scatter({v}, {_axes(order)}, scatter_dimension={j}, tiled=True)"]
    if k == "AllReduce":
        return [f"{v} = jax.lax.psum({v}, {_axes(m.axes)})"]
    if k == "AllToAll":
        i = next(x for x, (ax, aft) in enumerate(zip(b.axes, a.axes)) if len(aft) < len(ax))
        j = next(x for x, (ax, aft) in enumerate(zip(b.axes, a.axes)) if len(aft) > len(ax))
        return [f"{v} = jax.lax.all_to_all({v}, {_axes(m.axes)}, split_axis={j}, concat_axis={i}, tiled=True)"]
    if k == "Slice":
        out = []
        for i, (ax, aft) in enumerate(zip(b.axes, a.axes)):
            for axis in aft[len(ax):]:
                n = mesh.axis(axis).size
                out.append(f"{v} = jax.lax.dynamic_slice_in_dim({v}, jax.lax.axis_index({axis!r}) * "
                           f"({v}.shape[{i}] // {n}), {v}.shape[{i}] // {n}, axis={i})")
        return out
    if k == "Permute":
        if b == a:
            raise ExportError("cannot export a send (a pipeline hop): its result is not an einsum's")
        i = next(x for x, (ax, aft) in enumerate(zip(b.axes, a.axes)) if ax != aft)
        old, new = b.axes[i], a.axes[i]
        names = mesh.order(old)
        sizes_ = [mesh.axis(x).size for x in names]
        pairs = []
        for coords in itertools.product(*(range(s) for s in sizes_)):
            c = dict(zip(names, coords))
            lin = 0
            for x, s in zip(names, sizes_):
                lin = lin * s + c[x]
            want = 0
            for x in new:
                want = want * mesh.axis(x).size + c[x]
            for src in itertools.product(*(range(s) for s in sizes_)):
                cs = dict(zip(names, src))
                idx = 0
                for x in old:
                    idx = idx * mesh.axis(x).size + cs[x]
                if idx == want:
                    slin = 0
                    for x, s in zip(names, sizes_):
                        slin = slin * s + cs[x]
                    pairs.append((slin, lin))
                    break
        return [f"{v} = jax.lax.ppermute({v}, {_axes(names)}, perm={pairs})"]
    raise ExportError(f"cannot export a {k}")  # pragma: no cover


def export_plan(plan) -> str:
    """A standalone Python program that runs ``plan`` with shard_map and checks it against jnp.einsum.
    Dimensions left unbound get a small size every layout divides (twice the number of devices)."""
    mesh = plan.mesh
    if not mesh.bound:
        raise ExportError("cannot export: give every mesh axis a size (--mesh X=4,...)")
    default = 2
    for a in mesh.axes:
        default *= a.size
    sizes = {d: default for lay in plan.layouts for d in lay.dims if not d.isdigit()}
    for s in plan.steps:
        for t in ((s.op.before, s.op.after) if isinstance(s.op, Move) else s.op.inputs + (s.op.output,)):
            sizes.update({d: default for d in t.dims if not d.isdigit() and d not in sizes})
    sizes.update(dict(plan.sizes))
    inputs, seen, body, ref = [], set(), [], []
    produced = set()
    for s in plan.steps:
        op = s.op
        if isinstance(op, LocalEinsum):
            for t in op.inputs:
                if t.name not in seen and t.name not in produced:
                    inputs.append(t)
                    seen.add(t.name)
            sub = op.subscripts()
            args = ", ".join(_var(t.name) for t in op.inputs)
            body.append(f"{_var(op.output.name)} = jnp.einsum({sub!r}, {args}, "
                        f"preferred_element_type=jnp.float32)")
            ref.append(f"r[{op.output.name!r}] = jnp.einsum({sub!r}, "
                       + ", ".join(f"r[{t.name!r}]" for t in op.inputs) + ")")
            produced.add(op.output.name)
        elif isinstance(op, Move):
            if op.before.name not in seen and op.before.name not in produced:
                inputs.append(op.before)
                seen.add(op.before.name)
            body += _move_code(op, mesh, sizes)
    for t in inputs:
        if t.unreduced:
            raise ExportError(f"cannot export: input {t.name} holds partial sums ({t})")
    finals = {l.name: l for l in plan.layouts}
    outputs = [n for n in produced] or [t.name for t in inputs]
    outs = [finals[n] for n in outputs if n in finals]
    for o in outs:
        if o.unreduced:
            raise ExportError(f"cannot export: the result {o} still holds partial sums")
    ndev = 1
    for a in mesh.axes:
        ndev *= a.size
    names = [a.name for a in mesh.axes]
    shape = [a.size for a in mesh.axes]
    lines = [
        '"""Generated by symcost export-jax: ' + plan.expression.replace('"', "'").replace("\n", "; ") + '"""',
        "import os",
        f"os.environ['XLA_FLAGS'] = os.environ.get('XLA_FLAGS', '') + ' --xla_force_host_platform_device_count={ndev}'",
        "import sys",
        "import numpy as np",
        "import jax",
        "import jax.numpy as jnp",
        "from jax.sharding import Mesh, NamedSharding, PartitionSpec as P",
        "",
        "try:",
        "    from jax import shard_map",
        "except ImportError:  # older JAX",
        "    from jax.experimental.shard_map import shard_map",
        "",
        f"MESH = Mesh(np.array(jax.devices()[:{ndev}]).reshape({tuple(shape)}), {tuple(names)})",
        "IN_SPECS = {" + ", ".join(f"{t.name!r}: {_spec(t)}" for t in inputs) + "}",
        "OUT_SPECS = {" + ", ".join(f"{o.name!r}: {_spec(o)}" for o in outs) + "}",
        "SHAPES = {" + ", ".join(f"{t.name!r}: {_shape(t, sizes)}" for t in inputs) + "}",
        "",
        "",
        "def step(" + ", ".join(_var(t.name) for t in inputs) + "):",
        "    " + "\n    ".join(body or ["pass"]),
        "    return (" + ", ".join(_var(o.name) for o in outs) + ("," if len(outs) == 1 else "") + ")",
        "",
        "",
        "def reference(r):",
        "    " + "\n    ".join(ref or ["pass"]),
        "    return r",
        "",
        "",
        "def main():",
        "    key = jax.random.PRNGKey(0)",
        "    values = {}",
        "    for name, shape in SHAPES.items():",
        "        key, sub = jax.random.split(key)",
        "        values[name] = jax.random.normal(sub, shape, jnp.float32)",
        "    kwargs = dict(mesh=MESH, in_specs=tuple(IN_SPECS[n] for n in SHAPES),",
        "                  out_specs=tuple(OUT_SPECS.values()))",
        "    try:",
        "        f = shard_map(step, check_vma=False, **kwargs)",
        "    except TypeError:",
        "        f = shard_map(step, check_rep=False, **kwargs)",
        "    args = [jax.device_put(values[n], NamedSharding(MESH, IN_SPECS[n])) for n in SHAPES]",
        "    got = jax.jit(f)(*args)",
        "    want = reference(dict(values))",
        "    ok = True",
        "    for name, value in zip(OUT_SPECS, got):",
        "        good = bool(np.allclose(np.asarray(value), np.asarray(want[name]), rtol=1e-4, atol=1e-3))",
        "        print(f'{name}: {\"matches\" if good else \"DIFFERS from\"} jnp.einsum')",
        "        ok = ok and good",
        "    return 0 if ok else 1",
        "",
        "",
        "if __name__ == '__main__':",
        "    sys.exit(main())",
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- XLA check


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


def xla_check(plan) -> dict:
    """Compile the plan's single einsum with XLA's SPMD partitioner on forced host devices and compare."""
    try:
        import os
        import numpy as np
        import jax
        import jax.numpy as jnp
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    except ImportError:
        raise ExportError("xla-check needs JAX: pip install 'symcost[jax]'") from None
    from ..xla import ring_link_bytes
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
    if len(jax.devices()) < ndev:
        raise ExportError(f"xla-check needs {ndev} devices; run with "
                          f"XLA_FLAGS=--xla_force_host_platform_device_count={ndev}")
    sizes = dict(plan.sizes)
    first = {}
    for s in plan.steps:
        op = s.op
        for t in ((op.before,) if isinstance(op, Move) else op.inputs):
            first.setdefault(t.name, t)
    ins = [first[t.name] for t in e.inputs]
    final = {l.name: l for l in plan.layouts}[e.output.name]
    jmesh = Mesh(np.array(jax.devices()[:ndev]).reshape([a.size for a in mesh.axes]), mesh.names)

    def spec(t):
        return P(*[(ax if len(ax) > 1 else ax[0]) if ax else None for ax in t.axes])

    shapes = [tuple(int(sizes[d]) if not d.isdigit() else int(d) for d in t.dims) for t in ins]
    f = jax.jit(lambda *xs: jnp.einsum(e.subscripts(), *xs),
                in_shardings=tuple(NamedSharding(jmesh, spec(t)) for t in ins),
                out_shardings=NamedSharding(jmesh, spec(final)))
    args = [jax.ShapeDtypeStruct(sh, jnp.bfloat16) for sh in shapes]
    hlo = f.lower(*args).compile().as_text()
    found = []
    lines = hlo.splitlines()
    elem_bytes = 2  # the einsum runs in bf16; the CPU backend may widen a reduction to f32
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
    from ..xla import step_link_bytes
    from ..cost import Env
    env = Env.numeric(mesh, sizes)
    ours = [{"signature": s.signature(), "link_bytes": int(round(step_link_bytes(s.op, env)))}
            for s in plan.collectives]
    return {"xla": {"collectives": found, "link_bytes": int(sum(c["link_bytes"] for c in found))},
            "symcost": {"collectives": ours, "link_bytes": ring_link_bytes(plan)},
            "jax": jax.__version__}
