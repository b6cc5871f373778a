"""A numpy simulator: run a plan on P simulated devices, each holding only its own blocks.

The ground truth for what a collective does to data (DESIGN section 5): every move works on the local
blocks the way a real collective would (a device only combines blocks it receives from the peers of its
group), and the result must reproduce the unsharded ``numpy.einsum``::

    >>> import numpy as np, symcost
    >>> plan = symcost.derive("A[I, J_X] * B[J, K] -> C[I, K]", mesh="X=4", dims="I=4,J=8,K=4")
    >>> out = check_plan(plan, {"I": 4, "J": 8, "K": 4}, np.random.default_rng(0))
    >>> sorted(out)
    ['A', 'B', 'C']

Block order is X-major: ``A[I_{XY}]`` puts block ``x * |Y| + y`` on the device with coordinates (x, y).
Partial sums (``{U_X}``) are distributed as random summands over X, so a plan that forgets a reduction
or reduces twice is caught.
"""
from __future__ import annotations

import itertools

import numpy as np

from .cost import LocalEinsum, Move
from .errors import SymcostError
from .layout import Layout
from .mesh import Mesh


class SimulationError(SymcostError):
    """A plan that does not compute what it claims."""

    exit_code = 1


Device = tuple  # one coordinate per mesh axis, in mesh order


def devices(mesh: Mesh):
    return list(itertools.product(*(range(_size(mesh, a.name)) for a in mesh.axes)))


def _size(mesh: Mesh, name: str) -> int:
    a = mesh.axis(name)
    if a.size is None:
        raise SimulationError(f"mesh axis {name} needs a size to be simulated")
    return a.size


def _coord(mesh: Mesh, d: Device, axis: str) -> int:
    return d[mesh.names.index(axis)]


def _with(mesh: Mesh, d: Device, values: dict) -> Device:
    out = list(d)
    for a, v in values.items():
        out[mesh.names.index(a)] = v
    return tuple(out)


def block_index(mesh: Mesh, d: Device, axes) -> int:
    """X-major index of device ``d``'s block along a dimension split over ``axes``."""
    idx = 0
    for a in axes:
        idx = idx * _size(mesh, a) + _coord(mesh, d, a)
    return idx


def _count(mesh: Mesh, axes) -> int:
    n = 1
    for a in axes:
        n *= _size(mesh, a)
    return n


def _block(array: np.ndarray, layout: Layout, mesh: Mesh, d: Device) -> np.ndarray:
    sl = []
    for i, axes in enumerate(layout.axes):
        n = _count(mesh, axes)
        size = array.shape[i] // n
        k = block_index(mesh, d, axes)
        sl.append(slice(k * size, (k + 1) * size))
    return array[tuple(sl)]


def _group(mesh: Mesh, d: Device, axes):
    """The devices that differ from ``d`` only in ``axes`` (d included), in X-major order of ``axes``."""
    ranges = [range(_size(mesh, a)) for a in axes]
    return [_with(mesh, d, dict(zip(axes, vals))) for vals in itertools.product(*ranges)]


def distribute(array: np.ndarray, layout: Layout, mesh: Mesh, rng=None) -> dict:
    """The blocks every device holds; unreduced axes get random summands of the block."""
    rng = rng or np.random.default_rng(0)
    unreduced = mesh.order(layout.unreduced)
    out = {}
    for d in devices(mesh):
        out[d] = _block(array, layout, mesh, d).copy()
    if not unreduced:
        return out
    done = set()
    for d in devices(mesh):
        base = _with(mesh, d, {a: 0 for a in unreduced})
        if base in done:
            continue
        done.add(base)
        group = _group(mesh, base, unreduced)
        whole = out[group[0]]
        parts = [rng.standard_normal(whole.shape) for _ in group[1:]]
        out[group[0]] = whole - sum(parts) if parts else whole
        for g, p in zip(group[1:], parts):
            out[g] = p
    return out


def collect(blocks: dict, layout: Layout, mesh: Mesh, shape) -> np.ndarray:
    """Reassemble the full array: sum partial sums, check that replicas agree."""
    unreduced = mesh.order(layout.unreduced)
    full = np.full(shape, np.nan)
    for d, blk in blocks.items():
        if any(_coord(mesh, d, a) != 0 for a in unreduced):
            continue
        value = sum(blocks[g] for g in _group(mesh, d, unreduced)) if unreduced else blk
        sl = []
        for i, axes in enumerate(layout.axes):
            size = shape[i] // _count(mesh, axes)
            k = block_index(mesh, d, axes)
            sl.append(slice(k * size, (k + 1) * size))
        target = full[tuple(sl)]
        if value.shape != target.shape:
            raise SimulationError(f"{layout.name}: device {d} holds a block of shape {value.shape}, "
                                  f"its layout {layout} wants {target.shape}")
        if not np.all(np.isnan(target)) and not np.allclose(target, value, rtol=1e-9, atol=1e-9):
            raise SimulationError(f"{layout.name}: replicas disagree on device {d} for layout {layout}")
        full[tuple(sl)] = value
    if np.isnan(full).any():
        raise SimulationError(f"{layout.name}: some blocks of {layout} are held by no device")
    return full


