"""What a program computes and the gradients of a loss through it, read straight from the notation in NumPy,
independently of the planner: the answers the simulator checks a plan's forward and backward steps against.

    >>> import numpy as np
    >>> a, b = np.ones((2, 3)), np.arange(12.0).reshape(3, 4)
    >>> tape = run(parse("C[I, K] = A[I, J] *_J B[J, K]"), {"A": (("I", "J"), a), "B": (("J", "K"), b)})
    >>> tape.outputs
    ('C',)
    >>> grads = gradients(tape, {"C": (("I", "K"), np.ones((2, 4)))})
    >>> grads["A"][1]            # dA = dC B^T: each row of B summed
    array([[ 6., 22., 38.],
           [ 6., 22., 38.]])

The loss is ``sum_O sum(O * G_O)`` over the program's outputs ``O`` (tensors it computes and never reads
again), so the gradient arriving at ``O`` is ``G_O``. An einsum's gradients are its transposes (``dA =
einsum(dC, B)`` into ``A``'s dimensions, broadcast along a dimension only ``A`` has); elementwise work
takes its rule's gradient (:mod:`symcost.arrays`); a written collective moves data, not values, so its
gradient passes through. A tensor read several times adds up its gradient's contributions.

Products are taken left to right; a product contracts the dimensions named by ``*_D``, or else those both
sides share that neither a later operand nor the written output still needs (the notation's einsum
semantics, written here a second time on purpose).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import arrays
from .notation import parse
from .notation.records import Apply, Collective, Einsum

__all__ = ["Tape", "run", "results", "inputs", "gradients", "statement_value"]

Value = tuple  # (dims, array): an array with its dimensions' names in order


@dataclass
class Tape:
    """The values of every tensor a program reads or computes, and the operations that made them."""

    values: dict = field(default_factory=dict)     # by version: a name, or name@k once a send redefines it
    entries: list = field(default_factory=list)    # (kind, input versions, output version, extra)
    read: set = field(default_factory=set)
    latest: dict = field(default_factory=dict)     # name -> its current version

    @property
    def outputs(self) -> tuple[str, ...]:
        """The tensors the program computes and never reads again."""
        made = [e[2] for e in self.entries if not e[2].startswith("#")]
        return tuple(dict.fromkeys(n.split("@")[0] for n in made if n not in self.read and self.now(n) == n))

    def now(self, name: str) -> str:
        return self.latest.get(name.split("@")[0], name)

    def value(self, name: str) -> Value:
        """The value a name has at the end of the program."""
        return self.values[self.now(name)]

    def fresh(self, name: str) -> str:
        """A version for a new value of ``name`` (its first keeps the bare name)."""
        v = name if name not in self.values else f"{name}@{len(self.entries)}"
        self.latest[name] = v
        return v


def _letters(*dim_lists) -> dict:
    names = dict.fromkeys(d for ds in dim_lists for d in ds)
    return {d: chr(97 + i) for i, d in enumerate(names)}


def _einsum(out_dims, ins: list) -> np.ndarray:
    """``einsum`` of ``ins`` ((dims, array) pairs) into ``out_dims``; a dimension of ``out_dims`` no input
    has is broadcast (the gradient of a dimension one operand sums away)."""
    letter = _letters(out_dims, *(d for d, _ in ins))
    have = [d for d in out_dims if any(d in ds for ds, _ in ins)]
    sub = ",".join("".join(letter[d] for d in ds) for ds, _ in ins) + "->" + "".join(letter[d] for d in have)
    got = np.einsum(sub, *(a for _, a in ins), optimize=True)
    if len(have) == len(out_dims):
        return got
    raise ValueError(f"no operand has dimension(s) {sorted(set(out_dims) - set(have))}")


def _transposed(value: Value, dims) -> np.ndarray:
    vdims, arr = value
    return np.transpose(arr, [list(vdims).index(d) for d in dims])


def _chain(st: Einsum, tape: Tape, out_name: str) -> None:
    ops = st.operands
    wanted = [d.name for d in st.output.dims] if st.output is not None else None
    cur = tape.now(ops[0].name)
    cur_dims = list(tape.values[cur][0])
    if len(ops) == 1:
        if out_name == ops[0].name:           # a reshard: the value stays what it is
            return
        dims = wanted or cur_dims
        value = (tuple(dims), _einsum(dims, [tape.values[cur]]))
        tape.entries.append(("einsum", (cur,), tape.fresh(out_name), None))
        tape.values[tape.entries[-1][2]] = value
        return
    for k, t in enumerate(ops[1:], 1):
        tv = tape.now(t.name)
        t_dims = list(tape.values[tv][0])
        both = [d for d in cur_dims if d in t_dims]
        union = cur_dims + [d for d in t_dims if d not in cur_dims]
        contracted = st.contract[k - 1]
        if k == len(ops) - 1 and wanted is not None:
            keep = wanted
        elif contracted is not None:
            keep = [d for d in union if d not in contracted]
        else:
            still = {d.name for u in ops[k + 1:] for d in u.dims} | set(wanted or ())
            keep = [d for d in union if d not in both or d in still]
        value = (tuple(keep), _einsum(keep, [tape.values[cur], tape.values[tv]]))
        name = tape.fresh(out_name) if k == len(ops) - 1 else f"#{len(tape.entries)}"
        tape.values[name] = value
        tape.entries.append(("einsum", (cur, tv), name, None))
        cur, cur_dims = name, keep


def _apply(st: Apply, tape: Tape, out_name: str, sizes: dict) -> None:
    names = tuple(tape.now(t.name) for t in st.operands)
    dims, _ = tape.values[names[0]]
    out_dims = tuple(d.name for d in st.output.dims) if st.output is not None and st.output.dims else \
        tuple(d for d in dims if not (st.op == "CrossEntropy" and d == st.reduce))
    axis = (out_dims if st.op == "Dispatch" else dims).index(st.reduce) if st.reduce else None
    values = [_transposed(tape.values[n], dims) if sorted(tape.values[n][0]) == sorted(dims) else tape.values[n][1]
              for n in names]
    result = arrays.forward(st.op, values, axis, _shape(out_dims, [tape.values[n] for n in names]
                                                        + list(tape.values.values()), sizes, st.op))
    out = tape.fresh(out_name)
    tape.values[out] = (out_dims, result)
    tape.entries.append(("apply", names, out, (st.op, axis, dims)))


def _shape(out_dims, operands: list, sizes: dict, op: str) -> tuple | None:
    """The result's shape: each dimension's size from a tensor that has it (its operands first), else from
    ``sizes`` (a view's new dimensions, a top-k's k); None where some size is unknown (a rule that keeps its
    operand's shape)."""
    known: dict = {}
    for dims, arr in operands:
        for d, n in zip(dims, arr.shape):
            known.setdefault(d, n)
    known.update({d: int(n) for d, n in sizes.items() if d not in known})
    missing = [d for d in out_dims if d not in known and not d.isdigit()]
    if missing and op in ("TopK", "View", "Dispatch"):
        if op == "View" and sorted(out_dims) == sorted(operands[0][0]):
            return None
        raise ValueError(f"{op} needs the size of {', '.join(missing)} (give it in the sizes)")
    return None if missing else tuple(int(d) if d.isdigit() else known[d] for d in out_dims)


def run(program, values: dict, mesh_sizes: dict | None = None, sizes: dict | None = None) -> Tape:
    """Every tensor of ``program`` (parsed, or its text) computed from the input ``values`` ({name:
    (dims, array)}); a send needs the size of its axis (``mesh_sizes``); a view, a top-k or a dispatch the
    sizes of the dimensions its result adds (``sizes``)."""
    program = parse(program) if isinstance(program, str) else program
    made = results(program) - {st.operand.name for st in program.statements if isinstance(st, Collective)}
    tape = Tape(values={k: v for k, v in values.items() if k not in made})
    for st in program.statements:
        if isinstance(st, Einsum):
            reads = [t.name for t in st.operands]
            if len(reads) == 1 and st.output is None and st.output_name is None:
                continue                   # a bare tensor: a declaration of its layout
            out = st.result_name or "Out"
            if not (len(reads) == 1 and reads[0] == out):
                tape.read.update(tape.now(n) for n in reads)
            _chain(st, tape, out)
        elif isinstance(st, Apply):
            tape.read.update(tape.now(t.name) for t in st.operands)
            _apply(st, tape, st.result_name, sizes or {})
        elif isinstance(st, Collective):
            _collective(st, tape, mesh_sizes or {})
    return tape


def _collective(st: Collective, tape: Tape, mesh_sizes: dict) -> None:
    """A collective moves blocks and keeps the value, except a send: its blocks shift along the axis."""
    src = tape.now(st.operand.name)
    dims, arr = tape.values[src]
    shift = None
    if st.kind == "Send":
        (axis,) = st.axes[:1]
        for i, d in enumerate(st.operand.dims):
            if axis in d.axes:
                shift = (i, (st.distance or 1) * (arr.shape[i] // mesh_sizes[axis]))
        if shift is None:
            return                           # replicated over the axis: every copy is the same
    elif st.output.name == st.operand.name:
        return
    tape.read.add(src)
    out = tape.fresh(st.output.name)
    tape.values[out] = (dims, arr if shift is None else np.roll(arr, shift[1], axis=shift[0]))
    tape.entries.append(("copy", (src,), out, shift))


def results(program) -> set:
    """The names a program computes (a collective that keeps its operand's name computes nothing new)."""
    out = set()
    for st in program.statements:
        if isinstance(st, Einsum) and (len(st.operands) > 1 or st.result_name not in (None, st.operands[0].name)):
            out.add(st.result_name or "Out")
        elif isinstance(st, Apply):
            out.add(st.result_name)
        elif isinstance(st, Collective) and (st.kind == "Send" or st.output.name != st.operand.name):
            out.add(st.output.name)
    return out


def inputs(program) -> tuple[str, ...]:
    """The tensors a program reads and computes nowhere (a collective moves a tensor, it does not compute
    one): its inputs, parameters included."""
    computed, read = set(), []
    for st in program.statements:
        if isinstance(st, Einsum) and (len(st.operands) > 1 or st.result_name not in (None, st.operands[0].name)):
            computed.add(st.result_name or "Out")
        elif isinstance(st, Apply):
            computed.add(st.result_name)
        reads = st.operands if isinstance(st, (Einsum, Apply)) else (st.operand,) if isinstance(st, Collective) \
            else ()
        read += [t.name for t in reads]
    return tuple(dict.fromkeys(n for n in read if n not in computed))


def gradients(tape: Tape, seeds: dict) -> dict:
    """``{name: (dims, gradient)}`` of the loss ``sum_O sum(O * seeds[O])`` for every tensor the loss
    depends on (outputs missing from ``seeds`` contribute nothing)."""
    grads: dict = {}

    def add(name, dims, g):
        if name in grads:
            gd, ga = grads[name]
            grads[name] = (gd, ga + _transposed((dims, g), gd))
        else:
            grads[name] = (tuple(dims), g)

    for name, value in seeds.items():
        add(tape.now(name), *value)
    for kind, ins, out, extra in reversed(tape.entries):
        if out not in grads:
            continue
        gd, g = grads[out]
        if kind == "copy":                 # a send's gradient is sent back
            dims = tape.values[out][0]
            g = _transposed((gd, g), dims)
            add(ins[0], dims, g if extra is None else np.roll(g, -extra[1], axis=extra[0]))
        elif kind == "einsum":
            for i, name in enumerate(ins):
                others = [tape.values[n] for j, n in enumerate(ins) if j != i]
                dims = tape.values[name][0]
                add(name, dims, _broadcast_einsum(dims, [(gd, g)] + others, tape.values[name][1].shape))
        else:
            op, axis, dims = extra
            g = _transposed((gd, g), tape.values[out][0])
            saved = _saved(op, ins, out, tape, dims)
            for i, name in enumerate(ins[:1] if op == "Dispatch" else ins):   # the router's choice: no gradient
                add(name, dims, arrays.backward(op, g, saved, i, axis, tape.values[name][1].shape))
    return {k: v for k, v in grads.items() if not k.startswith("#")}   # by version: a name is its first


def _saved(op: str, ins, out, tape: Tape, dims) -> list:
    from .elementwise import RULES
    how = RULES[op].saves
    if how == "inputs":
        return [_transposed(tape.values[n], dims) for n in ins]
    if how == "output":
        return [tape.values[out][1]]
    return []


def _broadcast_einsum(dims, ins, shape) -> np.ndarray:
    have = [d for d in dims if any(d in ds for ds, _ in ins)]
    got = _einsum(have, ins)
    if len(have) == len(dims):
        return got
    expand = np.expand_dims(got, [i for i, d in enumerate(dims) if d not in have])
    return np.broadcast_to(expand, shape).copy()


def statement_value(text: str, values: dict) -> np.ndarray:
    """What a one-statement program computes from ``values`` ({name: array}, laid out as written)."""
    program = parse(text)
    (st,) = program.statements
    if not isinstance(st, (Einsum, Apply)):
        raise ValueError(f"statement_value computes an einsum or elementwise work, not {type(st).__name__}")
    dims = {t.name: tuple(d.name for d in t.dims) for t in st.tensors}
    tape = run(program, {k: (dims[k], v) for k, v in values.items() if k in dims})
    out = st.result_name or "Out"
    return tape.value(out)[1] if out in tape.latest else tape.value(st.operands[0].name)[1]
