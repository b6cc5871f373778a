"""Plans as JAX programs: PartitionSpecs for every input and a ``shard_map`` that performs each step with
``jax.lax`` collectives, checked against the same steps on whole arrays (:mod:`.xla_check` compiles the
program with XLA's partitioner instead and lists the collectives it inserted beside symcost's).

    symcost export-jax "In[B_X, D_Y] * W[D_Y, F] -> Out[B_X, F]" --mesh X=4,Y=2 -o layer.py
    python layer.py        # runs on forced host devices, compares with jnp.einsum, exits 0 when equal

The exported file does not import symcost. Each move is lowered by its own rule
(:meth:`symcost.collectives.MoveRule.lower_jax`), elementwise work by its rule's ``jax`` form (its
gradient by ``jax_grad`` or ``jax.vjp``); ``measure`` compiles the same lowering (:func:`lower`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..einsum import LocalEinsum
from ..elementwise import Elementwise
from ..errors import ExportError

__all__ = ["export_plan", "concrete_sizes", "lower", "Lowering", "Lowered", "einsum_line", "layout_key",
           "JNP_DTYPES",
           "ExportError"]


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
    return str(_shape_of(layout, sizes))


def _var(name: str) -> str:
    return "t_" + re.sub(r"\W", "_", name)


def _reads(op) -> tuple:
    return tuple(op.inputs) if isinstance(op, (LocalEinsum, Elementwise)) else (op.before,)


def _writes(op):
    return op.output if isinstance(op, (LocalEinsum, Elementwise)) else op.after


def concrete_sizes(plan, what: str) -> dict:
    """Every dimension's size: the bound ones, and for the rest a small size every layout divides (twice
    the number of devices). JAX's shard_map needs dimensions its axes divide: padded blocks are refused, and
    elementwise work no rule's ``jax`` form writes."""
    mesh = plan.mesh
    if not mesh.bound:
        raise ExportError(f"cannot {what}: give every mesh axis a size (--mesh X=4,...)")
    for s in plan.steps:
        if s.is_elementwise and not _lowerable(s.op):
            raise ExportError(f"cannot {what}: {s.op.label} has no JAX lowering (the notation does not say "
                              f"which function it applies)")
    if plan.padding:
        raise ExportError(f"cannot {what} padded blocks ({plan.padding[0]}): bind sizes the axes divide")
    default = 2
    for a in mesh.axes:
        default *= a.size
    sizes = {}
    for s in plan.steps:
        for t in _reads(s.op) + (_writes(s.op),):
            sizes.update({d: default for d in t.dims if not d.isdigit()})
    sizes.update({d: default for lay in plan.layouts for d in lay.dims if not d.isdigit()})
    sizes.update(dict(plan.sizes))
    return sizes


#: elementwise work lowered as the identity (its rule's ``jax`` form), and why
STAND_INS = {"Rotary": "its rotation needs each element's position, which the notation does not name",
             "Dropout": "its mask is random (as at inference)"}

#: jnp names of symcost's dtypes (``native`` lowering keeps each tensor in its own dtype)
JNP_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp8": "float8_e4m3fn", "int8": "int8",
              "int4": "int4"}


@dataclass(frozen=True)
class Lowered:
    """One step of a plan as JAX: the layouts it reads, the layout it leaves, and the ``shard_map`` body
    lines that perform it on the local blocks."""

    op: object
    inputs: tuple
    output: object
    lines: tuple[str, ...]
    in_body: tuple[str, ...] | None = None    # the lines inside the whole program, where they differ
    identity: bool = False                    # elementwise work lowered as the identity (:data:`STAND_INS`)


def layout_key(layout) -> tuple:
    """A tensor in one layout: what ``lower(..., by_layout=True)`` gives its own variable."""
    return (layout.name, layout.dims, layout.axes, layout.unreduced)


@dataclass(frozen=True)
class Lowering:
    """A plan as one ``shard_map`` body: its inputs (first layouts), outputs (final layouts), the steps
    in order and the sizes every dimension takes (see :func:`concrete_sizes`)."""

    inputs: tuple
    outputs: tuple
    steps: tuple[Lowered, ...]
    sizes: dict

    @property
    def body(self) -> list[str]:
        return [line for s in self.steps for line in (s.lines if s.in_body is None else s.in_body)]


def einsum_line(op: LocalEinsum, var=_var, native: bool = False) -> str:
    """The local einsum as one line: in fp32 (what ``export-jax`` checks against ``jnp.einsum``), or with
    ``native`` in the operands' dtypes, accumulating in fp32 and writing the result's dtype."""
    sub = op.subscripts()
    args = ", ".join(var(t.name) for t in op.inputs)
    if not native:
        return f"{var(op.output.name)} = jnp.einsum({sub!r}, {args}, preferred_element_type=jnp.float32)"
    acc = "int32" if all(t.dtype in ("int8", "int4") for t in op.inputs) else "float32"
    return (f"{var(op.output.name)} = jnp.einsum({sub!r}, {args}, preferred_element_type=jnp.{acc})"
            f".astype(jnp.{JNP_DTYPES[op.output.dtype]})")


