"""The backward pass of a planned program (book Part 5).

For ``C = A * B`` the gradients are ``dA = dC * B`` and ``dB = A * dC`` (einsum's transpose rule), each
planned by the same rewriter; ``dC`` is laid out like ``C``, a parameter's gradient must end in the
parameter's layout, and an input activation's gradient in the input's layout. A written collective is
undone by its kind's stated transpose (AllGather^T = ReduceScatter, AllToAll^T = the AllToAll back, a
send's is the send back) where the gradient arrives in the transpose's input layout, and by the cheapest
route otherwise. So FSDP's forward AllGather of a weight comes back as a ReduceScatter of its gradient,
and Megatron's AllGather / ReduceScatter pair swaps places.

Collectives on parameters and their gradients are off the critical path (they can be prefetched or
overlapped, as the book's listings mark them); the others are on it.

Elementwise work is differentiated by its rule: its backward reads the result's gradient and what the
forward pass saved (a norm its input, softmax its output, dropout its mask) and writes each operand's
gradient; a residual add and a view pass the gradient through. A tensor read several times (the input
of the Q, K and V projections) collects its gradient's contributions as partial sums and reduces them
once, where the operation that produced it takes its gradient (Megatron's g operator).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import NamedTuple

from . import caching
from .collectives import Move, gradient
from .einsum import LocalEinsum
from .elementwise import Elementwise
from .errors import ShardingError, UsageError
from .layout import Layout
from .explain import explained_steps, final_layout
from .rewrite import ANY, plan_chain, reshard
from .trace import Step, Trace

REUSE = ("none", "activations", "all")


def default_params(trace: Trace) -> list[str]:
    """Without declarations: the program's inputs whose names start with W (W, Win, W_out, ...)."""
    return [n for n in trace.inputs if n[:1] == "W"]


def resolve_params(trace: Trace, params=None) -> dict[str, Layout]:
    """The parameters to differentiate: ``params`` (names), else the declared ones, else inputs named W..."""
    first, made = trace.first, trace.producers
    if params:
        names = [p.strip() for p in (params.split(",") if isinstance(params, str) else params) if p.strip()]
        out = {}
        for n in names:
            if n in made:
                raise ShardingError(f"{n} is not a parameter: it is computed on line {made[n]}")
            if n not in first:
                raise UsageError(f"{n} is not a tensor of the program; it has {', '.join(sorted(first))}")
            out[n] = first[n]
        return out
    if trace.params:
        return trace.param_layouts
    found = default_params(trace)
    if not found:
        raise UsageError("the program declares no parameters; write e.g. 'param W[D_X, F]' or pass --params")
    return {n: first[n] for n in found}


def critical(step: Step, params) -> bool:
    """Einsums and collectives of activations are on the critical path; those of parameters (gathers
    that can be prefetched) and of their gradients (reductions that overlap) are not."""
    op = step.op
    if isinstance(op, (LocalEinsum, Elementwise)):     # local work (the properties of a step, read directly:
        return True                                     # a search marks thousands of steps)
    if not op.rule.communicates:
        return False
    name = op.tensor
    base = name[1:] if name.startswith("d") and name[1:] in params else name
    return base not in params


def flagged(steps, params, phase: str | None = None) -> list[Step]:
    """The steps, each marked on or off the critical path (and put in ``phase`` when given); a step already
    marked right is kept as it is."""
    out = []
    for s in steps:
        c, ph = critical(s, params), phase or s.phase
        out.append(s if s.critical == c and s.phase == ph else s.marked(ph, c))
    return out


def saved_layout(t: Layout, first: dict, params: Mapping, reuse: str) -> Layout:
    """The layout in which a forward operand is available to the backward pass."""
    is_param = t.name in params
    if reuse == "all" or (reuse == "activations" and not is_param):
        return t
    if is_param:
        return params[t.name]
    return first.get(t.name, t)


