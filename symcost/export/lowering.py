"""A plan lowered to JAX: each step as lines of a ``shard_map`` body on one device's blocks -- an einsum as
``jnp.einsum``, a move through its rule's :meth:`~symcost.collectives.MoveRule.lower_jax`, elementwise work
as its rule's ``jax`` form (its gradient as ``jax_grad`` or ``jax.vjp`` of the forward). ``export-jax``
writes it into a file (:mod:`.jax`), ``measure`` compiles it (:mod:`symcost.device.programs`) and
``xla-check`` computes its steps on whole arrays (:mod:`.xla_check`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..einsum import LocalEinsum
from ..elementwise import Elementwise, Passing
from ..errors import ExportError
from ..layout import Layout

__all__ = ["lower", "Lowering", "Lowered", "concrete_sizes", "elementwise_expr", "einsum_line", "layout_key",
           "shape_of", "variable", "JNP_DTYPES"]


def variable(name: str) -> str:
    """A tensor's variable in the generated text: ``t_`` and its name, any other character an underscore."""
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


def einsum_line(op: LocalEinsum, var=variable, native: bool = False) -> str:
    """The local einsum as one line: in fp32 (what ``export-jax`` checks against ``jnp.einsum``), or with
    ``native`` in the operands' dtypes, accumulating in fp32 and writing the result's dtype."""
    sub = op.subscripts()
    args = ", ".join(var(t.name) for t in op.inputs)
    if not native:
        return f"{var(op.output.name)} = jnp.einsum({sub!r}, {args}, preferred_element_type=jnp.float32)"
    acc = "int32" if all(t.dtype in ("int8", "int4") for t in op.inputs) else "float32"
    return (f"{var(op.output.name)} = jnp.einsum({sub!r}, {args}, preferred_element_type=jnp.{acc})"
            f".astype(jnp.{JNP_DTYPES[op.output.dtype]})")


def shape_of(layout, sizes: dict, mesh=None) -> tuple:
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
    shape = shape_of(op.output, sizes, mesh)
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
    dres = shape_of(op.inputs[0], sizes, mesh)         # a top-k's k: its result's size there
    k = dres[axis] if axis is not None and axis < len(dres) else None
    params = [f"v{i}" for i in range(len(saved))]
    forward = rule.jax.format(*params, axis=axis, k=k, shape=shape)
    return f"jax.vjp(lambda {', '.join(params)}: {forward}, {', '.join(args[1:])})[1]({args[0]})[{which}]"


def passing(plan) -> Passing:
    """A backward plan's pass-through gradients (:class:`symcost.elementwise.Passing`); none forward."""
    backward = any(s.phase == "backward" for s in plan.steps)
    return Passing(s.op for s in plan.steps if backward)


class _Through:
    """The store :class:`~symcost.elementwise.Passing` takes a plan's pass-through gradients in, as the
    simulator does: a layout's variable assigned from (or added into by) its result's gradient's variable;
    a result's gradient that no step writes (the program's own ``dOut``) is an input."""

    def __init__(self, plan, var, sizes, mesh, made: set, inputs: list):
        self.passing = passing(plan)
        self.written = {_writes(s.op).name for s in plan.steps}
        self.var, self.sizes, self.mesh, self.made, self.inputs = var, sizes, mesh, made, inputs
        self.lines: list = []
        self.last: dict = {}

    def read(self, t: Layout, writer: str | None) -> list:
        """Lines that make ``t`` from pending gradients, or add them into it, before a step reads it."""
        self.lines = []
        self.passing.read(t, writer, self)
        return self.lines

    def settle(self, last: dict) -> list:
        """Lines that add the pending gradients no step read where they belong (the end of the pass);
        ``last``: each tensor's layout as the last step left it (the gradients settled are added)."""
        self.lines, self.last = [], last
        self.passing.settle(self)
        return self.lines

    def holds(self, t: Layout) -> bool:
        return layout_key(t) in self.made

    def like(self, src: str, dims, t: Layout) -> Layout | None:
        return Layout(src, tuple(dims), t.axes, t.unreduced, t.dtype) if len(dims) == len(t.dims) else None

    def given(self, t: Layout) -> bool:
        if t.name in self.written:
            return False
        self.inputs.append(t)
        self.made.update((t.name, layout_key(t)))
        return True

    def _value(self, s: Layout, t: Layout) -> str:
        v = self.var(layout_key(s))
        return v if s.dims == t.dims else f"{v}.reshape({shape_of(t, self.sizes, self.mesh)})"

    def take(self, t: Layout, s: Layout) -> None:
        k = layout_key(t)
        self.lines.append(f"{self.var(k)} = {self._value(s, t)}")
        self.made.update((t.name, k))

    def add(self, t: Layout, s: Layout) -> None:
        v = self.var(layout_key(t))
        self.lines.append(f"{v} = {v} + {self._value(s, t)}")

    def final(self, name: str, src: str, dims) -> Layout | None:
        if src not in self.last:
            return None
        s = self.last[src]
        return self.last.setdefault(name, Layout(name, tuple(dims), s.axes, s.unreduced, s.dtype))


def lower(plan, var=variable, native: bool = False, what: str = "export", by_layout: bool = False) -> Lowering:
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
    through = _Through(plan, var, sizes, mesh, seen, inputs) if by_layout else None
    for i, s in enumerate(plan.steps):
        op = s.op
        reads = _reads(op)
        out = _writes(op)
        pre: list = []
        for t in reads:
            if through is not None:
                pre.extend(through.read(t, out.name))
            if t.name not in seen and t.name not in produced and (not by_layout or key(t) not in seen):
                inputs.append(t)
                seen.update((t.name, key(t)))
            unread.discard(key(t))
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
        if pre:       # the whole program makes the pass-through gradients first (a step alone takes them)
            again = tuple(pre) + (again if again is not None else tuple(lines))
        steps.append(Lowered(op, reads, out, tuple(lines), again, identity))
        last[out.name] = out
        if by_layout:
            unread.add(key(out))
            seen.add(key(out))
        if (isinstance(op, (LocalEinsum, Elementwise)) or op.after.name != op.before.name) \
                and out.name not in produced:
            produced.append(out.name)
    if through is not None and steps and (end := through.settle(last)):
        s = steps[-1]
        steps[-1] = Lowered(s.op, s.inputs, s.output, s.lines, (s.in_body or s.lines) + tuple(end), s.identity)
        produced.extend(n for n in last if n not in produced)
    finals = {l.name: l for l in plan.layouts}
    if by_layout:       # the backward's tensors too (the plan's final layouts are the forward's)
        finals = {**{n: t for n, t in last.items() if n not in finals}, **finals}
    else:               # a tensor's one variable holds the layout its last step left (a result gathered later)
        finals.update(last)
    outputs = produced or [t.name for t in inputs]
    return Lowering(tuple(inputs), tuple(finals[n] for n in outputs if n in finals), tuple(steps), sizes)