# ------------------------------------------------------------------------------------- collectives


def all_gather(blocks: dict, m: Move, mesh: Mesh) -> dict:
    """Each device concatenates the blocks of its group (the devices differing only in ``m.axes``),
    along each dimension in the order of that dimension's gathered axes (as a real all_gather does).
    Whether that is the layout the move claims is for the caller to check."""
    gathered = [tuple(a for a in ax if a in m.axes) for ax in m.before.axes]
    out = {}
    for d in blocks:
        local = blocks[d]
        shape = [s * _count(mesh, g) for s, g in zip(local.shape, gathered)]
        new = np.empty(shape)
        for p in _group(mesh, d, m.axes):
            sl = []
            for i, g in enumerate(gathered):
                k = block_index(mesh, p, g)
                size = local.shape[i]
                sl.append(slice(k * size, (k + 1) * size))
            new[tuple(sl)] = blocks[p]
        out[d] = new
    return out


def slice_(blocks: dict, m: Move, mesh: Mesh) -> dict:
    """No communication: each device keeps the part of its block its own coordinate selects."""
    added = [aft[len(ax):] for ax, aft in zip(m.before.axes, m.after.axes)]
    out = {}
    for d, blk in blocks.items():
        sl = []
        for i, new in enumerate(added):
            n = _count(mesh, new)
            size = blk.shape[i] // n
            k = block_index(mesh, d, new)
            sl.append(slice(k * size, (k + 1) * size))
        out[d] = blk[tuple(sl)].copy()
    return out


def all_reduce(blocks: dict, m: Move, mesh: Mesh) -> dict:
    return {d: sum(blocks[p] for p in _group(mesh, d, m.axes)) for d in blocks}


def reduce_scatter(blocks: dict, m: Move, mesh: Mesh) -> dict:
    """Sum over the group, keep the part the device's coordinates select on the scattered dimension."""
    j = next(i for i, (ax, aft) in enumerate(zip(m.before.axes, m.after.axes)) if ax != aft)
    order = m.after.axes[j][len(m.before.axes[j]):]
    out = {}
    for d in blocks:
        total = sum(blocks[p] for p in _group(mesh, d, m.axes))
        n = _count(mesh, order)
        size = total.shape[j] // n
        k = block_index(mesh, d, order)
        sl = [slice(None)] * total.ndim
        sl[j] = slice(k * size, (k + 1) * size)
        out[d] = total[tuple(sl)].copy()
    return out


def all_to_all(blocks: dict, m: Move, mesh: Mesh) -> dict:
    """Axis a moves from the end of dim i to the end of dim j: split along j, exchange, concat along i."""
    (a,) = m.axes
    i = next(k for k, (ax, aft) in enumerate(zip(m.before.axes, m.after.axes)) if len(aft) < len(ax))
    j = next(k for k, (ax, aft) in enumerate(zip(m.before.axes, m.after.axes)) if len(aft) > len(ax))
    n = _size(mesh, a)
    out = {}
    for d in blocks:
        pieces = []
        for p in _group(mesh, d, (a,)):
            blk = blocks[p]
            size = blk.shape[j] // n
            sl = [slice(None)] * blk.ndim
            k = _coord(mesh, d, a)
            sl[j] = slice(k * size, (k + 1) * size)
            pieces.append(blk[tuple(sl)])
        out[d] = np.concatenate(pieces, axis=i)
    return out


def permute(blocks: dict, m: Move, mesh: Mesh) -> dict:
    """A collective-permute: each device receives the block its new position needs. With the same
    layout before and after, every block moves one hop along the axis (a pipeline send)."""
    if m.before == m.after:
        (a, *_) = m.axes
        n = _size(mesh, a)
        return {d: blocks[_with(mesh, d, {a: (_coord(mesh, d, a) - 1) % n})].copy() for d in blocks}
    i = next(k for k, (ax, aft) in enumerate(zip(m.before.axes, m.after.axes)) if ax != aft)
    old, new = m.before.axes[i], m.after.axes[i]
    out = {}
    for d in blocks:
        want = block_index(mesh, d, new)
        src = next(p for p in _group(mesh, d, old) if block_index(mesh, p, old) == want)
        out[d] = blocks[src].copy()
    return out


MOVES = {"AllGather": all_gather, "Slice": slice_, "AllReduce": all_reduce, "ReduceScatter": reduce_scatter,
         "AllToAll": all_to_all, "Permute": permute}


def local_einsum(blocks_by_tensor: dict, e: LocalEinsum, mesh: Mesh) -> dict:
    sub = e.subscripts()
    return {d: np.einsum(sub, *(blocks_by_tensor[t.name][d] for t in e.inputs))
            for d in blocks_by_tensor[e.inputs[0].name]}


