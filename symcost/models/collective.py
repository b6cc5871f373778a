"""A collective of a training run, outside the layer's plan: the data-parallel gradient reduction, a
pipeline stage's send, an MoE layer's AllToAll. Each is a :class:`~symcost.collectives.Move` of the
collectives registry on a mesh placed on the hardware (:func:`symcost.topology.place`: inner axes fill the
fast domain first), priced by :func:`symcost.pricing.op_cost` with the preset's achieved efficiency and
its per-kernel floor (:func:`symcost.pricing.alone`) -- the same rules, link models and floor as every
collective of a plan.

    >>> from symcost.hardware import hardware
    >>> round(collective_seconds(hardware("h100"), "AllReduce", 1e9, 8, "A=8", "A") * 1e3, 3)
    4.773
"""
from __future__ import annotations

from .. import caching
from ..collectives import Move
from ..env import Env
from ..layout import Layout
from ..pricing import alone, op_cost


def collective_seconds(hw, kind: str, nbytes: float, group: int, axis_mesh: str, axis: str) -> float:
    """Seconds of a collective of ``nbytes`` (the whole tensor) over ``axis`` of ``axis_mesh`` placed on
    ``hw``, priced by the collectives registry and the axis's link model with the preset's efficiency."""
    if group == 1:
        return 0.0
    return _collective(hw, kind, float(nbytes), axis, placed(hw, axis_mesh))


@caching.memoize(maxsize=1024)
def placed(hw, axis_mesh: str):
    """``axis_mesh`` (written as ``A=8,I=4``) placed on ``hw``: each axis's link kind, count and wraparound
    settled. A run search prices tens of thousands of runs over a few dozen such meshes, so each is placed
    once."""
    from ..mesh import parse_mesh
    from ..topology import place
    return place(parse_mesh(axis_mesh), hw).mesh


@caching.memoize(maxsize=4096)
def _collective(hw, kind, nbytes, axis, mesh) -> float:
    n = next(a.size for a in mesh.axes if a.name == axis)
    elems = nbytes / 2
    sizes = {"N": int(round(elems / n)) * n}
    whole = Layout.of("G", "N", [()])
    split = Layout.of("G", "N", [(axis,)])
    if kind == "AllReduce":
        move = Move(kind, (axis,), whole.with_unreduced({axis}), whole)
    elif kind == "ReduceScatter":
        move = Move(kind, (axis,), whole.with_unreduced({axis}), split)
    elif kind == "AllGather":
        move = Move(kind, (axis,), split, whole)
    elif kind == "Send":        # each device's block of ``nbytes`` one hop along the axis
        sizes = {"N": int(round(elems))}
        move = Move(kind, (axis,), whole, whole, 1)
    elif kind == "AllToAll":    # ``nbytes`` a device, split over the axis by one dimension, resplit by another
        sizes = {"N": int(round(elems / n)) * n, "M": n}
        move = Move(kind, (axis,), Layout.of("G", "NM", [(axis,), ()]), Layout.of("G", "NM", [(), (axis,)]))
    else:
        raise ValueError(kind)
    env = Env.numeric(mesh, sizes, hw.bindings("bf16"), hw.efficiency)
    return alone(op_cost(move, env), env).seconds      # a kernel: with the preset's per-kernel floor



__all__ = ["collective_seconds", "placed"]
