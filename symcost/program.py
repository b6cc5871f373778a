"""Programs as graphs, and their backward pass (book Part 5).

A program is a sequence of statements; :func:`graph` turns it into a networkx graph of tensors (an edge
from each operand to the result of its statement). :func:`derive_program` plans the forward pass with the
core rewriter and, with ``backward=True``, derives the gradient einsums and plans them too::

    >>> plan = derive_program('''
    ...     param W[D_X, F]
    ...     Out[B_X, F] = In[B_X, D] *_D W[D_X, F]
    ... ''', mesh="X", backward=True)
    >>> [s.signature() for s in plan.collectives]
    ['AllGather_X(W[D_X, F]) -> W[D, F]', 'AllGather_X(W[D_X, F]) -> W[D, F]', 'ReduceScatter_X(dW[D, F]{U_X}) -> dW[D_X, F]']

For ``C = A * B`` the gradients are ``dA = dC * B`` and ``dB = A * dC`` (einsum's transpose rule); ``dC``
is laid out like ``C``, a parameter's gradient must end in the parameter's layout, and an input
activation's gradient in the input's layout. So FSDP's forward AllGather of a weight comes back as a
ReduceScatter of its gradient, and Megatron's AllGather / ReduceScatter pair swaps places.

Collectives on parameters and their gradients are off the critical path (they can be prefetched or
overlapped, as the book's listings mark them); the others are on it.
"""
from __future__ import annotations

from dataclasses import replace



from .api import _materialize, plan_of, run
from .cost import LocalEinsum, Move
from .plan import build_step
from .errors import ShardingError, UsageError
from .layout import Layout
from .notation import Collective, Declaration, Einsum, Program, Ranking, parse
from .plan import Plan
from .rewrite import ANY, Ranker, plan_chain, reshard

REUSE = ("none", "activations", "all")


def graph(prog: Program | str):
    """Tensors as nodes (``kind``: input, param or computed), statements as edges (``line``): a
    ``networkx.DiGraph``."""
    import networkx as nx  # only here: it costs a tenth of a second to import
    prog = parse(prog) if isinstance(prog, str) else prog
    g = nx.DiGraph()
    params = set()
    for st in prog.statements:
        line = st.span.line
        if isinstance(st, Declaration):
            for t in st.tensors:
                params.add(t.name)
                g.add_node(t.name, kind="param", line=line)
            continue
        if isinstance(st, Ranking):
            continue
        if isinstance(st, Collective):
            ins, out = [st.operand.name], st.output.name
        else:
            ins = [t.name for t in st.operands]
            out = st.result_name
        for name in ins:
            if name not in g:
                g.add_node(name, kind="param" if name in params else "input", line=line)
        if out is None:
            continue
        if out not in g or g.nodes[out].get("kind") == "input" and out not in ins:
            g.add_node(out, kind="computed", line=line)
        for name in ins:
            if name != out:
                g.add_edge(name, out, line=line)
    return g


def default_params(st) -> list[str]:
    """Without declarations: the program's inputs whose names start with W (W, Win, W_out, ...)."""
    return [n for n in st.initial if n not in st.produced and n[:1] == "W"]


def _resolve_params(st, params) -> dict[str, Layout]:
    if params:
        names = [p.strip() for p in (params.split(",") if isinstance(params, str) else params) if p.strip()]
        out = {}
        for n in names:
            if n in st.produced:
                raise ShardingError(f"{n} is not a parameter: it is computed on line {st.produced[n]}")
            if n not in st.initial:
                raise UsageError(f"{n} is not a tensor of the program; it has "
                                 f"{', '.join(sorted(st.initial))}")
            out[n] = st.initial[n]
        return out
    if st.params:
        return dict(st.params)
    found = default_params(st)
    if not found:
        raise UsageError("the program declares no parameters; write e.g. 'param W[D_X, F]' or pass --params")
    return {n: st.initial[n] for n in found}


def _critical(step, params: set) -> bool:
    if not step.is_collective:
        return step.kind == "Einsum"
    name = step.tensor
    base = name[1:] if name.startswith("d") and name[1:] in params else name
    return base not in params


def derive_program(text, mesh=None, dims=None, hw=None, *, backward: bool = False,
                   reuse: str = "activations", params=None, input_grads: bool = True,
                   overlap: bool = True, objective: str = "time", moves=None) -> Plan:
    """Plan a program's forward pass and, with ``backward``, its gradients.

    ``reuse``: which forward gathers the backward pass may reuse: ``activations`` (default: activations
    are kept as the forward pass used them; weights are gathered again, as in the book's FSDP listing),
    ``all`` or ``none``. ``params``: names of the parameters (default: ``param`` declarations, else the
    inputs named W...). ``input_grads``: also derive the gradient of the program's input activations.
    """
    if reuse not in REUSE:
        raise UsageError(f"reuse must be one of {', '.join(REUSE)}, not {reuse!r}")
    st = run(text, mesh, dims, hw, overlap=overlap, objective=objective, moves=moves)
    if not backward:
        params_ = set(st.params) or set(default_params(st))
        steps = [replace(s, critical=_critical(s, params_)) for s in st.steps]
        return plan_of(st, text, steps, overlap, objective)
    params_ = _resolve_params(st, params)
    forward = [replace(s, critical=_critical(s, set(params_))) for s in st.steps]
    saved: dict = {}
    backward_steps = _backward(st, params_, reuse, input_grads, saved)
    plan = plan_of(st, text, forward + backward_steps, overlap, objective)
    return replace(plan, memory=tuple(training_memory(plan, params_, saved).items()))


