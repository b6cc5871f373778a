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
from ..export.jax import Lowering, layout_key, lower
from . import runtime

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Names:
    """A tensor (its name, or a layout's :func:`~symcost.export.jax.layout_key`) -> a numbered variable, in
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


def build(jmesh, mesh, inputs, outputs, lines, names, sizes, key, signature: str) -> Runnable:
    """Compile ``lines`` over ``inputs`` -> ``outputs`` (layouts) as a jitted shard_map on ``jmesh`` and
    make its random inputs (ahead of time: compilation is not timed)."""
    jx = runtime.jax()
    from jax.sharding import NamedSharding
    body = compile_body([names(layout_key(t)) for t in inputs], lines, [names(layout_key(t)) for t in outputs],
                        mesh.names)
    f = runtime.sharded(body, jmesh, tuple(runtime.spec(t) for t in inputs), tuple(runtime.spec(t) for t in outputs))
    args = []
    for t, shape in zip(inputs, shapes(inputs, sizes)):
        key, sub = jx.random.split(key)
        args.append(runtime.random_array(sub, shape, t.dtype, NamedSharding(jmesh, runtime.spec(t))))
    compiled = jx.jit(f).lower(*args).compile()
    return Runnable(compiled, tuple(args), signature)