def _shape_of(layout, sizes: dict, mesh=None) -> tuple:
    """A layout's shape: whole, or (with ``mesh``) one device's block."""
    def size(d: str) -> int:
        return int(d) if d.isdigit() else int(sizes[d])
    if mesh is None:
        return tuple(size(d) for d in layout.dims)
    out = []
    for d, ax in zip(layout.dims, layout.axes):
        n = 1
        for a in ax:
            n *= mesh.axis(a).size
        out.append(size(d) // n)
    return tuple(out)


def _lowerable(op: Elementwise) -> bool:
    rule = op.rule
    return bool(rule.jax_grad or rule.saves == "inputs" and rule.jax) if op.grad else bool(rule.jax)


def elementwise_expr(op: Elementwise, args: list, sizes: dict, mesh=None) -> str:
    """Elementwise work as one jax.numpy expression on ``args`` (each operand's variable), whole arrays or
    (with ``mesh``) one device's blocks, from its rule's ``jax`` form: an operand whose dimensions are the
    first's in another order is transposed to them first, and the reduced dimension is found where
    :mod:`symcost.simulation` finds it (in the result, for a rule that adds it). A backward step (``Rule'``:
    the result's gradient, then what the rule saved) is its rule's ``jax_grad`` form, or, for a rule that
    saves its inputs, ``jax.vjp`` of its forward at them."""
    shape = _shape_of(op.output, sizes, mesh)
    if op.grad:
        return _gradient_expr(op, args, sizes, mesh, shape)
    dims = op.inputs[0].dims
    args = [f"jnp.transpose({a}, {tuple(t.dims.index(d) for d in dims)})"
            if t.dims != dims and sorted(t.dims) == sorted(dims) else a for t, a in zip(op.inputs, args)]
    where = op.output.dims if op.rule.broadcasts else dims
    axis = where.index(op.reduce) if op.reduce else None
    k = shape[axis] if axis is not None and axis < len(shape) else None
    return op.rule.jax.format(*args, axis=axis, k=k, shape=shape)


def _gradient_expr(op: Elementwise, args: list, sizes: dict, mesh, shape: tuple) -> str:
    rule = op.rule
    axis = (op.inputs[0] if rule.broadcasts else op.output).dims.index(op.reduce) if op.reduce else None
    if rule.saves != "inputs":
        return rule.jax_grad.format(*args, axis=axis, shape=shape)
    saved = [t.name for t in op.inputs[1:]]
    which = saved.index(op.output.name[1:]) if op.output.name[1:] in saved else 0
    dres = _shape_of(op.inputs[0], sizes, mesh)         # a top-k's k: its result's size there
    k = dres[axis] if axis is not None and axis < len(dres) else None
    params = [f"v{i}" for i in range(len(saved))]
    forward = rule.jax.format(*params, axis=axis, k=k, shape=shape)
    return f"jax.vjp(lambda {', '.join(params)}: {forward}, {', '.join(args[1:])})[1]({args[0]})[{which}]"


def lower(plan, var=_var, native: bool = False, what: str = "export", by_layout: bool = False) -> Lowering:
    """Every step of ``plan`` as ``shard_map`` body lines: einsums as ``jnp.einsum``, each move through
    its rule's :meth:`~symcost.collectives.MoveRule.lower_jax`. ``var`` names a tensor's variable;
    ``what`` says what the lowering is for in its errors.

    By default a tensor is one variable that its moves change in place (the exported file). With
    ``by_layout`` each layout of a tensor is its own variable (``var`` gets :func:`layout_key`), so a step
    that reads an earlier layout reads it as it was; and a step that writes a value over one nothing has
    read yet (the gradient contributions a backward pass sums) adds to it, so every step's work is live
    in the program (a compiler drops what no one reads). Elementwise work is each rule's ``jax`` form
    (:func:`elementwise_expr`)."""
    mesh = plan.mesh
    sizes = concrete_sizes(plan, what)
    key = layout_key if by_layout else (lambda t: t.name)
    inputs, seen, steps, produced = [], set(), [], []
    unread: set = set()
    last = {}                                   # each tensor's layout as the last step left it
    for i, s in enumerate(plan.steps):
        op = s.op
        reads = _reads(op)
        for t in reads:
            if t.name not in seen and t.name not in produced and (not by_layout or key(t) not in seen):
                inputs.append(t)
                seen.update((t.name, key(t)))
            unread.discard(key(t))
        out = _writes(op)
        v = var(key(out))
        if isinstance(op, Elementwise):
            expr = elementwise_expr(op, [var(key(t)) for t in op.inputs], sizes, mesh)
            if native and out.dtype in JNP_DTYPES:          # the result in its own dtype, as an einsum's
                expr = f"({expr}).astype(jnp.{JNP_DTYPES[out.dtype]})"
            lines = (f"{v} = {expr}",)
            again = (f"{v} = {v} + {expr}",) if by_layout and key(out) in unread else None
        elif isinstance(op, LocalEinsum):
            line = einsum_line(op, lambda n: var(key(next(t for t in op.inputs + (op.output,) if t.name == n))),  # noqa: B023
                               native) if by_layout else einsum_line(op, var, native)
            lines = (line,)
            again = (f"{v} = {v} + {line.split(' = ', 1)[1]}",) if by_layout and key(out) in unread else None
        else:
            src = var(key(op.before))
            lines = ([f"{v} = {src}"] if v != src else []) + list(op.rule.lower_jax(op, mesh, v))
            again = None
            if by_layout and key(out) in unread:
                tmp = var(("", i))
                again = (f"{tmp} = {src}", *op.rule.lower_jax(op, mesh, tmp), f"{v} = {v} + {tmp}")
        identity = isinstance(op, Elementwise) and (op.rule.jax_grad if op.grad else op.rule.jax) == "{0}"
        steps.append(Lowered(op, reads, out, tuple(lines), again, identity))
        last[out.name] = out
        if by_layout:
            unread.add(key(out))
            seen.add(key(out))
        if (isinstance(op, (LocalEinsum, Elementwise)) or op.after.name != op.before.name) \
                and out.name not in produced:
            produced.append(out.name)
    finals = {l.name: l for l in plan.layouts}
    if by_layout:       # the backward's tensors too (the plan's final layouts are the forward's)
        finals = {**{n: t for n, t in last.items() if n not in finals}, **finals}
    else:               # a tensor's one variable holds the layout its last step left (a result gathered later)
        finals.update(last)
    outputs = produced or [t.name for t in inputs]
    return Lowering(tuple(inputs), tuple(finals[n] for n in outputs if n in finals), tuple(steps), sizes)


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
            k, name = 0, _var(key[0])
            while name in self.used:
                k += 1
                name = f"{_var(key[0])}_{k}"
            self.table[key] = name
            self.used.add(name)
        return self.table[key]


def _accumulated(low: Lowering) -> list[str]:
    """The reference's lines, a gradient's later contributions added to its first (a tensor written again
    before anything read it)."""
    out, pending = [], set()
    for s in low.steps:
        pending.difference_update(t.name for t in s.inputs)
        line = _reference(s, low.sizes)
        if line is None:
            continue
        n = s.output.name
        if n in pending:
            line = line.replace(f"r[{n!r}] = ", f"r[{n!r}] = r[{n!r}] + ", 1)
        pending.add(n)
        out.append(line)
    return out


def export_plan(plan) -> str:
    """A standalone Python program that runs ``plan`` with shard_map and checks it against the same program
    on whole arrays (``jnp.einsum`` for a program of einsums; elementwise work as its rule's ``jax`` form).
    Dimensions left unbound get a small size every layout divides (twice the number of devices). A plan with
    its backward pass is lowered with a variable for each layout of a tensor (a parameter stays sharded
    beside its gathered copy; a gradient's contributions are summed), as ``measure`` runs it."""
    mesh = plan.mesh
    if any(s.phase == "backward" for s in plan.steps):
        each = _LayoutNames()
        low = lower(plan, var=each, by_layout=True)

        def var(t) -> str:
            return each(layout_key(t))
        ref = _accumulated(low)
    else:
        low = lower(plan)

        def var(t) -> str:
            return _var(t.name)
        ref = [r for r in (_reference(s, low.sizes) for s in low.steps) if r is not None]
    inputs, outs, sizes, body = low.inputs, low.outputs, low.sizes, low.body
    kinds = sorted({s.op.kind for s in low.steps if isinstance(s.op, Elementwise)})
    whole = "the program on whole arrays" if kinds else "jnp.einsum"
    stand_ins = [k for k in kinds if k in STAND_INS]
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
        *(f"# {k} is lowered as the identity, as symcost's simulator runs it: {STAND_INS[k]}" for k in stand_ins),
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
        f"        print(f'{{name}}: {{\"matches\" if good else \"DIFFERS from\"}} {whole}')",
        "        ok = ok and good",
        "    return 0 if ok else 1",
        "",
        "",
        "if __name__ == '__main__':",
        "    sys.exit(main())",
        "",
    ]
    return "\n".join(lines)
