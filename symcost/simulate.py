"""A numpy simulator: run a plan on P simulated devices, each holding only its own blocks.

The ground truth for what a move does to data: every move works on the local blocks the way a real
collective would (each kind's numpy semantics live with its rule in :mod:`symcost.collectives`), and the
result must reproduce the unsharded computation::

    >>> import numpy as np, symcost
    >>> plan = symcost.derive("A[I, J_X] * B[J, K] -> C[I, K]", mesh="X=4", dims="I=4,J=8,K=4")
    >>> out = check_plan(plan, {"I": 4, "J": 8, "K": 4}, np.random.default_rng(0))
    >>> sorted(out)
    ['A', 'B', 'C']

Block order is X-major: ``A[I_{XY}]`` puts block ``x * |Y| + y`` on the device with coordinates (x, y).
Partial sums (``{U_X}``) are distributed as random summands over X, so a plan that forgets a reduction
or reduces twice is caught. A dimension that does not divide by its axes is padded with zeros at its end
(to a multiple of the mesh's device count, so that every layout of it divides and every move stays exact)
and cropped again when the blocks are collected. :func:`reference` computes what a statement means
straight from the notation, independently of the planner.
"""
from __future__ import annotations

import numpy as np

from .collectives import Grid
from .errors import SimulationError
from .layout import Layout
from .mesh import Mesh

__all__ = ["SimulationError", "check_plan", "collect", "distribute", "full_shape", "pad", "padded_shape", "reference",
           "Grid"]


def padded_shape(shape, layout: Layout, mesh: Mesh) -> tuple:
    """``shape`` with every dimension a mesh axis may split rounded up to a multiple of the device count."""
    n = Grid(mesh).count(mesh.names)
    return tuple(s if d.isdigit() else -(-s // n) * n for s, d in zip(shape, layout.dims))


def pad(array: np.ndarray, layout: Layout, mesh: Mesh) -> np.ndarray:
    target = padded_shape(array.shape, layout, mesh)
    if target == array.shape:
        return array
    return np.pad(array, [(0, t - s) for s, t in zip(array.shape, target)])


def distribute(array: np.ndarray, layout: Layout, mesh: Mesh, rng=None) -> dict:
    """The blocks every device holds (of the zero-padded array); unreduced axes get random summands."""
    rng = rng or np.random.default_rng(0)
    grid = Grid(mesh)
    unreduced = mesh.order(layout.unreduced)
    array = pad(array, layout, mesh)
    out = {d: array[grid.block_slices(d, layout, array.shape)].copy() for d in grid.devices()}
    done = set()
    for d in grid.devices() if unreduced else ():
        base = grid.moved(d, {a: 0 for a in unreduced})
        if base in done:
            continue
        done.add(base)
        group = grid.group(base, unreduced)
        whole = out[group[0]]
        parts = [rng.standard_normal(whole.shape) for _ in group[1:]]
        out[group[0]] = whole - sum(parts) if parts else whole
        for g, p in zip(group[1:], parts):
            out[g] = p
    return out


def collect(blocks: dict, layout: Layout, mesh: Mesh, shape) -> np.ndarray:
    """Reassemble the full array of ``shape``: sum partial sums, check that replicas agree, crop the padding."""
    grid = Grid(mesh)
    unreduced = mesh.order(layout.unreduced)
    true_shape, shape = tuple(shape), padded_shape(shape, layout, mesh)
    full = np.full(shape, np.nan)
    for d, blk in blocks.items():
        if any(grid.coord(d, a) != 0 for a in unreduced):
            continue
        value = sum(blocks[g] for g in grid.group(d, unreduced)) if unreduced else blk
        sl = grid.block_slices(d, layout, shape)
        target = full[sl]
        if value.shape != target.shape:
            raise SimulationError(f"{layout.name}: device {d} holds a block of shape {value.shape}, "
                                  f"its layout {layout} wants {target.shape}")
        if not np.isnan(target).all() and not _agree(target, value):
            raise SimulationError(f"{layout.name}: replicas disagree on device {d} for layout {layout}")
        full[sl] = value
    if np.isnan(full).any():
        raise SimulationError(f"{layout.name}: some blocks of {layout} are held by no device")
    return full[tuple(slice(0, s) for s in true_shape)]


def _agree(a: np.ndarray, b: np.ndarray) -> bool:
    """``np.allclose(a, b, rtol=1e-9, atol=1e-9)`` for two finite blocks of one shape (a NaN disagrees), without
    its checks and temporaries: the simulator compares every replica of every block it assembles, a property
    run hundreds of thousands of times (57 us a call for ``np.allclose`` on a small block, 10 us here)."""
    return bool((np.abs(a - b) <= 1e-9 + 1e-9 * np.abs(b)).all())


def full_shape(layout: Layout, sizes: dict) -> tuple:
    out = []
    for d in layout.dims:
        if d.isdigit():
            out.append(int(d))
        elif d in sizes:
            out.append(int(sizes[d]))
        else:
            raise SimulationError(f"dimension {d} of {layout.name} needs a size to be simulated")
    return tuple(out)


def check_plan(plan, sizes: dict, rng=None, inputs: dict | None = None, rtol: float = 1e-7) -> dict:
    """Run ``plan`` on simulated devices from random (or given) inputs; compare every tensor, after every
    step, with the unsharded computation, then every tensor the program computes with what its notation
    means (:mod:`symcost.reference`) and, for a plan with a backward pass, every gradient with the gradient
    of ``sum(Out * dOut)`` (``dOut`` random, one for each output). Returns the final full arrays by tensor
    name (a tensor held in several layouts: the one written last)."""
    from .simulation import Devices
    devices = Devices(plan, sizes, rng or np.random.default_rng(0), dict(inputs or {}), rtol)
    for n, step in enumerate(plan.steps, 1):
        devices.run(n, step)
    devices.finish()
    devices.check_against_notation()
    return devices.arrays()


def reference(text: str, values: dict) -> np.ndarray:
    """What a one-statement einsum (or chain) computes, read straight from the notation (the einsum
    semantics of the README's notation, written independently of the planner in :mod:`symcost.reference`)."""
    from .reference import statement_value
    return statement_value(text, values)
