"""What each JAX primitive becomes (see :mod:`symcost.jaxin.reader`). Arithmetic is priced by the kind of
work it is, not by its formula: a sum or difference is the ``Add`` rule (linear: partial sums pass), any
other binary operation the ``Mul`` rule, a function of one operand (``exp``, ``tanh``, ``rsqrt``, a scaling
by a constant) the ``Pointwise`` rule; an operation whose operands differ in dimensions (a broadcast) is the
broadcast product ``A[B, T, D] * R[B, T]``, which reads and writes the same blocks; a reduction is an einsum
with a vector of ones (``S[B, T] = X[B, T, D] *_D OnesD[D]``: the same reads and, over a split dimension,
the same AllReduce). Casts, transposes, reshapes and broadcasts move no data of their own: XLA fuses them
into their consumer, and the program reads the tensor they came from.
"""
from __future__ import annotations

from .. import dtypes
from ..errors import UsageError
from .program import Stmt, Tensor
from .source import where
from .specs import notation_dtype

UNARY = frozenset({"exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "rsqrt", "sqrt", "cbrt", "neg", "abs",
                   "sign", "integer_pow", "square", "erf", "erfc", "erf_inv", "sin", "cos", "tan", "floor", "ceil",
                   "round", "is_finite", "not", "imag", "real", "conj"})
LINEAR = frozenset({"add", "sub", "add_any"})
BINARY = frozenset({"mul", "div", "max", "min", "pow", "atan2", "rem", "nextafter", "eq", "ne", "lt", "le", "gt", "ge",
                    "and", "or", "xor", "select_n"})
ALIAS = frozenset({"convert_element_type", "stop_gradient", "pvary", "copy", "copy_p", "reduce_precision"})
REDUCE = frozenset({"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or"})
NAMED = {"silu": "SiLU", "gelu": "GeLU", "relu": "ReLU"}   # jax.nn's jitted activations, as the engine's rules


def _leaves(r, nodes) -> set:
    return {x for n in nodes for x in r.d.leaves(n)}


def _owns(r, t: Tensor, node: int) -> bool:
    lv = r.d.leaves(node)
    return bool(lv) and set(lv) <= _leaves(r, t.nodes)


def _uses(*tensors):
    for t in tensors:
        t.read = True


def elementwise(r, eqn, ins, rule: str | None = None, reduce: int | None = None):
    aval = eqn.outvars[0].aval
    live = [v for v in ins if v.tensor is not None and v.shape]
    if not live:
        return [r.constant(aval.shape)]
    if r.fused:
        return [_largest(r, eqn, live)]
    if any(v.unreduced for v in live) and not (eqn.primitive.name in LINEAR and len(live) == 2):
        raise UsageError(f"{eqn.primitive.name} at {where(eqn, r.callers)} reads partial sums; sum them first (psum)")
    nodes, layout = [], []
    for i in range(len(aval.shape)):
        owners = [v for v in live if _owns(r, v.tensor, v.nodes[i])]
        if not owners:
            nodes.append(r.fresh(aval.shape[i], live[0].layout[i]))
            layout.append(())
            continue
        first = owners[0]
        for k, v in enumerate(owners[1:], 1):
            if r.collides(first.nodes[i], v.nodes[i]):
                # a square weight's two dimensions meet (h + f(h @ w)): read this operand's axis as the
                # first's dimension through a View, as the positional operation does
                w = r.renamed(v, i, first.nodes[i])
                live = [w if u is v else u for u in live]
                owners[k] = w
            else:
                r.d.union(first.nodes[i], v.nodes[i])
        nodes.append(first.nodes[i])
        layout.append(next((v.layout[i] for v in owners if v.layout[i]), ()))
    name = eqn.primitive.name
    base = rule or name.capitalize().replace("_", "")
    if rule is None:
        rule = "Pointwise" if len(live) == 1 else ("Add" if name in LINEAR else "Mul")
    unreduced = live[0].unreduced if name in LINEAR else ()
    out = r.result(eqn, base, nodes, layout, unreduced)
    # the notation's elementwise rules keep their operand's axis order
    src = [r.d.leaves(n) for n in live[0].tensor.nodes]
    rank = {x: k for k, lv in enumerate(src) for x in lv}
    order = sorted(range(len(nodes)), key=lambda i: min((rank.get(x, 99) for x in r.d.leaves(nodes[i])), default=99))
    out.tensor.nodes = tuple(nodes[i] for i in order)
    out.tensor.layout = tuple(out.tensor.layout[i] for i in order)
    _uses(*(v.tensor for v in live))
    r.emit(Stmt("apply" if len(live) == 1 else "binary", out.tensor, tuple(v.tensor for v in live[-2:]), rule=rule,
                reduce=reduce))
    return [out]


