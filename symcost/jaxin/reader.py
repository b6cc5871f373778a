"""Reading a jaxpr into a :class:`~symcost.jaxin.program.Read`: a handler per primitive (in
:mod:`~symcost.jaxin.prims` and :mod:`~symcost.jaxin.regions`), the dimension union-find
(:class:`~symcost.jaxin.dims.Dims`) settling which axes are one dimension, and a forward propagation of
layouts (each result split as the operand axis it comes from is, the way XLA's
sharding propagation goes forward) so that every statement is written with its layout. Higher-order
primitives are read through: ``pjit`` and custom derivatives inline, ``checkpoint`` inline with its policy
kept, ``shard_map`` as a region whose collectives are written as they are, ``scan`` (and a ``while`` with a
known trip count) once per iteration. A primitive the notation cannot hold is an error naming it and its
line in the user's source.
"""
from __future__ import annotations

from ..errors import UsageError
from . import prims, regions  # noqa: F401 -- regions adds its handlers to prims.HANDLERS
from .dims import Dims
from .patterns import softmaxes
from .program import Read, Stmt, Tensor, Val
from .source import where
from .specs import notation_dtype


def _dedupe(layout) -> tuple:
    used, out = set(), []
    for axes in layout:
        keep = tuple(a for a in axes if a not in used)
        used.update(keep)
        out.append(keep)
    return tuple(out)


class Reader:
    def __init__(self, mesh_sizes: dict[str, int], dims: Dims, fused: bool = False):
        self.fused = fused                 # elementwise work and reductions fused into the matmuls
        self.mesh = dict(mesh_sizes)
        self.d = dims
        self.read = Read()
        self.vals: list[Val] = []          # every value with a tensor, for the collision check
        self.manual: tuple[str, ...] = ()  # the mesh axes a shard_map region runs by hand
        self.callers: list[str] = []       # the user's lines of the calls being read through
        self._minted: dict = {}            # (equation, role) -> the new dimension it made

    def minted(self, eqn, role, size: int) -> int:
        """The new dimension an equation makes (the keys' sequence): one for every time the equation is read,
        so that each iteration of a loop names its keys alike."""
        key = (id(eqn), role, size)
        if key not in self._minted:
            self._minted[key] = (eqn, self.d.new(size))   # the equation is kept so that its id stays its own
        return self._minted[key][1]

    # ------------------------------------------------------------------------------------------ helpers
    def emit(self, stmt: Stmt) -> None:
        self.read.statements.append(stmt)

    def new_val(self, shape, nodes, layout, tensor, unreduced=()) -> Val:
        v = Val(tuple(shape), tuple(nodes), tuple(layout), tensor, tuple(unreduced))
        if tensor is not None:
            self.vals.append(v)
        return v

    def global_size(self, local: int, axes) -> int:
        n = local
        for a in axes:
            if a in self.manual:
                n *= self.mesh[a]
        return n

    def fresh(self, local: int, axes=()) -> int:
        return self.d.new(self.global_size(local, axes))

    def made(self, base: str, dtype, nodes, layout, unreduced=()) -> Tensor:
        return Tensor(base, notation_dtype(dtype), tuple(nodes), _dedupe(layout) if not self.manual else tuple(layout),
                      tuple(unreduced))

    def result(self, eqn, base: str, nodes, layout, unreduced=()) -> Val:
        aval = eqn.outvars[0].aval
        t = self.made(base, aval.dtype, nodes, layout, unreduced)
        return self.new_val(aval.shape, nodes, t.layout, t, unreduced)

    def collides(self, a: int, b: int) -> bool:
        """Would making ``a`` and ``b`` one dimension put it twice in one tensor?"""
        ra, rb = self.d.find(a), self.d.find(b)
        if ra == rb:
            return False
        for v in self.vals:
            roots = {self.d.find(n) for n in v.nodes}
            if ra in roots and rb in roots:
                return True
        return False

    def renamed(self, v: Val, axis: int, node: int) -> Val:
        """``v`` with axis ``axis`` read as dimension ``node``: a View (costs nothing; the notation's way to
        let keys of one sequence meet queries of the same sequence as a second dimension)."""
        nodes = v.nodes[:axis] + (node,) + v.nodes[axis + 1:]
        t = Tensor("R", v.tensor.dtype, self._own(v, nodes), v.tensor.layout, v.tensor.unreduced)
        self.emit(Stmt("apply", t, (v.tensor,), rule="View"))
        # the View keeps the tensor's own axis order; map the renamed axis through it
        return self.new_val(v.shape, nodes, v.layout, t, v.unreduced)

    def _own(self, v: Val, nodes) -> tuple:
        """The renamed tensor's nodes in its source tensor's axis order."""
        swap = {self.d.find(o): n for o, n in zip(v.nodes, nodes) if self.d.find(o) != self.d.find(n)}
        return tuple(swap.get(self.d.find(n), n) for n in v.tensor.nodes)

    # ------------------------------------------------------------------------------------------ walking
    def run(self, jaxpr, env: dict, consts=()) -> list:
        for var, c in zip(jaxpr.constvars, consts):
            env[var] = self.constant(getattr(c, "shape", ()))
        absorbed, fused = softmaxes(jaxpr)
        for eqn in jaxpr.eqns:
            if id(eqn) in absorbed:
                continue
            if id(eqn) in fused:
                x, axis = fused[id(eqn)]
                v = self.get(env, x, eqn)
                outs = prims.elementwise(self, eqn, [v], rule="Softmax", reduce=v.nodes[axis])
            else:
                outs = self.equation(eqn, [self.get(env, x, eqn) for x in eqn.invars])
            for var, val in zip(eqn.outvars, outs):
                env[var] = val
        return [self.get(env, x, None) for x in jaxpr.outvars]

    def get(self, env, x, eqn) -> Val:
        if type(x).__name__ == "Literal":
            return self.constant(getattr(getattr(x, "aval", None), "shape", ()))
        try:
            v = env[x]
        except (KeyError, TypeError):
            return self.constant(getattr(getattr(x, "aval", None), "shape", ()))
        if v.stacked and eqn is not None:
            raise UsageError(f"{eqn.primitive.name} at {where(eqn, self.callers)} "
                             "reads the stacked outputs of the scan at "
                             f"{v.stacked}, which the notation cannot hold (it writes each iteration's statements)")
        return v

    def constant(self, shape) -> Val:
        return Val(tuple(shape), tuple(self.d.new(1) for _ in shape), tuple(() for _ in shape), None)

    def equation(self, eqn, ins: list[Val]) -> list[Val]:
        name = eqn.primitive.name
        handler = prims.HANDLERS.get(name)
        if handler is None:
            raise UsageError(f"{name} at {where(eqn, self.callers)} has no symcost notation; "
                             "symcost reads dot_general, "
                             f"elementwise arithmetic, reductions, reshapes, transposes, sharding constraints, "
                             f"shard_map, checkpoint, scan and jit")
        try:
            return handler(self, eqn, ins)
        except UsageError as e:
            if " at " in e.message:      # says where already
                raise
            raise UsageError(f"{name} at {where(eqn, self.callers)}: {e.message}") from None
