"""What a statement's backward pass spends on each axis's links whatever its plan: the floor a bounded or
exact search puts under a piece whose backward steps it does not plan alone (:mod:`.pieces`).

A statement ``Out = In * W`` takes back each operand's gradient: ``dW = In^T dOut`` sums over every
dimension of ``Out`` that ``W`` lacks, and ``dIn = dOut W^T`` over those ``In`` lacks. The gradient of a
parameter, or of the program's input, must end in that tensor's own layout, reduced
(:func:`symcost.backward._target`), whatever other statements do. Where the output's gradient ``dOut``
arrives in the output's layout (the output is read by at most one statement, an einsum, so nothing else
decides it) and that layout splits a dimension such a gradient sums over an axis ``a``, each device along
``a`` holds a different part of the sum, and data crosses ``a`` whatever route the planner takes. The
links of ``a`` carry at least the least of three ways:

* each such gradient reduced over ``a``: from the least block its partial sums can take (split over every
  other axis), a ReduceScatter where its layout is split over ``a`` (or the cheaper AllReduce), else an
  AllReduce or a ReduceScatter and the AllGather back (it must end whole over ``a``);
* ``dOut`` gathered over ``a`` (then nothing is summed over ``a``);
* ``dOut``'s split over ``a`` moved to another dimension by an AllToAll, and each gradient whose layout is
  not split over ``a`` gathered over it afterwards (the dimension ``a`` moves to is one it keeps).

Which statements of a program have such a floor is :func:`floored`'s answer (a search without the
backward pass has none). Each move is over ``a`` alone, on the least block it can take (``a`` taken as
the last axis of its dimension, where a move over ``a`` alone applies): a move over several axes, or of a
larger block, spends no less on ``a``'s links. The moves are priced by the one pricing path (as steps of the
statement's plan); the tests hold the floor under what every candidate the searches derive spends on each
axis.

    >>> from symcost.program import derive_program
    >>> plan = derive_program("param W[D, F_X]\\nOut[B_Y, F_X] = In[B_Y, D] *_D W[D, F]", "X=4,Y=2",
    ...                       "B=8192,D=4096,F=4096", "h100", alternatives=False)
    >>> [round(t * 1e6, 1) for t in backward_links(plan, "Out", ("In", "W"))]   # us on X, on Y
    [55.9, 18.6]

``dOut[B_Y, F_X]`` splits B, which ``dW`` sums, over Y: ``dW[D, F_X]`` must end whole over Y, so it is
reduced over Y, an AllReduce (18.6 us), as the plan does. It splits F, which ``dIn`` sums, over X: the plan
reduces ``dIn[B_Y, D]`` over X by an AllReduce (111.8 us); moving ``dOut``'s X to B (an AllToAll) and
gathering ``dIn`` over X afterwards would spend 55.9 us on X's links (and gather ``W``: the floor does not
count the other operand, whose layouts another statement may have made).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

from .. import caching, dtypes
from ..collectives import gradient, rule
from ..env import Env
from ..layout import Layout
from ..notation import Apply, Declaration, Einsum, Program
from ..pricing import numeric_cost, totals

def backward_links(plan, output: str, targets: tuple) -> tuple[float, ...]:
    """Seconds each mesh axis's links carry at least in the backward steps of the statement ``plan``
    plans (forward alone is enough: the layouts are its), ``output`` being the name of its result, whose
    gradient arrives in the result's layout, and ``targets`` the operands whose gradients must end in
    their own layouts (parameters, the program's inputs). Zero on every axis where the plan's steps are
    not priced in numbers (a size unbound, achieved efficiency)."""
    return links({lay.name: lay for lay in plan.layouts}, output, targets, plan.mesh, plan.sizes,
                 plan.figures())


def pricing(plan) -> tuple:
    """``(mesh, sizes, figures)`` of a plan of the program, what :func:`links` prices with."""
    return plan.mesh, plan.sizes, plan.figures()


def written(program) -> dict:
    """Each tensor's layout as a statement alone (:func:`.pieces.alone`, its layouts written) has it, read
    off the text without planning: a tensor's first appearance (its declaration, or its first use) gives its
    layout, as the planner takes it (an unannotated use takes a tensor as it is)."""
    out: dict = {}
    for st in program.statements:
        refs = getattr(st, "tensors", ())
        result = getattr(st, "output", None)
        for ref in refs:
            if ref.name in out:
                continue
            dtype = ref.dtype
            if dtype is None and ref is result:      # a result takes its widest operand's dtype
                dtype = max((out[t.name].dtype for t in st.operands if t.name in out), key=dtypes.nbytes,
                            default=dtypes.DEFAULT)
            out[ref.name] = Layout(ref.name, tuple(d.name for d in ref.dims), tuple(d.axes for d in ref.dims),
                                   frozenset(ref.unreduced), dtype or dtypes.DEFAULT)
    return out


def at_splits(sub):
    """``splits -> {tensor: Layout}`` for a statement alone (a search's space of it, :func:`.pieces.alone`):
    its layouts at a key (:func:`.pieces.splitter`), as :func:`written` reads them off the statement
    written for a candidate with those splits, without writing it."""
    base, laid = written(sub.program), _layer(sub)

    def at(splits) -> dict:
        out = dict(base)
        for name, per_axis in splits:
            out[name] = laid(base[name], per_axis)
        return out
    return at


def _layer(sub):
    """``(layout as written, per axis the dimension it splits) -> the layout at those splits`` for a
    statement alone (a dimension written with its size takes no axes, as :meth:`~.space.Space.program_for`
    writes it)."""
    axes = tuple(a.name for a in sub.mesh.axes)
    sized: dict = {}
    for st in sub.program.statements:
        for ref in getattr(st, "tensors", ()):
            sized.setdefault(ref.name, tuple(d.size is not None for d in ref.dims))

    def laid(lay: Layout, per_axis: tuple) -> Layout:
        return lay.with_axes(tuple(() if fixed else tuple(a for a, d in zip(axes, per_axis) if d == dim)
                                   for dim, fixed in zip(lay.dims, sized[lay.name])))
    return laid


def links_at(sub, output: str, targets: tuple, mesh, sizes: tuple, figures):
    """``splits -> :func:`links``` of a statement alone at each key (:func:`at_splits`), each tensor's
    gradient laid out once for each split it takes (a search reads tens of thousands of keys, which share
    a few hundred splits of each tensor)."""
    base, laid = written(sub.program), _layer(sub)
    kept: dict = {}
    reduced, taken_off = _kept(_reduced, mesh, sizes, figures), _kept(_taken_off, mesh, sizes, figures)

    def grad(name: str, per_axis: tuple) -> Layout:
        got = kept.get((name, per_axis))
        if got is None:
            got = kept[name, per_axis] = gradient(laid(base[name], per_axis))
        return got

    def at(splits) -> tuple:
        split = dict(splits)
        grads = [grad(n, split[n]) if n in split else gradient(base[n]) for n in targets if n in base]
        if output not in base or not grads or figures is None:
            return (0.0,) * len(mesh.axes)
        dres = grad(output, split[output]) if output in split else gradient(base[output])
        return _floor(dres, grads, mesh, sizes, figures, reduced, taken_off)
    return at


def _kept(fn, mesh, sizes: tuple, figures):
    """``(layout, axis) -> fn(layout, axis, mesh, sizes, figures)``, its answers kept by layout and axis
    alone for one statement's keys (which share the mesh, the sizes and the figures: tens of thousands of
    keys, a few hundred layouts)."""
    got: dict = {}

    def answer(layout: Layout, a: str):
        out = got.get((layout, a))
        if out is None:
            out = got[layout, a] = fn(layout, a, mesh, sizes, figures)
        return out
    return answer


def links(layouts: dict, output: str, targets: tuple, mesh, sizes: tuple, figures) -> tuple[float, ...]:
    """:func:`backward_links` from the statement's layouts ``{tensor: Layout}`` and ``(mesh, sizes,
    figures)`` (:func:`pricing`)."""
    out = layouts.get(output)
    grads = [gradient(layouts[n]) for n in targets if n in layouts]
    if out is None or not grads or figures is None:
        return (0.0,) * len(mesh.axes)
    return _floor(gradient(out), grads, mesh, sizes, figures)


def _floor(dres: Layout, grads: list, mesh, sizes: tuple, figures, reduced=None, taken_off=None) \
        -> tuple[float, ...]:
    """Each axis's floor from the result's gradient ``dres`` and the gradients ``grads`` that must end in
    their own layouts (see the module's text); ``reduced``, ``taken_off``: :func:`_reduced` and
    :func:`_taken_off` of a layout and an axis at these sizes and figures, where a caller keeps them."""
    reduced = reduced or (lambda g, a: _reduced(g, a, mesh, sizes, figures))
    taken_off = taken_off or (lambda d, a: _taken_off(d, a, mesh, sizes, figures))
    floor = [0.0] * len(mesh.axes)
    for i, ax in enumerate(mesh.axes):
        a = ax.name
        r = next((d for d, axes in zip(dres.dims, dres.axes) if a in axes), None)
        summed = [g for g in grads if r is not None and r not in g.dims]
        if ax.size == 1 or not summed:
            continue
        least = regathered = 0.0
        for g in summed:
            once, back = reduced(g, a)
            least, regathered = least + once, regathered + back
        gathered, moved = taken_off(dres, a)
        floor[i] = min(least, gathered, moved + regathered)
    return tuple(floor)


@caching.memoize(maxsize=4096)
def _reduced(g: Layout, a: str, mesh, sizes: tuple, figures: tuple) -> tuple[float, float]:
    """``(the least a gradient laid out as g spends on a's links to sum its partial sums over a, the
    AllGather back over a that its reduction or its computation split over a needs)``, the second 0 where
    ``g`` is split over ``a`` (kept: the pieces of a search share their tensors' layouts)."""
    env = Env.numeric(mesh, dict(sizes))
    part = _least(replace(g.with_axes(tuple(tuple(x for x in axes if x != a) for axes in g.axes)),
                          unreduced=frozenset({a})), mesh, a, env)
    scatters = _moves(part, a, ("ReduceScatter",), mesh)
    rs = _cheapest(scatters, mesh, sizes, figures)
    ar = _cheapest(_moves(part, a, ("AllReduce",), mesh), mesh, sizes, figures)
    if any(a in axes for axes in g.axes):            # it may end scattered over a
        return min(rs, ar), 0.0
    # it must end whole over a: gathered again
    back = _cheapest([m for s in scatters for m in _moves(s.after, a, ("AllGather",), mesh)], mesh, sizes, figures)
    return min(ar, rs + back), back


@caching.memoize(maxsize=4096)
def _taken_off(dres: Layout, a: str, mesh, sizes: tuple, figures: tuple) -> tuple[float, float]:
    """``(the least AllGather, the least AllToAll)`` over ``a`` that takes ``dres``'s split over ``a`` off
    the dimension it splits, from the least block it can take."""
    env = Env.numeric(mesh, dict(sizes))
    j = next(d for d, axes in enumerate(dres.axes) if a in axes)
    least = _least(dres, mesh, a, env, keep=frozenset({j}))
    # a last on its dimension (its blocks as they are: only the order of the axes on it differs), so that a
    # move over a alone takes it off; any route takes it off by a move over a set of axes with a in it
    least = least.with_axes(tuple(tuple(x for x in axes if x != a) + (a,) if d == j else axes
                                  for d, axes in enumerate(least.axes)))
    return (_cheapest(_moves(least, a, ("AllGather",), mesh), mesh, sizes, figures),
            _cheapest(_moves(least, a, ("AllToAll",), mesh), mesh, sizes, figures))


def _moves(layout: Layout, a: str, kinds: tuple, mesh) -> list:
    """The moves of ``kinds`` over the axis ``a`` alone from ``layout``."""
    return [m for k in kinds for m in rule(k).edges(layout, mesh) if m.axes == (a,)]


def _least(layout: Layout, mesh, a: str, env: Env, keep=frozenset()) -> Layout:
    """``layout`` sliced over every axis but ``a`` it can still take, each on the dimension that leaves the
    least block (dimensions in ``keep`` take none: the axis ``a`` must stay last on them)."""
    slicing = rule("Slice")
    while True:
        options = [m.after for m in slicing.edges(layout, mesh)
                   if m.axes[0] != a and not any(d in keep for d, (x, y) in enumerate(zip(m.before.axes, m.after.axes))
                                                 if x != y)]
        if not options:
            return layout
        layout = min(options, key=env.local_bytes)


def _cheapest(moves: list, mesh, sizes: tuple, figures: tuple) -> float:
    """The least link time of ``moves`` (0.0 where there is none: no floor is claimed), each priced as a
    plan's step is (:func:`~symcost.pricing.numeric_cost`)."""
    costs = [numeric_cost(m, mesh, sizes, False, figures) for m in moves]
    if not costs or any(c is None for c in costs):
        return 0.0
    env = Env.numeric(mesh)
    return min(float(totals([c], env, "none").t_comms) for c in costs)


def readers(program: Program) -> dict:
    """``{tensor: the statements that read it}`` (products and elementwise work, each once)."""
    out: dict = {}
    for st in program.statements:
        if isinstance(st, (Einsum, Apply)):
            for n in dict.fromkeys(t.name for t in st.operands):
                out.setdefault(n, []).append(st)
    return out


def shared(program: Program) -> frozenset:
    """Tensors that several statements read (their gradients add up, their layouts are reused)."""
    return frozenset(n for n, rs in readers(program).items() if len(rs) > 1)


def floored(space, subs: dict, *, backward: bool) -> dict:
    """``{statement: (its result, the operands whose gradients end in their own layouts: parameters, the
    program's inputs)}`` for the statements of ``subs`` whose gradients have a floor on the links
    (this module's): a product of two tensors whose result's gradient arrives in the result's layout (the
    result read by at most one statement, an einsum), at least one such operand; none without a backward
    pass (``backward`` False)."""
    if not backward:
        return {}
    prog = space.program
    read, names = readers(prog), shared(prog)
    made = Counter(st.result_name for st in prog.statements if isinstance(st, (Einsum, Apply)))
    params = {t.name for st in prog.statements if isinstance(st, Declaration) and st.kind == "param"
              for t in st.tensors}
    out = {}
    for at in subs:
        st = prog.statements[at]
        res, reads = st.result_name, {t.name for t in st.operands}
        pinned = isinstance(st, Einsum) and len(st.operands) == 2 and res not in names | reads and made[res] == 1 \
            and all(isinstance(r, Einsum) and len(r.operands) > 1 for r in read.get(res, ()))
        fixed = tuple(t.name for t in st.operands if t.name in params or t.name not in made)
        if pinned and fixed:
            out[at] = (res, fixed)
    return out