def _largest(r, eqn, live):
    """Elementwise work fused into the matmuls: the result reads as its largest operand."""
    v = max(live, key=_elements)
    shape = eqn.outvars[0].aval.shape
    if len(v.shape) == len(shape):
        return r.new_val(shape, v.nodes, v.layout, v.tensor, v.unreduced)
    return r.new_val(shape, [r.d.new(s) for s in shape], [() for _ in shape], v.tensor)


def alias(r, eqn, ins):
    v = ins[0]
    t = v.tensor
    if eqn.primitive.name == "convert_element_type" and t is not None and not (t.read or t.input or t.same):
        new = notation_dtype(eqn.outvars[0].aval.dtype)
        if dtypes.nbytes(new) < dtypes.nbytes(t.dtype):
            t.dtype = new           # a narrowing cast: the producer writes the narrow type (XLA fuses it)
    return [r.new_val(v.shape, v.nodes, v.layout, v.tensor, v.unreduced) if v.tensor is not None else v]


def transpose(r, eqn, ins):
    v, perm = ins[0], eqn.params["permutation"]
    if v.tensor is None:
        return [r.constant(eqn.outvars[0].aval.shape)]
    return [r.new_val(eqn.outvars[0].aval.shape, [v.nodes[p] for p in perm], [v.layout[p] for p in perm], v.tensor,
                      v.unreduced)]


def squeeze(r, eqn, ins):
    v, drop = ins[0], set(eqn.params["dimensions"])
    keep = [i for i in range(len(v.shape)) if i not in drop]
    return [r.new_val(eqn.outvars[0].aval.shape, [v.nodes[i] for i in keep], [v.layout[i] for i in keep], v.tensor,
                      v.unreduced) if v.tensor is not None else r.constant(eqn.outvars[0].aval.shape)]


def broadcast(r, eqn, ins):
    v, shape, bd = ins[0], eqn.params["shape"], eqn.params["broadcast_dimensions"]
    if v.tensor is None or not v.shape:
        return [r.constant(shape)]
    nodes, layout = [], []
    for j, s in enumerate(shape):
        k = bd.index(j) if j in bd else None
        if k is not None and v.shape[k] == s:
            nodes.append(v.nodes[k])
            layout.append(v.layout[k])
        else:
            nodes.append(r.d.new(s))
            layout.append(())
    return [r.new_val(shape, nodes, layout, v.tensor, v.unreduced)]


