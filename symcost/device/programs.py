"""Plans as compiled JAX functions: the lines ``export-jax`` writes (each move lowered by its rule's
``lower_jax``, einsums in the tensors' own dtypes) turned into a ``shard_map`` over the devices.

The text compiled here is symcost's own lowering, never the user's: variables are numbered (``t0``,
``t1``, ...), einsum subscripts are generated letters, and the only names taken from the input are mesh
axes, written as string literals and checked to be identifiers first.

    >>> names = Names()
    >>> names("In"), names("W"), names("In")
    ('t0', 't1', 't0')
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UsageError
from ..export.lowering import Lowering, layout_key, lower
from . import runtime

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_VAR = re.compile(r"(?<!')\bt\d+\b(?!')")     # a numbered variable, never a quoted axis name


class Names:
    """A tensor (its name, or a layout's :func:`~symcost.export.lowering.layout_key`) -> a numbered variable, in
    order of first use."""

    def __init__(self):
        self.table: dict = {}

    def __call__(self, name) -> str:
        if name not in self.table:
            self.table[name] = f"t{len(self.table)}"
        return self.table[name]


def move_lines(move, mesh, names) -> list[str]:
    """A move alone, from its layout's variable to its result's (see :func:`build`)."""
    src, dst = names(layout_key(move.before)), names(layout_key(move.after))
    if move.kind == "Send":     # a neighbour shift: XLA's collective-permute
        n = mesh.axis(move.axes[0]).size
        pairs = [(i, (i + move.distance) % n) for i in range(n)]
        return [f"{dst} = jax.lax.ppermute({src}, {move.axes[0]!r}, perm={pairs})"]
    return [f"{dst} = {src}"] + list(move.rule.lower_jax(move, mesh, dst))


def compile_body(params, lines, results, axes):
    """A Python function ``f(*params) -> tuple(results)`` running ``lines`` (symcost's lowering)."""
    for a in axes:
        if not _IDENT.match(a):
            raise UsageError(f"mesh axis {a!r} is not an identifier")
    for v in list(params) + list(results):
        if not re.match(r"^t\d+$", v):
            raise UsageError(f"internal: variable {v!r} is not one of symcost's")
    jx = runtime.jax()
    import jax.numpy as jnp
    src = "def f(" + ", ".join(params) + "):\n"
    src += "".join(f"    {line}\n" for line in lines) or "    pass\n"
    src += "    return (" + ", ".join(results) + ("," if len(results) == 1 else "") + ")\n"
    scope = {"jax": jx, "jnp": jnp}
    exec(compile(src, "<symcost lowering>", "exec"), scope)   # noqa: S102 -- symcost's generated text only
    return scope["f"]


@dataclass
class Runnable:
    """A compiled function and random inputs in their shardings, ready to time."""

    fn: object
    args: tuple
    signature: str

    def __call__(self):
        return self.fn(*self.args)


def shapes(layouts, sizes) -> list[tuple[int, ...]]:
    out = []
    for t in layouts:
        dims = []
        for d in t.dims:
            if d.isdigit():
                dims.append(int(d))
            elif d in sizes:
                dims.append(int(sizes[d]))
            else:
                raise UsageError(f"dimension {d} has no size; bind it with --dims")
        out.append(tuple(dims))
    return out


def lowered(plan) -> tuple[Lowering, Names]:
    """The plan lowered in its tensors' own dtypes, with numbered variables; every size must be bound."""
    if not plan.mesh.bound:
        raise UsageError("give every mesh axis a size (--mesh X=4,...)")
    names = Names()
    low = lower(plan, var=names, native=True, what="run", by_layout=True)
    bound = dict(plan.sizes)
    missing = sorted({d for t in low.inputs for d in t.dims if not d.isdigit() and d not in bound})
    if missing:
        raise UsageError(f"bind every dimension to run it: {', '.join(missing)} ha{'s' if len(missing) == 1 else 've'} "
                         f"no size (--dims {missing[0]}=...)")
    return low, names


def jax_mesh(mesh):
    return runtime.make_mesh([a.size for a in mesh.axes], mesh.names)


def _canonical(params, lines, results) -> tuple:
    """The text of a program with its variables renumbered in order of first use: two steps that differ
    only in which tensors they read (a layer's same-shaped projections) read the same."""
    table: dict = {}

    def rename(m):
        return table.setdefault(m.group(0), f"v{len(table)}")
    return tuple(tuple(_VAR.sub(rename, x) for x in part) for part in (params, lines, results))


def build(jmesh, mesh, inputs, outputs, lines, names, sizes, key, signature: str, compiled: dict | None = None
          ) -> Runnable:
    """Compile ``lines`` over ``inputs`` -> ``outputs`` (layouts) as a jitted shard_map on ``jmesh`` and
    make its random inputs (ahead of time: compilation is not timed). ``compiled``: the executables built
    so far on ``jmesh``, by program text (variables renumbered), shapes, dtypes and shardings; a program
    met again runs the executable it compiled to (the same one XLA would compile again) on its own inputs."""
    jx = runtime.jax()
    from jax.sharding import NamedSharding
    params, results = [names(layout_key(t)) for t in inputs], [names(layout_key(t)) for t in outputs]
    in_specs, out_specs = tuple(runtime.spec(t) for t in inputs), tuple(runtime.spec(t) for t in outputs)
    dims = shapes(inputs, sizes)
    args = []
    for t, shape, sp in zip(inputs, dims, in_specs):
        key, sub = jx.random.split(key)
        args.append(runtime.random_array(sub, shape, t.dtype, NamedSharding(jmesh, sp)))
    known = None
    if compiled is not None:
        known = (_canonical(params, lines, results), tuple(mesh.names),
                 tuple((shape, t.dtype, str(sp)) for t, shape, sp in zip(inputs, dims, in_specs)),
                 tuple(str(sp) for sp in out_specs))
        if known in compiled:
            return Runnable(compiled[known], tuple(args), signature)
    body = compile_body(params, lines, results, mesh.names)
    f = runtime.sharded(body, jmesh, in_specs, out_specs)
    fn = jx.jit(f).lower(*args).compile()
    if known is not None:
        compiled[known] = fn
    return Runnable(fn, tuple(args), signature)