# ---------------------------------------------------------------------------------------- plans


def _shape(layout: Layout, sizes: dict) -> tuple:
    out = []
    for d in layout.dims:
        if d.isdigit():
            out.append(int(d))
        elif d in sizes:
            out.append(int(sizes[d]))
        else:
            raise SimulationError(f"dimension {d} of {layout.name} needs a size to be simulated")
    return tuple(out)


def _send_reference(full: np.ndarray, layout: Layout, axes, mesh: Mesh) -> np.ndarray:
    """What a one-hop send does to the global array: blocks along the sending axis shift by one."""
    (a, *_) = axes
    for i, ax in enumerate(layout.axes):
        if a in ax:
            if ax != (a,):
                raise SimulationError("a send over an axis that shares its dimension is not simulated")
            size = full.shape[i] // _size(mesh, a)
            return np.roll(full, size, axis=i)
    return full  # replicated over the axis: every copy is the same


def check_plan(plan, sizes: dict, rng=None, inputs: dict | None = None, rtol: float = 1e-7) -> dict:
    """Run ``plan`` on simulated devices from random (or given) inputs and compare every tensor, after
    every step, with the unsharded computation. Returns the final full arrays by tensor name."""
    rng = rng or np.random.default_rng(0)
    mesh = plan.mesh
    inputs = dict(inputs or {})
    blocks: dict[str, dict] = {}
    layout: dict[str, Layout] = {}
    full: dict[str, np.ndarray] = {}

    def ensure(t: Layout):
        if t.name in blocks:
            if layout[t.name] != t:
                raise SimulationError(f"{t.name} is {layout[t.name]} on the devices but the plan uses {t}")
            return
        arr = inputs.get(t.name)
        if arr is None:
            arr = rng.standard_normal(_shape(t, sizes))
        full[t.name] = np.asarray(arr, dtype=np.float64)
        blocks[t.name] = distribute(full[t.name], t, mesh, rng)
        layout[t.name] = t

    for n, step in enumerate(plan.steps, 1):
        op = step.op
        if isinstance(op, LocalEinsum):
            for t in op.inputs:
                ensure(t)
            out = op.output
            blocks[out.name] = local_einsum(blocks, op, mesh)
            full[out.name] = np.einsum(op.subscripts(), *(full[t.name] for t in op.inputs))
            layout[out.name] = out
            name = out.name
        elif isinstance(op, Move):
            ensure(op.before)
            if op.before.name not in blocks:
                raise SimulationError(f"step {n} moves {op.before.name}, which no device holds")
            blocks[op.before.name] = MOVES[op.kind](blocks[op.before.name], op, mesh)
            if op.kind == "Permute" and op.before == op.after:
                full[op.before.name] = _send_reference(full[op.before.name], op.before, op.axes, mesh)
            layout[op.before.name] = op.after
            name = op.before.name
        else:
            continue
        got = collect(blocks[name], layout[name], mesh, full[name].shape)
        if not np.allclose(got, full[name], rtol=rtol, atol=rtol * max(1.0, float(np.abs(full[name]).max()))):
            raise SimulationError(f"step {n} ({step.signature()}) leaves {name} wrong on the devices")
    for lay in plan.layouts:  # tensors no step touches (a reshard that is already in place)
        if lay.name not in blocks:
            ensure(lay)
    return {k: collect(blocks[k], layout[k], mesh, full[k].shape) for k in blocks}


def reference(text: str, values: dict) -> np.ndarray:
    """The unsharded result of a one-statement einsum (or chain), straight from the notation."""
    from .notation import parse
    from .rewrite import product_dims
    (st,) = parse(text).statements
    ops = st.operands
    cur_dims = tuple(d.name for d in ops[0].dims)
    cur = values[ops[0].name]
    for k, t in enumerate(ops[1:], 1):
        last = k == len(ops) - 1
        later = set()
        for u in ops[k + 1:]:
            later |= {d.name for d in u.dims}
        t_dims = tuple(d.name for d in t.dims)
        out_dims = tuple(d.name for d in st.output.dims) if (last and st.output is not None) else None
        if out_dims is None and st.output is not None:
            later |= {d.name for d in st.output.dims}
        dims = product_dims(cur_dims, t_dims, st.contract[k - 1], later, out_dims)
        letters = {d: chr(97 + i) for i, d in enumerate(dict.fromkeys(cur_dims + t_dims + dims))}
        sub = ("".join(letters[d] for d in cur_dims) + "," + "".join(letters[d] for d in t_dims) + "->"
               + "".join(letters[d] for d in dims))
        cur = np.einsum(sub, cur, values[t.name])
        cur_dims = dims
    if len(ops) == 1 and st.output is not None:
        out_dims = tuple(d.name for d in st.output.dims)
        letters = {d: chr(97 + i) for i, d in enumerate(cur_dims)}
        cur = np.einsum("".join(letters[d] for d in cur_dims) + "->" + "".join(letters[d] for d in out_dims), cur)
    return cur