def reshape(r, eqn, ins):
    v, shape = ins[0], tuple(eqn.outvars[0].aval.shape)
    if v.tensor is None:
        return [r.constant(shape)]
    nodes = [r.d.new(1) if s == 1 else None for s in shape]
    layout = [() for _ in shape]
    ia = [(i, s) for i, s in enumerate(v.shape) if s != 1]
    oa = [(j, s) for j, s in enumerate(shape) if s != 1]
    i = j = 0
    while i < len(ia) and j < len(oa):
        gi, gj, pi, pj = [ia[i]], [oa[j]], ia[i][1], oa[j][1]
        i, j = i + 1, j + 1
        while pi != pj:
            if pi < pj:
                gi.append(ia[i])
                pi *= ia[i][1]
                i += 1
            else:
                gj.append(oa[j])
                pj *= oa[j][1]
                j += 1
        if len(gi) == 1 and len(gj) == 1:
            nodes[gj[0][0]], layout[gj[0][0]] = v.nodes[gi[0][0]], v.layout[gi[0][0]]
        elif len(gi) == 1:
            src = gi[0][0]
            parts = [r.fresh(s, v.layout[src] if k == 0 else ()) for k, (_, s) in enumerate(gj)]
            r.d.factor(v.nodes[src], parts)
            for k, (jj, _) in enumerate(gj):
                nodes[jj], layout[jj] = parts[k], (v.layout[src] if k == 0 else ())
        elif len(gj) == 1:
            axes = tuple(a for ii, _ in gi for a in v.layout[ii])
            node = r.fresh(gj[0][1], axes)
            r.d.factor(node, [v.nodes[ii] for ii, _ in gi])
            nodes[gj[0][0]], layout[gj[0][0]] = node, axes
        else:
            raise UsageError(f"reshape at {where(eqn, r.callers)} regroups axes {[s for _, s in gi]} "
                             f"as {[s for _, s in gj]}, "
                             "which names no dimension of the notation")
    return [r.new_val(shape, nodes, layout, v.tensor, v.unreduced)]


def _elements(v) -> int:
    n = 1
    for s in v.shape:
        n *= s
    return n


def dot_general(r, eqn, ins):
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lhs, rhs = ins
    if lhs.tensor is None or rhs.tensor is None:
        raise UsageError(f"dot_general at {where(eqn, r.callers)} multiplies by a constant array, which the notation "
                         "cannot hold; pass it as an argument")
    if lhs.unreduced or rhs.unreduced:
        raise UsageError(f"dot_general at {where(eqn, r.callers)} reads partial sums; sum them first (psum)")
    for i, j in zip(tuple(lc) + tuple(lb), tuple(rc) + tuple(rb)):
        a, b = lhs.nodes[i], rhs.nodes[j]
        if r.d.find(a) == r.d.find(b):
            continue
        if r.collides(a, b):   # read one side's axis as the other's dimension, the side it does not repeat in
            if r.d.find(a) in {r.d.find(n) for n in rhs.nodes}:
                lhs = r.renamed(lhs, i, b)
            else:
                rhs = r.renamed(rhs, j, a)
        else:
            r.d.union(a, b)
    lfree = [i for i in range(len(lhs.shape)) if i not in lc and i not in lb]
    rfree = [j for j in range(len(rhs.shape)) if j not in rc and j not in rb]
    # one dimension free on both sides (queries and keys of one sequence): the smaller operand (the keys,
    # fewer heads) reads it as a new dimension through a View; of two equal ones, the right-hand one
    for j in rfree:
        if r.d.find(rhs.nodes[j]) not in {r.d.find(n) for n in lhs.nodes}:
            continue
        i = next((i for i in lfree if r.d.find(lhs.nodes[i]) == r.d.find(rhs.nodes[j])), None)
        if i is not None and _elements(lhs) < _elements(rhs):
            lhs = r.renamed(lhs, i, r.minted(eqn, ("lhs", i), r.d.size(lhs.nodes[i])))
        else:
            rhs = r.renamed(rhs, j, r.minted(eqn, ("rhs", j), r.d.size(rhs.nodes[j])))
    nodes = [lhs.nodes[i] for i in lb] + [lhs.nodes[i] for i in lfree] + [rhs.nodes[j] for j in rfree]
    layout = ([lhs.layout[i] or rhs.layout[j] for i, j in zip(lb, rb)] + [lhs.layout[i] for i in lfree]
              + [rhs.layout[j] for j in rfree])
    unreduced = ()
    if r.manual:
        la = tuple(a for i in lc for a in lhs.layout[i])
        ra = tuple(a for j in rc for a in rhs.layout[j])
        if sorted(la) != sorted(ra):
            raise UsageError(f"dot_general at {where(eqn, r.callers)} contracts blocks split differently "
                             f"({la} and {ra})")
        unreduced = la
    out = r.result(eqn, "Dot", nodes, layout, unreduced)
    _uses(lhs.tensor, rhs.tensor)
    r.emit(Stmt("einsum", out.tensor, (lhs.tensor, rhs.tensor)))
    return [out]