class State(NamedTuple):
    """Where the backward pass stands after the uses from some index on: the gradients laid out so far, the
    steps and saved activations so far, and the layouts materialised (a tie's alternative resumes here)."""

    grads: dict
    steps: tuple
    saved: dict
    have: dict

    def copied(self) -> "State":
        return State(dict(self.grads), self.steps, dict(self.saved), {k: list(v) for k, v in self.have.items()})


class Follows(NamedTuple):
    """A backward pass of the same program whose uses below ``below`` are the ones another pass takes back
    (a tie's alternative changes only its own einsum's uses): ``uses`` (the program's), ``states`` (its
    states at the marks), its ``steps`` and ``saved`` activations. The uses below an index read only the
    gradients and layouts at hand of the tensors they name: where the other pass reaches, at or below
    ``below``, the ones this pass had there, the rest of its steps are this pass's, read and not derived
    again. The saved activations steer no step (each is kept where it is first read), so they may differ:
    the rest adds those this pass added after that point, where the other pass holds every one this pass
    held there (else it could not say which of them the rest would have added)."""

    below: int
    uses: tuple
    states: Mapping
    steps: tuple
    saved: Mapping
    reads: dict       # {index: _read_below(uses, index)}, kept across the passes that follow this one

    def rest(self, i: int, here: State, states: dict) -> tuple[list, dict, dict] | None:
        """The whole pass (steps, saved, states) from ``here``, the state at use ``i``, when it joins this
        pass there; else None."""
        prior = self.states.get(i) if i <= self.below else None
        if prior is None or not prior.saved.keys() <= here.saved.keys():
            return None
        read = self.reads.get(i) or self.reads.setdefault(i, _read_below(self.uses, i))
        for mine, theirs in ((here.grads, prior.grads), (here.have, prior.have)):
            if any(mine.get(k) != theirs.get(k) for k in (mine.keys() | theirs.keys()) & read):
                return None
        n = len(prior.steps)

        def saved(then: Mapping) -> dict:
            out = dict(here.saved)
            for k, v in then.items():
                if k not in prior.saved:
                    out.setdefault(k, v)
            return out

        def joined(mine: dict, theirs: dict) -> dict:      # the rest changes only what it reads
            return {**{k: v for k, v in mine.items() if k not in read},
                    **{k: v for k, v in theirs.items() if k in read}}
        states.update({j: State(joined(here.grads, s.grads), here.steps + s.steps[n:], saved(s.saved),
                                joined(here.have, s.have))
                       for j, s in self.states.items() if j < i})
        return list(here.steps + self.steps[n:]), saved(self.saved), states


def _read_below(uses, i: int) -> frozenset:
    """The tensors (and their gradients, ``d<name>``) the uses before index ``i`` name: all a backward pass
    through them reads or writes of its gradients and layouts at hand."""
    names: set[str] = set()
    for u in uses[:i]:
        names.update(t.name for t in ((u.op.before, u.op.after) if u.written else (*u.op.inputs, u.op.output)))
    return frozenset(names | {"d" + n for n in names})


def backward(trace: Trace, params: dict, reuse: str = "activations", input_grads: bool = True):
    """(steps of the backward pass, the activations it reads as {name: layout they are kept in})."""
    steps, saved, _ = resumed(trace, params, reuse, input_grads)
    return steps, saved


