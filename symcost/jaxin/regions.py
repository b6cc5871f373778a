"""The primitives that place or move data: sharding constraints, ``shard_map`` regions and the collectives
written inside them, and ``scan`` (read once per iteration)."""
from __future__ import annotations

from ..errors import UsageError
from .prims import HANDLERS
from .program import Stmt, Tensor
from .source import where


def spec_layout(spec, rank: int) -> tuple:
    """A PartitionSpec as the mesh axes of each axis."""
    out = []
    for entry in tuple(spec) + (None,) * (rank - len(tuple(spec))):
        if entry is None:
            out.append(())
        elif isinstance(entry, str):
            out.append((entry,))
        else:
            out.append(tuple(entry))
    return tuple(out)


def _tensor_layout(r, t: Tensor, v, layout) -> tuple:
    """``layout`` (per axis of the value ``v``) per axis of its tensor ``t``."""
    by_root = {r.d.find(n): axes for n, axes in zip(v.nodes, layout)}
    return tuple(by_root.get(r.d.find(n), ()) for n in t.nodes)


def relaid(r, v, layout):
    """``v`` laid out as ``layout``: its tensor's own layout if nothing has read it yet, else a View whose
    result is laid out so (the engine inserts the moves)."""
    if v.tensor is None or tuple(layout) == tuple(v.layout):
        return v
    t = v.tensor
    if not (t.read or t.input or t.same):
        t.layout = _tensor_layout(r, t, v, layout)
        return r.new_val(v.shape, v.nodes, layout, t, v.unreduced)
    new = Tensor("Re", t.dtype, t.nodes, _tensor_layout(r, t, v, layout))
    t.read = True
    r.emit(Stmt("apply", new, (t,), rule="View"))
    return r.new_val(v.shape, v.nodes, layout, new)


def sharding_constraint(r, eqn, ins):
    v = ins[0]
    if r.manual:
        return [v]
    return [relaid(r, v, spec_layout(eqn.params["sharding"].spec, len(v.shape)))]


def shard_map(r, eqn, ins):
    body = eqn.params["jaxpr"]
    manual = tuple(eqn.params.get("newly_manual_axes") or eqn.params["mesh"].axis_names)
    if r.manual:
        raise UsageError(f"shard_map at {where(eqn, r.callers)} is inside another shard_map")
    inner = []
    for v, spec, var in zip(ins, eqn.params["in_specs"], body.invars):
        lay = spec_layout(spec, len(v.shape))
        g = relaid(r, v, lay)
        inner.append(r.new_val(var.aval.shape, g.nodes, lay, g.tensor) if g.tensor is not None
                     else r.constant(var.aval.shape))
    r.manual = manual
    try:
        outs = r.run(body, dict(zip(body.invars, inner)))
    finally:
        r.manual = ()
    result = []
    for o, spec, var in zip(outs, eqn.params["out_specs"], eqn.outvars):
        lay = spec_layout(spec, len(var.aval.shape))
        if o.tensor is not None and o.unreduced:
            raise UsageError(f"shard_map at {where(eqn, r.callers)} returns partial sums over "
                             f"{', '.join(o.unreduced)}; "
                             "sum them inside (psum)")
        if o.tensor is not None and tuple(o.layout) != lay:
            raise UsageError(f"shard_map at {where(eqn, r.callers)} returns a block laid out {o.layout}, not as its "
                             f"out_specs say ({lay})")
        result.append(r.new_val(var.aval.shape, o.nodes, lay, o.tensor) if o.tensor is not None
                      else r.constant(var.aval.shape))
    return result


def _moved(r, eqn, v, kind: str, axes, layout, unreduced):
    if v.tensor is None:
        return [r.constant(eqn.outvars[0].aval.shape)]
    src = v.tensor.same or v.tensor
    t = Tensor(src.base, v.tensor.dtype, v.tensor.nodes, _tensor_layout(r, v.tensor, v, layout), tuple(unreduced),
               same=src)
    v.tensor.read = True
    r.emit(Stmt("collective", t, (v.tensor,), rule=kind, axes=tuple(axes)))
    return [r.new_val(eqn.outvars[0].aval.shape, v.nodes, layout, t, unreduced)]


def _axes(eqn, key) -> tuple:
    a = eqn.params[key]
    return (a,) if isinstance(a, str) else tuple(a)


def all_gather(r, eqn, ins):
    v, k, axes = ins[0], eqn.params["all_gather_dimension"], _axes(eqn, "axis_name")
    if not eqn.params.get("tiled", False):
        raise UsageError(f"all_gather at {where(eqn, r.callers)} stacks blocks on a new axis; write tiled=True")
    if not set(axes) <= set(v.layout[k]):
        raise UsageError(f"all_gather at {where(eqn, r.callers)} gathers over {axes}, which do not split that axis")
    layout = list(v.layout)
    layout[k] = tuple(a for a in v.layout[k] if a not in axes)
    return _moved(r, eqn, v, "AllGather", axes, layout, v.unreduced)


def psum(r, eqn, ins):
    v, axes = ins[0], _axes(eqn, "axes")
    if v.tensor is None:
        return [v]
    if not set(axes) <= set(v.unreduced):
        raise UsageError(f"{eqn.primitive.name} at {where(eqn, r.callers)} sums over {', '.join(axes)} "
                         "values that are not "
                         "partial sums over it; the notation's AllReduce sums partial sums")
    return _moved(r, eqn, v, "AllReduce", axes, v.layout, tuple(a for a in v.unreduced if a not in axes))


