"""The simulated devices a plan runs on (:func:`symcost.simulate.check_plan` drives them).

Every device holds blocks of tensors; a tensor may be held in several layouts at once (FSDP keeps a
weight's shards and, for a while, its gathered copy; a backward pass gathers it again), each layout an
instance of its own, keyed by what places its blocks (name, dimensions, axes, unreduced axes). A step
reads instances and writes one:

- an einsum or elementwise step computes each device's block from its local blocks (elementwise work is
  given its NumPy meaning by :mod:`symcost.arrays`; a dropout also writes its mask);
- a collective runs its kind's NumPy semantics on the blocks (:mod:`symcost.collectives`).

Gradients add up. A gradient instance written by the backward pass and not read since takes the next
contribution written to it as a sum (a tensor read twice gets two contributions in one layout: Megatron's
g operator, partial sums included); a read moves its value on, so a later contribution starts afresh. A
residual add or a view passes the gradient through without a step: the operand's gradient *is* the
result's, so the simulator keeps it as a pending contribution and takes it from the result's gradient,
laid out the same way, where the operand's gradient is first needed (or at the end).

After every step the instance written is collected and compared with the same operation on whole arrays,
so a move that loses or duplicates data is caught where it happens.
"""
from __future__ import annotations

import numpy as np

from . import arrays
from .collectives import Grid
from .einsum import LocalEinsum
from .elementwise import Elementwise, Passing, mask_layout
from .errors import SimulationError
from .layout import Layout
from .simulate import full_shape, collect, distribute, pad, padded_shape

__all__ = ["Devices"]


def key(t: Layout) -> tuple:
    """What places a tensor's blocks on the devices (the dtype does not)."""
    return t.name, t.dims, t.axes, frozenset(t.unreduced)


def _written(op) -> Layout:
    return op.output if isinstance(op, (LocalEinsum, Elementwise)) else op.after


def _read(op) -> tuple:
    return tuple(op.inputs) if isinstance(op, (LocalEinsum, Elementwise)) else (op.before,)


def _elementwise(op: Elementwise, values: list, shape: tuple) -> np.ndarray:
    """The block (or whole array) of ``shape`` that elementwise work writes from its operands' ``values``
    (the axis of a dispatch: the dimension it adds, in its result forward and in the gradient it sums)."""
    broadcasts = op.rule.broadcasts
    if not op.grad:
        dims = op.inputs[0].dims
        values = [v if t.dims == dims or sorted(t.dims) != sorted(dims) else
                  np.transpose(v, [t.dims.index(d) for d in dims]) for t, v in zip(op.inputs, values)]
        where = op.output.dims if broadcasts else dims
        return arrays.forward(op.kind, values, where.index(op.reduce) if op.reduce else None, shape)
    saved_names = [t.name for t in op.inputs[1:]]
    x = op.output.name[1:]
    which = saved_names.index(x) if x in saved_names else 0
    axis = (op.inputs[0] if broadcasts else op.output).dims.index(op.reduce) if op.reduce else None
    return arrays.backward(op.kind, values[0], values[1:], which, axis)


