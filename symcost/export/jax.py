"""Plans as JAX programs: PartitionSpecs for every input and a ``shard_map`` that performs each step with
``jax.lax`` collectives, checked against the same steps on whole arrays (:mod:`.xla_check` compiles the
program with XLA's partitioner instead and lists the collectives it inserted beside symcost's).

    symcost export-jax "In[B_X, D_Y] * W[D_Y, F] -> Out[B_X, F]" --mesh X=4,Y=2 -o layer.py
    python layer.py        # runs on forced host devices, compares with jnp.einsum, exits 0 when equal

The exported file does not import symcost. Each move is lowered by its own rule
(:meth:`symcost.collectives.MoveRule.lower_jax`), elementwise work by its rule's ``jax`` form (its
gradient by ``jax_grad`` or ``jax.vjp``): :mod:`.lowering`, which ``measure`` compiles too.
"""
from __future__ import annotations

from typing import NamedTuple

from ..einsum import LocalEinsum
from ..elementwise import Elementwise
from ..errors import ExportError
from .lowering import Lowering, Lowered, elementwise_expr, layout_key, lower, passing, shape_of, variable

__all__ = ["export_plan", "STAND_INS", "ExportError"]


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
    """A layout's whole shape as Python writes a tuple."""
    for d in layout.dims:
        if not d.isdigit() and d not in sizes:
            raise ExportError(f"cannot export: dimension {d} has no size; bind it with --dims")
    return str(shape_of(layout, sizes))


#: why a rule is lowered as the identity (its ``jax`` form is ``{0}``: :attr:`~.lowering.Lowered.identity`)
STAND_INS = {"Rotary": "its rotation needs each element's position, which the notation does not name",
             "Dropout": "its mask is random (as at inference)"}


def _reference(step: Lowered, sizes: dict) -> str | None:
    """The unsharded computation of a step for the exported check (moves other than renames change
    nothing)."""
    if isinstance(step.op, Elementwise):
        args = [f"r[{t.name!r}]" for t in step.inputs]
        return f"r[{step.output.name!r}] = {elementwise_expr(step.op, args, sizes)}"
    if isinstance(step.op, LocalEinsum):
        return (f"r[{step.output.name!r}] = jnp.einsum({step.op.subscripts()!r}, "
                + ", ".join(f"r[{t.name!r}]" for t in step.inputs) + ")")
    if step.output.name != step.inputs[0].name:
        return f"r[{step.output.name!r}] = r[{step.inputs[0].name!r}]"
    return None


class _LayoutNames:
    """A variable for each layout of a tensor (a backward plan's export): ``t_W`` for its first, ``t_W_1``,
    ... after, never one another tensor's."""

    def __init__(self):
        self.table: dict = {}
        self.used: set = set()

    def __call__(self, key) -> str:
        if key not in self.table:
            k, name = 0, variable(key[0])
            while name in self.used:
                k += 1
                name = f"{variable(key[0])}_{k}"
            self.table[key] = name
            self.used.add(name)
        return self.table[key]


class _Named(NamedTuple):
    """A whole array of the reference, by name (its dimensions say how a gradient passed to it reshapes)."""

    name: str
    dims: tuple


class _Reference:
    """The store :class:`~symcost.elementwise.Passing` takes pass-through gradients in for the reference:
    whole arrays by name, as the lowering takes them by layout."""

    def __init__(self, low: Lowering, out: list):
        self.have = {t.name for t in low.inputs}
        self.sizes, self.out = low.sizes, out

    def holds(self, t: _Named) -> bool:
        return t.name in self.have

    def like(self, src: str, dims, t: _Named) -> _Named:
        return _Named(src, tuple(dims))

    def given(self, t: _Named) -> bool:
        return False                    # the lowering's inputs are the reference's: already held

    def _value(self, s: _Named, t: _Named) -> str:
        v = f"r[{s.name!r}]"
        return v if s.dims == tuple(t.dims) else f"{v}.reshape({tuple(int(self.sizes[d]) for d in t.dims)})"

    def take(self, t: _Named, s: _Named) -> None:
        self.out.append(f"r[{t.name!r}] = {self._value(s, t)}")
        self.have.add(t.name)

    def add(self, t: _Named, s: _Named) -> None:
        self.out.append(f"r[{t.name!r}] = r[{t.name!r}] + {self._value(s, t)}")

    def final(self, name: str, src: str, dims) -> _Named | None:
        return _Named(name, tuple(dims)) if src in self.have else None