def resumed(trace: Trace, params: Mapping, reuse: str = "activations", input_grads: bool = True,
            start: tuple[int, State] | None = None, marks=(), follows: Follows | None = None
            ) -> tuple[list, dict, dict]:
    """The backward pass from ``start`` (``(index, state)``: the uses from ``index`` on already taken
    back; None: from the program's end): its steps, saved activations, and ``{index: State}`` at each
    index of ``marks`` it passes (the uses from that index on taken back). ``follows``: a pass this one
    joins where it reaches one of that pass's states (:class:`Follows`)."""
    if reuse not in REUSE:
        raise UsageError(f"reuse must be one of {', '.join(REUSE)}, not {reuse!r}")
    consumed = {t.name for u in trace.uses if not isinstance(u.op, Move) for t in u.op.inputs}   # work, not moves
    outputs = [n for n, _ in trace.produced if n not in consumed]
    if not outputs:
        raise UsageError("the program has no output to differentiate")
    at, state = start or (len(trace.uses), State({n: gradient(trace.known[n]) for n in outputs}, (), {}, {}))
    walk = _Pass(trace, params, reuse, input_grads, state.copied())
    states: dict[int, State] = {}
    for i in range(at - 1, -1, -1):
        if i + 1 in marks:
            states[i + 1] = walk.state()
            joined = follows.rest(i + 1, states[i + 1], states) if follows is not None else None
            if joined is not None:
                return joined
        use = trace.uses[i]
        if isinstance(use.op, Elementwise):
            walk.elementwise(use.op)
        elif use.written:
            walk.move(use)
        else:
            walk.einsum(use)
    return walk.steps, walk.saved, states


class _Pass:
    """One backward pass under way: the gradients laid out so far (tensor name -> its gradient's layout),
    the activations saved, the layouts already materialised in the backward pass (reused) and the steps."""

    def __init__(self, trace: Trace, params: Mapping, reuse: str, input_grads: bool, state: State):
        self.trace, self.params, self.reuse, self.input_grads = trace, params, reuse, input_grads
        self.mesh, self.names = trace.mesh, frozenset(params)
        self.grads, self.saved, self.have, self.steps = state.grads, state.saved, state.have, list(state.steps)
        self.inputs, self.first = set(trace.inputs), trace.first
        self.redefined = {u.op.after.name for u in trace.uses if isinstance(u.op, Move)}
        self.readers = Counter(t.name for u in trace.uses if not isinstance(u.op, Move) for t in u.op.inputs)
        self.any_move = trace.ranker.with_moves(None)

    def state(self) -> State:
        return State(self.grads, tuple(self.steps), self.saved, self.have).copied()

    def add(self, ops_steps) -> None:
        self.steps.extend(flagged(ops_steps, self.params, "backward"))

    def keep(self, t: Layout) -> Layout:
        """The layout a forward operand is read back in, recorded as saved when it is an activation."""
        lay = saved_layout(t, self.first, self.params, self.reuse)
        if lay.name not in self.params:
            self.saved.setdefault(lay.name, lay)
        return lay

    def elementwise(self, e: Elementwise) -> None:
        dres = self.grads.get(e.output.name)
        if dres is not None:
            _elementwise_backward(e, dres, self.keep, self.grads, self.params, self.inputs, self.input_grads,
                                  self.mesh, self.any_move, self.add)

    def move(self, use) -> None:
        """A written collective undone: by its kind's transpose where the gradient arrives in the
        transpose's input layout, else by the cheapest route back."""
        op, mesh = use.op, self.mesh
        g = self.grads.pop(op.after.name, None)
        if g is None:
            return
        want = gradient(op.before)
        arrived, g = g, replace(g, name=want.name)
        t = op.rule.transpose(op)
        moves: list | tuple | None = None
        if t is not None:
            t = replace(t, before=replace(t.before, name=want.name), after=replace(t.after, name=want.name))
            exact = not t.rule.inserted or t in tuple(t.rule.edges(t.before, mesh))
            if exact and t.after == want and (g == t.before or (not t.rule.inserted and g.same_sharding(t.before))):
                moves = [replace(t, before=g, after=g) if not t.rule.inserted else t]
        if moves is None:
            _, moves = reshard(g, want, mesh, self.any_move)
        if moves and arrived.name != want.name:   # a renaming collective's: its first move reads the result's
            moves = [replace(moves[0], before=replace(moves[0].before, name=arrived.name)), *moves[1:]]
        why = f"transpose of the {op.kind} on line {use.line}"
        self.add(Step(m, mesh, why=why, sizes=self.trace.bound.sizes) for m in moves)
        self.grads[op.before.name] = want

    def einsum(self, use) -> None:
        """Each operand's gradient of an einsum (:func:`_einsum_back`), from what the pass holds of the tensors
        it names: the result's gradient, the operands' facts and gradients so far, the layouts at hand."""
        dres = self.grads.get(use.op.output.name)
        if dres is None:
            return
        names = [x.name for x in use.op.inputs]
        held = tuple(dict.fromkeys(names + [dres.name]))
        done = _einsum_back(use, dres, tuple(map(self.facts, names)), tuple(map(self.grads.get, names)),
                            tuple(tuple(self.have.get(n, ())) for n in held), self.mesh, self.trace.ranker,
                            self.trace.bound.sizes, self.reuse, self.input_grads, self.names)
        self.steps.extend(done.steps)
        for lay in done.reads:
            self.saved.setdefault(lay.name, lay)
        self.grads.update((n, g) for n, g in zip(names, done.grads) if g is not None)
        self.have.update((n, list(h)) for n, h in zip(held, done.have) if h)

    def facts(self, name: str) -> tuple:
        """What the pass looks up of a tensor besides its gradient and layouts at hand: its first layout, its
        layout as a parameter (None: not one), whether the program reads it as an input, whether a written
        collective redefines it, how many operations read it."""
        return (self.first.get(name), self.params.get(name), name in self.inputs, name in self.redefined,
                self.readers[name])


