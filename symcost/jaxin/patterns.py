"""Operations JAX spells as several primitives that the notation has one rule for. ``jax.nn.softmax`` is
``reduce_max``, ``stop_gradient``, ``sub``, ``exp``, ``reduce_sum`` and ``div`` (with casts and broadcasts
between): read as those, it would be six passes over the scores; XLA fuses them, and the notation's
``Softmax_S`` rule prices the operation as one (and saves its output for the backward pass, as softmax
does).
"""
from __future__ import annotations

PASS = frozenset({"broadcast_in_dim", "convert_element_type", "reshape", "stop_gradient", "max"})


def _is_literal(x) -> bool:
    return type(x).__name__ == "Literal"


def softmaxes(jaxpr) -> tuple[set, dict]:
    """(ids of the equations a softmax absorbs, {id of its final ``div``: (its input var, its axis)})."""
    made, uses = {}, {}
    for e in jaxpr.eqns:
        for v in e.outvars:
            made[v] = e
        for v in e.invars:
            if not _is_literal(v):
                uses[v] = uses.get(v, 0) + 1
    for v in jaxpr.outvars:
        if not _is_literal(v):
            uses[v] = uses.get(v, 0) + 1

    def back(var, chain, allowed):
        """Follow ``var`` up through one-operand casts and broadcasts; the first other equation (or None)."""
        while var in made and made[var].primitive.name in allowed:
            e = made[var]
            live = [x for x in e.invars if not _is_literal(x)]
            if len(live) != 1 or uses.get(var, 0) != 1:
                return None
            chain.append(e)
            var = live[0]
        return made.get(var), var

    absorbed, fused = set(), {}
    for d in jaxpr.eqns:
        if d.primitive.name != "div" or any(_is_literal(x) for x in d.invars):
            continue
        num, den = d.invars
        ex = made.get(num)
        if ex is None or ex.primitive.name != "exp" or uses.get(num) != 2:
            continue
        sub = made.get(ex.invars[0])
        if sub is None or sub.primitive.name != "sub" or uses.get(ex.invars[0]) != 1:
            continue
        x, shift = sub.invars
        chain = []
        found = back(shift, chain, PASS)
        if not found or found[0] is None or found[0].primitive.name != "reduce_max" or found[0].invars[0] is not x:
            continue
        rmax, axes = found[0], tuple(found[0].params["axes"])
        found = back(den, chain, PASS - {"max", "stop_gradient"})
        if not found or found[0] is None or found[0].primitive.name != "reduce_sum":
            continue
        rsum = found[0]
        if tuple(rsum.params["axes"]) != axes or len(axes) != 1 or uses.get(rsum.outvars[0]) != 1:
            continue
        found = back(rsum.invars[0], chain, {"convert_element_type"})
        if not found or found[1] is not num or uses.get(rmax.outvars[0]) != 1:
            continue
        absorbed.update(id(e) for e in chain + [rmax, rsum, sub, ex])
        fused[id(d)] = (x, axes[0])
    return absorbed, fused