def _accumulated(plan, low: Lowering) -> list[str]:
    """The reference's lines: a gradient's later contributions added to its first (a tensor written again
    before anything read it), and a pass-through gradient taken from its result's where it is first read, or
    added into it (:class:`~symcost.elementwise.Passing`), by name as the lowering does by layout."""
    through = passing(plan)
    own = {g: tuple(entries[0][2]) for g, entries in through.pending.items()}    # the operand's dimensions
    out: list = []
    store = _Reference(low, out)
    fresh: set = set()
    for s in low.steps:
        for t in s.inputs:
            through.read(_Named(t.name, own.get(t.name, t.dims)), s.output.name, store)
        fresh.difference_update(t.name for t in s.inputs)
        line = _reference(s, low.sizes)
        if line is None:
            continue
        n = s.output.name
        if n in fresh:
            line = line.replace(f"r[{n!r}] = ", f"r[{n!r}] = r[{n!r}] + ", 1)
        fresh.add(n)
        store.have.add(n)
        out.append(line)
    through.settle(store)
    return out


def _autodiff(plan, low: Lowering) -> list[str]:
    """The exported file's lines that take the gradients of the forward steps by JAX's autodiff: the
    gradients the program is given (``SEEDS``: ``dOut`` -> ``Out``), those the plan computes of the inputs
    (``GRADS``), dropout's masks (all ones, as its forward keeps every element), ``forward(r)`` and
    ``autodiff(values)``."""
    steps = list(zip(plan.steps, low.steps))
    made = {lw.output.name for s, lw in steps if s.phase == "forward"}
    read = {t.name for s, lw in steps if s.phase == "forward" and s.is_compute for t in lw.inputs}
    given = {t.name for t in low.inputs}
    seeds = {t.name: t.name[1:] for t in low.inputs if t.name.startswith("d") and t.name[1:] in made}
    through = sorted(g for g, t in seeds.items() if t in read)
    if through:      # a pass-through gradient the lowering found no result's gradient to take from
        raise ExportError(f"cannot export the backward pass: the gradient{'s' if len(through) > 1 else ''} "
                          f"{', '.join(through)} pass{'' if len(through) > 1 else 'es'} through a residual add or a "
                          f"view, and no result's gradient laid out as {'they are' if len(through) > 1 else 'it is'} "
                          f"was found to take {'them' if len(through) > 1 else 'it'} from")
    masks = sorted({lw.op.inputs[1].name for _, lw in steps
                    if isinstance(lw.op, Elementwise) and lw.op.grad and lw.op.kind == "Dropout"})
    grads = {o.name: o.name[1:] for o in low.outputs if o.name.startswith("d") and o.name[1:] in given
             and o.name[1:] not in seeds and o.name[1:] not in masks}
    forward = [r for r in (_reference(lw, low.sizes) for s, lw in steps if s.phase == "forward") if r]
    return [
        "# the forward steps on whole arrays, and the gradients JAX's autodiff takes of them",
        f"SEEDS = {seeds!r}",
        f"GRADS = {grads!r}",
        f"ONES = {tuple(masks)!r}",
        "",
        "",
        "def forward(r):",
        "    " + "\n    ".join(forward or ["pass"]),
        "    return r",
        "",
        "",
        "def autodiff(values):",
        "    wrt = sorted(set(GRADS.values()))",
        "",
        "    def f(*xs):",
        "        r = forward({**values, **dict(zip(wrt, xs))})",
        "        return tuple(r[SEEDS[s]] for s in SEEDS)",
        "    _, pull = jax.vjp(f, *[values[n] for n in wrt])",
        "    return dict(zip(wrt, pull(tuple(values[s] for s in SEEDS))))",
        "",
        "",
    ]