class _Done(NamedTuple):
    """An einsum taken back: its steps, the activations it read back, and then each operand's gradient and
    the layouts at hand of the tensors it names (in :meth:`_Pass.einsum`'s order)."""
    steps: tuple
    reads: tuple
    grads: tuple
    have: tuple


@caching.memoize(maxsize=8192)
def _einsum_back(use, dres: Layout, facts: tuple, grads: tuple, have: tuple, mesh, ranker, sizes, reuse: str,
                 input_grads: bool, params: frozenset) -> _Done:
    """Each operand's gradient of an einsum: the result's gradient ``dres`` times the other operands, planned
    by the rewriter into the layout the operand's gradient must end in. A function of what it reads of the
    pass (kept: a search's candidates and the tied plans each weighs take the same einsums back from the
    same gradients again and again)."""
    e = use.op
    names = [x.name for x in e.inputs]
    held = tuple(dict.fromkeys(names + [dres.name]))
    fact = dict(zip(names, facts))
    first = {n: f[0] for n, f in fact.items() if f[0] is not None}
    layouts = {n: f[1] for n, f in fact.items() if f[1] is not None}
    g = {n: v for n, v in zip(names, grads) if v is not None}
    h = {n: list(v) for n, v in zip(held, have) if v}
    steps: list = []
    reads: list = []

    def keep(t: Layout) -> Layout:
        lay = saved_layout(t, first, layouts, reuse)
        if lay.name not in layouts:
            reads.append(lay)
        return lay

    for i, x in enumerate(e.inputs):
        name = x.name
        if fact[name][2] and name not in layouts and not input_grads:
            continue
        others = [t for j, t in enumerate(e.inputs) if j != i]
        srcs: list = [keep(t) for t in others]
        srcs = [t if t.name in layouts else tuple(h.get(t.name, [t])) for t in srcs]
        missing = set(x.dims) - set(dres.dims).union(*(set(t.dims) for t in others))
        if missing:
            raise ShardingError(f"the gradient of {name} on line {use.line} needs dimension {sorted(missing)[0]}, "
                                f"which the product sums away; broadcasts are not supported")
        target = _target(name, fact[name], g)
        operands = [tuple(h.get(dres.name, [dres]))] + srcs
        best = plan_chain(operands, [None] * (len(operands) - 1), "d" + name, x.dims, target, mesh, ranker,
                          out_dtype=x.dtype, keep=0)[0]
        kept = {t[0].name for t in srcs if isinstance(t, tuple)}
        for op in best.steps:
            if not isinstance(op, LocalEinsum) and op.before.name in kept | {dres.name}:
                h.setdefault(op.before.name, [op.before]).append(op.after)
        steps.extend(_explained(best.steps, mesh, target, sizes, params))
        g.setdefault(name, final_layout(best.steps))
    return _Done(tuple(steps), tuple(reads), tuple(g.get(n) for n in names), tuple(tuple(h.get(n, ())) for n in held))