def psum_scatter(r, eqn, ins):
    v, axes, k = ins[0], _axes(eqn, "axis_name"), eqn.params["scatter_dimension"]
    if not eqn.params.get("tiled", False):
        raise UsageError(f"psum_scatter at {where(eqn, r.callers)} drops an axis; write tiled=True")
    if not set(axes) <= set(v.unreduced):
        raise UsageError(f"psum_scatter at {where(eqn, r.callers)} scatters values that are not partial sums over "
                         f"{', '.join(axes)}")
    layout = list(v.layout)
    layout[k] = tuple(v.layout[k]) + axes
    return _moved(r, eqn, v, "ReduceScatter", axes, layout, tuple(a for a in v.unreduced if a not in axes))


def scan(r, eqn, ins):
    p = eqn.params
    body, n, nc, ncar = p["jaxpr"], p["length"], p["num_consts"], p["num_carry"]
    consts, carry, xs = ins[:nc], ins[nc:nc + ncar], ins[nc + ncar:]
    order = range(n - 1, -1, -1) if p.get("reverse") else range(n)
    here = where(eqn, r.callers)
    for it in order:
        r.emit(Stmt("comment", text=f"iteration {it + 1} of {n} of the scan at {here}"))
        sliced = [_slice(r, eqn, x, it) for x in xs]
        outs = r.run(body.jaxpr, dict(zip(body.jaxpr.invars, list(consts) + list(carry) + sliced)), body.consts)
        carry = _carried(r, carry, outs[:ncar])
        outs = list(carry) + list(outs[ncar:])
    ys = []
    for var in eqn.outvars[ncar:]:
        y = r.constant(var.aval.shape)
        y.stacked = here
        ys.append(y)
    return list(carry) + ys


def trip_count(eqn) -> int | None:
    """The iterations of a ``while`` that counts a carried integer from a constant up to a constant by one
    (``i < n`` or ``i <= n``), or None."""
    p = eqn.params
    cond, body = p["cond_jaxpr"].jaxpr, p["body_jaxpr"].jaxpr
    if len(cond.eqns) != 1 or cond.eqns[0].primitive.name not in ("lt", "le"):
        return None
    test = cond.eqns[0]
    i, n = test.invars
    if type(n).__name__ != "Literal" or i not in cond.invars[p["cond_nconsts"]:]:
        return None
    k = cond.invars[p["cond_nconsts"]:].index(i)
    start = eqn.invars[p["cond_nconsts"] + p["body_nconsts"] + k]
    if type(start).__name__ != "Literal":
        return None
    counter = body.invars[p["body_nconsts"] + k]
    step = next((e for e in body.eqns if e.outvars[0] is body.outvars[k]), None)
    if step is None or step.primitive.name != "add" or counter not in step.invars:
        return None
    one = next(x for x in step.invars if x is not counter)
    if type(one).__name__ != "Literal" or int(one.val) != 1:
        return None
    return max(0, int(n.val) - int(start.val) + (1 if test.primitive.name == "le" else 0))


def while_loop(r, eqn, ins):
    n = trip_count(eqn)
    if n is None:
        raise UsageError(f"while at {where(eqn, r.callers)} has no symcost notation: its trip count is not a constant "
                         "(symcost reads a loop counting from a constant to a constant by one, and a scan)")
    p = eqn.params
    body = p["body_jaxpr"]
    consts = ins[p["cond_nconsts"]:p["cond_nconsts"] + p["body_nconsts"]]
    carry = ins[p["cond_nconsts"] + p["body_nconsts"]:]
    here = where(eqn, r.callers)
    for it in range(n):
        r.emit(Stmt("comment", text=f"iteration {it + 1} of {n} of the loop at {here}"))
        carry = _carried(r, carry, r.run(body.jaxpr, dict(zip(body.jaxpr.invars, list(consts) + list(carry))),
                                          body.consts))
    return list(carry)


def _carried(r, before, after) -> list:
    """A loop's carried values keep one layout from iteration to iteration (XLA compiles the loop once):
    each iteration's result is laid out as the value it replaces."""
    if r.manual:
        return list(after)
    return [relaid(r, a, b.layout) if a.tensor is not None and b.tensor is not None and len(a.shape) == len(b.shape)
            else a for b, a in zip(before, after)]


def _slice(r, eqn, x, it: int):
    if x.tensor is None:
        return r.constant(x.shape[1:])
    t = x.tensor
    if not t.input or r.d.find(t.nodes[0]) != r.d.find(x.nodes[0]):
        raise UsageError(f"scan at {where(eqn, r.callers)} runs over an array the function computes; "
                         "the notation writes "
                         "each iteration's slice as an input, so scan over arguments")
    s = Tensor(t.base, t.dtype, t.nodes[1:], t.layout[1:], input=True, param=t.param, name=f"{t.name}L{it}")
    r.read.inputs.append(s)
    return r.new_val(x.shape[1:], x.nodes[1:], x.layout[1:], s)


HANDLERS.update({"sharding_constraint": sharding_constraint, "shard_map": shard_map, "all_gather": all_gather,
                 "psum": psum, "psum_invariant": psum, "psum2": psum, "psum_scatter": psum_scatter,
                 "reduce_scatter": psum_scatter, "scan": scan, "while": while_loop})