def export_plan(plan) -> str:
    """A standalone Python program that runs ``plan`` with shard_map and checks it against the same program
    on whole arrays (``jnp.einsum`` for a program of einsums; elementwise work as its rule's ``jax`` form).
    Dimensions left unbound get a small size every layout divides (twice the number of devices). A plan with
    its backward pass is lowered with a variable for each layout of a tensor (a parameter stays sharded
    beside its gathered copy; a gradient's contributions are summed), as ``measure`` runs it, and each
    gradient of an input is checked against ``jax.vjp`` of the forward steps too (:func:`_autodiff`)."""
    mesh = plan.mesh
    grads: list = []
    if any(s.phase == "backward" for s in plan.steps):
        each = _LayoutNames()
        low = lower(plan, var=each, by_layout=True)

        def var(t) -> str:
            return each(layout_key(t))
        ref = _accumulated(plan, low)
        grads = _autodiff(plan, low)
    else:
        low = lower(plan)

        def var(t) -> str:
            return variable(t.name)
        ref = [r for r in (_reference(s, low.sizes) for s in low.steps) if r is not None]
    inputs, outs, sizes, body = low.inputs, low.outputs, low.sizes, low.body
    if grads:        # a gradient left as partial sums between the backward's steps is not compared
        forward = {s.tensor for s in plan.steps if s.phase == "forward"}
        outs = tuple(o for o in outs if not (o.unreduced and o.name not in forward))
    kinds = sorted({s.op.kind for s in low.steps if isinstance(s.op, Elementwise)})
    whole = "the program on whole arrays" if kinds else "jnp.einsum"
    stand_ins = sorted({s.op.kind for s in low.steps if s.identity})     # as measure marks them
    for t in inputs:
        if t.unreduced:
            raise ExportError(f"cannot export: input {t.name} holds partial sums ({t})")
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
        *(f"# {k} is lowered as the identity, as symcost's simulator runs it: {STAND_INS.get(k, 'see its rule')}"
          for k in stand_ins),
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
        "# the host's CPU devices (forced to the mesh's count above), also on a machine with accelerators",
        f"MESH = Mesh(np.array(jax.devices('cpu')[:{ndev}]).reshape({tuple(shape)}), {tuple(names)})",
        "IN_SPECS = {" + ", ".join(f"{t.name!r}: {_spec(t)}" for t in inputs) + "}",
        "OUT_SPECS = {" + ", ".join(f"{o.name!r}: {_spec(o)}" for o in outs) + "}",
        "SHAPES = {" + ", ".join(f"{t.name!r}: {_shape(t, sizes)}" for t in inputs) + "}",
        "",
        "",
        "def step(" + ", ".join(var(t) for t in inputs) + "):",
        "    " + "\n    ".join(body or ["pass"]),
        "    return (" + ", ".join(var(o) for o in outs) + ("," if len(outs) == 1 else "") + ")",
        "",
        "",
        "def reference(r):",
        "    " + "\n    ".join(ref or ["pass"]),
        "    return r",
        "",
        "",
        *grads,
        "def main():",
        "    rng = np.random.default_rng(0)",
        "    values = {}",
        "    for name, shape in SHAPES.items():",
        "        values[name] = jnp.asarray(rng.standard_normal(shape), jnp.float32)",
        *(["        if name in ONES:", "            values[name] = jnp.ones(shape, jnp.float32)"] if grads else []),
        "    kwargs = dict(mesh=MESH, in_specs=tuple(IN_SPECS[n] for n in SHAPES),",
        "                  out_specs=tuple(OUT_SPECS.values()))",
        "    try:",
        "        f = shard_map(step, check_vma=False, **kwargs)",
        "    except TypeError:",
        "        f = shard_map(step, check_rep=False, **kwargs)",
        "    args = [jax.device_put(values[n], NamedSharding(MESH, IN_SPECS[n])) for n in SHAPES]",
        "    got = jax.jit(f)(*args)",
        "    want = jax.jit(reference)(dict(values))",
        "    ok = True",
        "    for name, value in zip(OUT_SPECS, got):",
        "        good = bool(np.allclose(np.asarray(value), np.asarray(want[name]), rtol=1e-4, atol=1e-3))",
        f"        print(f'{{name}}: {{\"matches\" if good else \"DIFFERS from\"}} {whole}')",
        "        ok = ok and good",
        *(["    auto = jax.jit(autodiff)(values)",
           "    for name, value in zip(OUT_SPECS, got):",
           "        if name in GRADS:",
           "            want = np.asarray(auto[GRADS[name]])",
           "            good = bool(np.allclose(np.asarray(value), want, rtol=1e-4, atol=1e-3))",
           "            print(f'{name}: {\"matches\" if good else \"DIFFERS from\"} jax.vjp of the forward')",
           "            ok = ok and good"] if grads else []),
        "    return 0 if ok else 1",
        "",
        "",
        "if __name__ == '__main__':",
        "    sys.exit(main())",
        "",
    ]
    return "\n".join(lines)
