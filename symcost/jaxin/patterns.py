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
    graph = _Graph(jaxpr)
    absorbed, fused = set(), {}
    for d in jaxpr.eqns:
        found = graph.softmax_ending_at(d)
        if found is not None:
            eqns, x, axis = found
            absorbed.update(id(e) for e in eqns)
            fused[id(d)] = (x, axis)
    return absorbed, fused


class _Graph:
    """A jaxpr's equations by the variable each makes, and how many times each variable is read."""

    def __init__(self, jaxpr):
        self.made, self.uses = {}, {}
        for e in jaxpr.eqns:
            for v in e.outvars:
                self.made[v] = e
            self._read(e.invars)
        self._read(jaxpr.outvars)

    def _read(self, vars) -> None:
        for v in vars:
            if not _is_literal(v):
                self.uses[v] = self.uses.get(v, 0) + 1

    def back(self, var, chain, allowed):
        """Follow ``var`` up through one-operand casts and broadcasts; the first other equation (or None)."""
        made, uses = self.made, self.uses
        while var in made and made[var].primitive.name in allowed:
            e = made[var]
            live = [x for x in e.invars if not _is_literal(x)]
            if len(live) != 1 or uses.get(var, 0) != 1:
                return None
            chain.append(e)
            var = live[0]
        return made.get(var), var

    def _made_by(self, var, primitive: str, uses: int):
        """The equation making ``var`` if it is a ``primitive`` and ``var`` is read ``uses`` times, else None."""
        e = self.made.get(var)
        return e if e is not None and e.primitive.name == primitive and self.uses.get(var) == uses else None

    def softmax_ending_at(self, d):
        """``exp(x - max(x)) / sum(exp(x - max(x)))`` ending at the ``div`` ``d`` (casts and broadcasts
        between allowed): (the equations it absorbs, x, the axis), or None."""
        if d.primitive.name != "div" or any(_is_literal(x) for x in d.invars):
            return None
        num, den = d.invars
        ex = self._made_by(num, "exp", 2)
        sub = None if ex is None else self._made_by(ex.invars[0], "sub", 1)
        if sub is None:
            return None
        x, shift = sub.invars
        chain: list = []
        found = self.back(shift, chain, PASS)
        if not found or found[0] is None or found[0].primitive.name != "reduce_max" or found[0].invars[0] is not x:
            return None
        rmax, axes = found[0], tuple(found[0].params["axes"])
        found = self.back(den, chain, PASS - {"max", "stop_gradient"})
        if not found or found[0] is None or found[0].primitive.name != "reduce_sum":
            return None
        rsum = found[0]
        if tuple(rsum.params["axes"]) != axes or len(axes) != 1 or self.uses.get(rsum.outvars[0]) != 1:
            return None
        found = self.back(rsum.invars[0], chain, {"convert_element_type"})
        if not found or found[1] is not num or self.uses.get(rmax.outvars[0]) != 1:
            return None
        return chain + [rmax, rsum, sub, ex], x, axes[0]