def training_memory(plan, params: dict, saved: dict) -> dict:
    """Bytes a device holds while training the program (book Part 5, Question 2's accounting): the
    parameters in their dtype, bf16 gradients, Adam's two fp32 moments, and the activations saved for
    the backward pass, in the layouts they are kept in (gathered when the backward pass reuses them)."""
    import sympy as sp

    from .layout import bytes_per_device
    from .training import memory_per_device
    mem = memory_per_device(plan, params=list(params), grad_bytes=2)
    sizes = dict(plan.sizes)
    act = sum((sp.sympify(bytes_per_device(t, plan.mesh, sizes)) for t in saved.values()), sp.Integer(0))
    mem["activations"] = act
    mem["total"] = mem["params"] + mem["gradients"] + mem["optimizer"] + act
    return mem


def _backward(st, params: dict, reuse: str, input_grads: bool, saved: dict | None = None) -> list:
    consumed = {t.name for e, _ in st.einsums for t in e.inputs}
    outputs = [n for n in st.produced if n not in consumed]
    if not outputs:
        raise UsageError("the program has no output to differentiate")
    grads: dict[str, Layout] = {}
    for n in outputs:
        lay = st.known[n]
        grads[n] = replace(lay, name="d" + n, unreduced=frozenset())
    steps = []
    have: dict[str, list] = {}  # gradient name -> layouts already materialized (reused, not moved again)
    inputs = {n for n in st.initial if n not in st.produced}
    any_move = Ranker(st.mesh, st.sizes, st.ranker.env.constants, objective=st.ranker.objective,
                      overlap=st.ranker.overlap)
    for op in reversed(st.ops):
        if op[0] == "collective":
            _, kind, src, out, line = op
            g = grads.pop(out.name, None)
            if g is None:
                continue
            want = replace(src, name="d" + src.name, unreduced=frozenset())
            g = replace(g, name=want.name)
            if kind == "Send":  # the transpose of a send is a send the other way
                moves = [Move("Permute", tuple(a for a in st.mesh.names if a in src.sharding_axes) or
                              tuple(st.mesh.names[:1]), g, g)] if g == want else reshard(g, want, st.mesh, any_move)[1]
            else:  # AllGather^T = ReduceScatter, AllToAll^T = AllToAll the other way, ...
                _, moves = reshard(g, want, st.mesh, any_move)
            for m in moves:
                s_ = build_step(m, st.env, phase="backward", why=f"transpose of the {kind} on line {line}")
                steps.append(replace(s_, critical=_critical(s_, set(params))))
            grads[src.name] = want
            continue
        _, e, line = op
        dres = grads.get(e.output.name)
        if dres is None:
            continue
        for i, x in enumerate(e.inputs):
            name = x.name
            if name in inputs and name not in params and not input_grads:
                continue
            others = [t for j, t in enumerate(e.inputs) if j != i]
            srcs = [_saved(t, st, params, reuse) for t in others]
            if saved is not None:
                for t in srcs:
                    if t.name not in params:
                        saved.setdefault(t.name, t)
            missing = set(x.dims) - set(dres.dims).union(*(set(t.dims) for t in others))
            if missing:
                raise ShardingError(f"the gradient of {name} on line {line} needs dimension "
                                    f"{sorted(missing)[0]}, which the product sums away; "
                                    f"broadcasts are not supported")
            redefined = any(o[0] == "collective" and o[3].name == name for o in st.ops)
            if name in params and not redefined:
                target = replace(params[name], name="d" + name, unreduced=frozenset())
            elif redefined:  # any layout, partial sums included: the collective's transpose resolves them
                target = grads.get(name, ANY)
            elif name in inputs:
                target = replace(st.initial[name], name="d" + name, unreduced=frozenset())
            elif name in grads:
                target = grads[name]  # accumulate into the first contribution's layout
            elif name in st.initial:  # a named intermediate: its gradient is laid out like it
                target = replace(st.initial[name], name="d" + name, unreduced=frozenset())
            else:
                target = None
            at_hand = tuple(have.get(dres.name, [dres]))
            operands = [at_hand] + srcs
            cands = plan_chain(operands, [None] * (len(operands) - 1), "d" + name, x.dims, target, st.mesh,
                               st.ranker, out_dtype=x.dtype)
            best = cands[0]
            for op in best.steps:
                if not isinstance(op, LocalEinsum) and op.before.name == dres.name:
                    have.setdefault(dres.name, [dres]).append(op.after)
            for s in _materialize(best.steps, st, target):
                steps.append(replace(s, phase="backward", critical=_critical(s, set(params))))
            final = best.steps[-1]
            grads.setdefault(name, final.output if isinstance(final, LocalEinsum) else final.after)
    return steps


def _saved(t: Layout, st, params: dict, reuse: str) -> Layout:
    """The layout in which a forward operand is available to the backward pass."""
    is_param = t.name in params
    keep = reuse == "all" or (reuse == "activations" and not is_param)
    if keep:
        return t
    if is_param:
        return params[t.name]
    return st.initial.get(t.name, t)