class Devices:
    """The devices' blocks and, beside them, the whole array each instance stands for."""

    def __init__(self, plan, sizes: dict, rng, inputs: dict, rtol: float):
        self.plan, self.mesh, self.grid = plan, plan.mesh, Grid(plan.mesh)
        self.sizes, self.rng, self.inputs, self.rtol = sizes, rng, inputs, rtol
        self.blocks: dict = {}      # key -> {device: block}
        self.full: dict = {}        # key -> the whole (unpadded) array
        self.layout: dict = {}      # key -> Layout
        self.last: dict = {}        # name -> key of the instance written last
        self.unread: set = set()    # instances written and not read since
        self.created: dict = {}     # name -> (dims, whole array): inputs and output gradients drawn here
        self.first: dict = {}       # name -> the layout it was drawn in
        steps = plan.steps
        forward = {t.name for s in steps if s.phase != "backward" for t in _read(s.op) + (_written(s.op),)}
        forward |= {t.name for t in plan.layouts}
        self.backward = any(s.phase == "backward" for s in steps)
        self.grads = {_written(s.op).name for s in steps if s.phase == "backward"} - forward
        self.computed = {_written(s.op).name for s in steps if isinstance(s.op, (LocalEinsum, Elementwise))}
        self.passing = Passing(s.op for s in steps if self.backward)    # a residual add's or a view's operands

    # ----------------------------------------------------------------------------- instances

    def _create(self, t: Layout) -> tuple:
        arr = self.inputs.get(t.name)
        if arr is None:
            arr = self.rng.standard_normal(full_shape(t, self.sizes))
        k = key(t)
        self.full[k] = np.asarray(arr, dtype=np.float64)
        self.blocks[k] = distribute(self.full[k], t, self.mesh, self.rng)
        self.layout[k] = t
        self.last.setdefault(t.name, k)
        self.created[t.name] = (t.dims, self.full[k])
        self.first.setdefault(t.name, t)
        return k

    def _held(self, name: str) -> list:
        return [self.layout[k] for k in self.layout if k[0] == name]

    def read(self, t: Layout, writer: str) -> tuple:
        """The instance a step reads (``writer``: the name the step writes)."""
        k = key(t)
        self.passing.read(t, writer, self)
        if k not in self.blocks:
            held = self._held(t.name)
            if held:
                raise SimulationError(f"{t.name} is held as {', '.join(map(str, held))} on the devices but "
                                      f"the plan uses {t}, which no step made")
            if t.name in self.computed:
                raise SimulationError(f"the plan reads {t} before any step computes it")
            self._create(t)
            self.passing.read(t, writer, self)
        self.unread.discard(k)
        return k

    # --------------------------------------------------- pass-through gradients (:class:`Passing`'s store)

    def holds(self, t: Layout) -> bool:
        return key(t) in self.blocks

    def like(self, src: str, dims, t: Layout) -> Layout | None:
        """The result's gradient ``src`` laid out (position by position) as ``t`` is."""
        return Layout(src, tuple(dims), t.axes, t.unreduced, t.dtype) if len(dims) == len(t.dims) else None

    def given(self, t: Layout) -> bool:
        if self._held(t.name) or t.name in self.computed:
            return False
        self._create(t)
        return True

    def take(self, t: Layout, s: Layout) -> None:
        blocks, full = self._passed(s, t)
        self._put(t, {d: b.copy() for d, b in blocks.items()}, full.copy())

    def add(self, t: Layout, s: Layout) -> None:
        k = key(t)
        blocks, full = self._passed(s, t)
        self.blocks[k] = {d: b + blocks[d] for d, b in self.blocks[k].items()}
        self.full[k] = self.full[k] + full

    def final(self, name: str, src: str, dims) -> Layout | None:
        if src not in self.last:
            return None
        if name in self.last:
            return self.layout[self.last[name]]
        s = self.layout[self.last[src]]
        return Layout(name, tuple(dims), s.axes, s.unreduced, s.dtype)

    def _local(self, t: Layout) -> tuple:
        """The shape of each device's block of ``t`` (every size divides by its axes' devices)."""
        return tuple(n // self.grid.count(a) for n, a in zip(full_shape(t, self.sizes), t.axes))

    def _passed(self, s: Layout, t: Layout) -> tuple:
        """The blocks and whole array of the result's gradient ``s`` read as ``t``'s (a view's gradient is
        its result's, read back in row-major order as its operand's shape)."""
        k2 = key(s)
        self.unread.discard(k2)
        whole = full_shape(t, self.sizes)
        if self.full[k2].shape == whole:
            return self.blocks[k2], self.full[k2]
        local = self._local(t)
        return ({d: b.reshape(local) for d, b in self.blocks[k2].items()}, self.full[k2].reshape(whole))

    def _put(self, t: Layout, blocks: dict, full: np.ndarray) -> tuple:
        k = key(t)
        self.blocks[k], self.full[k], self.layout[k] = blocks, full, t
        self.last[t.name] = k
        self.unread.add(k)
        return k

    def write(self, t: Layout, blocks: dict, full: np.ndarray) -> tuple:
        """A step's result; a gradient not read since its last contribution adds this one to it."""
        k = key(t)
        if t.name in self.grads and k in self.blocks and k in self.unread:
            blocks = {d: self.blocks[k][d] + b for d, b in blocks.items()}
            full = self.full[k] + full
        return self._put(t, blocks, full)

    # ----------------------------------------------------------------------------------- steps

    def run(self, n: int, step) -> None:
        op = step.op
        devices = self.grid.devices()
        if isinstance(op, LocalEinsum):
            ins = [self.read(t, op.output.name) for t in op.inputs]
            sub = op.subscripts()
            # optimize: a product through BLAS where it is one (the full arrays of a real layer's sizes)
            blocks = {d: np.einsum(sub, *(self.blocks[k][d] for k in ins), optimize=True) for d in devices}
            full = np.einsum(sub, *(self.full[k] for k in ins), optimize=True)
        elif isinstance(op, Elementwise):
            for t in op.inputs + (op.output,):
                shape = full_shape(t, self.sizes)
                if padded_shape(shape, t, self.mesh) != shape:
                    raise SimulationError(f"elementwise work on {t} is simulated only where every size divides by "
                                          f"the mesh's {self.grid.count(self.mesh.names)} devices")
            ins = [self.read(t, op.output.name) for t in op.inputs]
            local = self._local(op.output)
            blocks = {d: _elementwise(op, [self.blocks[k][d] for k in ins], local) for d in devices}
            full = _elementwise(op, [self.full[k] for k in ins], full_shape(op.output, self.sizes))
        else:
            src = self.read(op.before, op.after.name)
            blocks = op.rule.simulate(self.blocks[src], op, self.grid)
            moved = op.rule.reference(pad(self.full[src], op.before, self.mesh), op, self.grid)
            full = moved[tuple(slice(0, s) for s in self.full[src].shape)]
        out = _written(op)
        k = self.write(out, blocks, full)
        self._check(k, f"step {n} ({step.signature()}) leaves {out.name} wrong on the devices")
        if isinstance(op, Elementwise) and not op.grad and op.rule.saves == "mask":
            self._put(mask_layout(out), {d: np.ones_like(b) for d, b in blocks.items()}, np.ones_like(full))

    def _check(self, k, message: str) -> None:
        full = self.full[k]
        got = collect(self.blocks[k], self.layout[k], self.mesh, full.shape)
        scale = max(1.0, float(np.abs(full).max())) if full.size else 1.0
        if not np.allclose(got, full, rtol=self.rtol, atol=self.rtol * scale):
            raise SimulationError(message)

    def finish(self) -> None:
        """Tensors no step touches (a reshard already in place) are placed; pass-through gradients that no
        step read are added where they belong."""
        for lay in self.plan.layouts:
            if not self._held(lay.name):
                self._create(lay)
        self.passing.settle(self)

    def arrays(self) -> dict:
        """The whole array of every tensor, from the instance written last."""
        return {n: collect(self.blocks[k], self.layout[k], self.mesh, self.full[k].shape) for n, k in self.last.items()}

    # ------------------------------------------------------------------------- against the notation

    def check_against_notation(self) -> None:
        """Every tensor the program computes, and every gradient, against :mod:`symcost.reference`."""
        from .notation import parse
        from .reference import gradients, inputs, results, run
        program = parse(self.plan.expression)
        made = results(program)
        values = dict(self.created)
        tape = run(program, values, {a: self.grid.size(a) for a in self.mesh.names}, self.sizes)
        have = self.arrays()
        for name in made:
            if name in self.last and name in tape.latest:
                self._compare(name, have[name], tape.value(name), "the plan computes {name} as {lay}, which is not "
                              "what the program's notation computes")
        if not self.backward:
            return
        seeds = {}
        for o in tape.outputs:
            dims, arr = tape.value(o)
            seeds[o] = self.created.get("d" + o) or (dims, self.rng.standard_normal(arr.shape))
        ref = gradients(tape, seeds)
        for name in inputs(program):
            g, first = "d" + name, self.first.get(name)
            if g not in self.last:
                raise SimulationError(f"the plan computes no gradient of {name}")
            lay = self.layout[self.last[g]]
            if first is not None and (lay.axes != first.axes or lay.unreduced):
                raise SimulationError(f"the plan leaves the gradient of {name} as {lay}; {name} is "
                                      f"{first.render(self.mesh) if hasattr(first, 'render') else first}")
        for name in {n for n in tape.values if "#" not in n and "@" not in n}:
            g = "d" + name
            if g not in self.last:
                continue
            want = ref.get(name) or (tape.values[name][0], np.zeros_like(tape.values[name][1]))
            self._compare(g, have[g], want, "the plan's gradient {name} ({lay}) is not the gradient of the "
                          "program's loss sum(Out * dOut)")

    def _compare(self, name: str, got: np.ndarray, want, message: str) -> None:
        lay = self.layout[self.last[name]]
        dims, arr = want
        if sorted(dims) != sorted(lay.dims):
            return          # a relabelled view of the same name: compared where it is made
        arr = np.transpose(arr, [list(dims).index(d) for d in lay.dims])
        scale = max(1.0, float(np.abs(arr).max())) if arr.size else 1.0
        if got.shape != arr.shape or not np.allclose(got, arr, rtol=1e-6, atol=1e-6 * scale):
            diff = float(np.abs(got - arr).max()) if got.shape == arr.shape else float("nan")
            raise SimulationError(message.format(name=name, lay=lay) + f" (largest difference {diff:.3g})")