def reduction(r, eqn, ins):
    v, axes = ins[0], tuple(eqn.params["axes"])
    shape = eqn.outvars[0].aval.shape
    if v.tensor is None:
        return [r.constant(shape)]
    keep = [i for i in range(len(v.shape)) if i not in axes]
    if r.fused:
        return [r.new_val(shape, [v.nodes[i] for i in keep], [v.layout[i] for i in keep], v.tensor)]
    unreduced = tuple(v.unreduced) + (tuple(a for i in axes for a in v.layout[i]) if r.manual else ())
    if not keep:
        raise UsageError(f"{eqn.primitive.name} at {where(eqn, r.callers)} reduces to a scalar, "
                         "which the notation cannot "
                         "write (a tensor needs a dimension)")
    out = r.result(eqn, "Sum" if eqn.primitive.name == "reduce_sum" else "Red", [v.nodes[i] for i in keep],
                   [v.layout[i] for i in keep], unreduced)
    _uses(v.tensor)
    r.emit(Stmt("einsum", out.tensor, (v.tensor,), reduce=tuple(v.nodes[i] for i in axes)))
    return [out]


def inline(key):
    def run(r, eqn, ins):
        inner = next(eqn.params[k] for k in key if k in eqn.params)
        name = eqn.params.get("name")
        live = [v for v in ins if v.tensor is not None]
        if name in NAMED and len(live) == 1 and len(eqn.outvars) == 1:
            return elementwise(r, eqn, ins, rule=NAMED[name])
        jaxpr, consts = (inner.jaxpr, inner.consts) if hasattr(inner, "consts") else (inner, ())
        r.callers.append(where(eqn, r.callers))
        try:
            return r.run(jaxpr, dict(zip(jaxpr.invars, ins)), consts)
        finally:
            r.callers.pop()
    return run


def checkpoint(r, eqn, ins):
    policy = eqn.params.get("policy")
    name = getattr(policy, "__name__", None) or (type(policy).__name__ if policy is not None else "nothing_saveable")
    r.read.policies.append((name, where(eqn, r.callers)))
    r.emit(Stmt("comment", text=f"jax.checkpoint at {where(eqn, r.callers)}, policy {name}"))
    return inline(("jaxpr",))(r, eqn, ins)


def refuse(why: str):
    def run(r, eqn, ins):
        raise UsageError(f"{eqn.primitive.name} at {where(eqn, r.callers)} has no symcost notation: {why}")
    return run


def constant(r, eqn, ins):
    return [r.constant(v.aval.shape) for v in eqn.outvars]


HANDLERS = {"dot_general": dot_general, "transpose": transpose, "squeeze": squeeze, "broadcast_in_dim": broadcast,
            "reshape": reshape, "pjit": inline(("jaxpr",)), "jit": inline(("jaxpr",)),
            "custom_jvp_call": inline(("call_jaxpr",)), "custom_vjp_call": inline(("call_jaxpr", "fun_jaxpr")),
            "custom_vjp_call_jaxpr": inline(("fun_jaxpr", "call_jaxpr")), "remat2": checkpoint,
            "checkpoint": checkpoint, "iota": constant, "axis_index": constant,
            "cond": refuse("a branch is chosen at run time; price each branch as its own function"),
            "ppermute": refuse("a permutation along an axis is a Send in the notation; write it by hand"),
            "all_to_all": refuse("write the AllToAll in the notation by hand")}
HANDLERS.update({p: elementwise for p in UNARY | LINEAR | BINARY})
HANDLERS.update({p: alias for p in ALIAS})
HANDLERS.update({p: reduction for p in REDUCE})