def _target(name: str, fact: tuple, grads: dict):
    """The layout a tensor's gradient must end in (ANY: any layout, partial sums included; None: free), from
    its facts (:meth:`_Pass.facts`) and the gradients so far."""
    first, param, is_input, redefined, readers = fact
    if param is not None and not redefined:
        return gradient(param)
    if redefined:  # any layout, partial sums included: the collective's transpose resolves them
        return grads.get(name, ANY)
    if is_input:
        return gradient(first)
    if name in grads:
        return grads[name]  # accumulate into the first contribution's layout
    if readers > 1:
        return ANY  # contributions add up as partial sums; reduced where the tensor was produced
    if first is not None:  # a named intermediate: its gradient is laid out like it
        return gradient(first)
    return None


@caching.memoize(maxsize=8192)
def _explained(ops: tuple, mesh, target, sizes, params: frozenset) -> tuple[Step, ...]:
    """A gradient's route as backward steps, explained and marked (kept: the tied forward plans a search
    weighs take the same gradients back again)."""
    return tuple(flagged(explained_steps(ops, mesh, target, "backward", sizes=sizes), params))


def _elementwise_backward(e: Elementwise, dres: Layout, keep, grads, params, inputs, input_grads, mesh, ranker, add):
    """The gradient of each operand of elementwise work (see the module docstring)."""
    rule = e.rule
    out = gradient(e.output)
    if rule.linear and dres.axes == out.axes:
        out = dres   # partial sums pass through a linear operation
    if dres != out:
        _, moves = reshard(dres, out, mesh, ranker)
        add(Step(m, mesh, why=f"the gradient of {e.output.name} must be {out.render(mesh)} for {e.kind}'s backward")
            for m in moves)
        dres = out
    reads = tuple(keep(t) for t in e.saved())
    for x in e.inputs[:1] if rule.broadcasts else e.inputs:    # a dispatch's router steers: no gradient
        if x.name in inputs and x.name not in params and not input_grads:
            continue
        gx = Layout("d" + x.name, x.dims, dres.axes if len(x.dims) == len(dres.dims) else x.axes, dres.unreduced,
                    x.dtype)
        if rule.drops:   # cross-entropy: the gradient has the logits' shape
            gx = replace(gradient(x), unreduced=frozenset())
        if rule.grad_flops:
            op = Elementwise(e.kind, (dres,) + reads, gx, e.reduce, grad=True)
            add([Step(op, mesh, why=f"backward of {e.kind}: the gradient of {x.name}")])
        have = grads.get(x.name)
        if have is not None and have.unreduced - gx.unreduced:
            # partial sums so far and a whole contribution (a dispatch's sum of its copies): the partial sums
            # are reduced now, as the operand's gradient would be before its own backward reads it
            _, moves = reshard(have, gx, mesh, ranker)
            add(Step(m, mesh, why=f"gradients of {x.name} add up in {gx.render(mesh)}") for m in moves)
            grads[x.name] = gx
        elif have is not None and have != gx:
            _, moves = reshard(gx, have, mesh, ranker)
            add(Step(m, mesh, why=f"gradients of {x.name} add up in {have.render(mesh)}") for m in moves)
        grads.setdefault(x.name, gx)
