"""Programs: the one way a program is planned, forward and backward (book Part 5).

    >>> plan = derive_program('''
    ...     param W[D_X, F]
    ...     Out[B_X, F] = In[B_X, D] *_D W[D_X, F]
    ... ''', mesh="X", backward=True)
    >>> for s in plan.collectives:
    ...     print(s.signature())
    AllGather_X(W[D_X, F]) -> W[D, F]
    AllGather_X(W[D_X, F]) -> W[D, F]
    ReduceScatter_X(dW[D, F]{U_X}) -> dW[D_X, F]

:func:`derive_program` binds the program (:mod:`symcost.binding`), plans it (:mod:`symcost.planner`),
derives the gradients (:mod:`symcost.backward`) and returns a :class:`~symcost.plan.Plan`;
:func:`graph` gives the program as a networkx graph of tensors.
"""
from __future__ import annotations

from dataclasses import replace
from functools import cached_property

from . import caching, ties
from .backward import REUSE, default_params, flagged, resolve_params
from .binding import bind
from .errors import SymcostError
from .explain import repeated_moves
from .layout import Layout, layout_from_ref
from .memory import memory_per_device
from .notation import Collective, Declaration, Program, Ranking, parse
from .alternatives import Alternative
from .plan import Plan
from .planner import plan_program
from .trace import Trace

__all__ = ["derive_program", "derive_tied", "declared", "graph", "REUSE"]


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
        out: str | None
        if isinstance(st, Collective):
            ins, out = [st.operand.name], st.output.name
        else:
            ins, out = [t.name for t in st.operands], st.result_name
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


def declared(text, mesh=None, dims=None, hw=None) -> tuple[dict[str, Layout], dict]:
    """The layouts the program's ``param`` statements declare, checked as a derivation checks them, and
    the bound mesh and sizes as ``{"mesh": ..., "sizes": ...}``: what the devices hold of each parameter,
    read without planning the program (a plan may gather a copy of a parameter for a step; the declared
    layout is the one that stays).

        >>> held, bound = declared("param W[D_X, F]\\nOut[B, F] = In[B, D] *_D W[D, F]", mesh="X=4")
        >>> held["W"].axes, bound["mesh"].axis("X").size
        ((('X',), ()), 4)
    """
    b = bind(text, mesh, dims, hw)
    out = {ref.name: layout_from_ref(ref, b.mesh, b.program.text, b.size_map)
           for st in b.program.statements if isinstance(st, Declaration) for ref in st.tensors}
    return out, {"mesh": b.mesh, "sizes": b.size_map}


def _plan_of(trace: Trace, expression: str, steps, overlap, objective) -> Plan:
    alts = tuple(Alternative(a, c, trace.mesh, trace.ranker.overlap, trace.ranker) for a, c in trace.alternatives)
    return Plan(expression, trace.mesh, tuple(steps), trace.bound.hardware, trace.bound.sizes, alts, overlap,
                trace.compute_dtype, objective, tuple(trace.known.values()),
                notes=trace.bound.notes + trace.notes + repeated_moves(steps, trace.mesh),
                ties=tuple((t.at, t.n) for t in trace.ties))


@caching.collector_paused()            # a derivation's values are freed by reference counting
def derive_program(text, mesh=None, dims=None, hw=None, *, backward: bool = False, reuse: str = "activations",
                   params=None, input_grads: bool = True, overlap=True, objective: str = "time",
                   moves=None, strict: bool = False, alternatives: bool = True,
                   efficiency: bool = False, choices=None, choose_achieved: bool = False) -> Plan:
    """Plan a program's forward pass and, with ``backward``, its gradients.

    ``reuse``: which forward gathers the backward pass may reuse: ``activations`` (default: activations
    are kept as the forward pass used them; weights are gathered again, as in the book's FSDP listing),
    ``all`` or ``none``. ``params``: names of the parameters (default: ``param`` declarations, else the
    inputs named W...). ``input_grads``: also derive the gradient of the program's input activations.
    ``strict``: a dimension that does not divide by its axes is an error instead of a padded block.
    ``alternatives``: keep the runner-up plans (False: the same plan, its runner-ups weighed but not
    explained or kept; for searches).
    ``choices``: ``{statement index: k}``, the k-th of an einsum's equally fast forward plans (default:
    with ``backward``, the one that makes the whole step fastest; else the first).
    ``efficiency``: price with achieved efficiency (the costs carry ``eta_math``, ``eta_hbm``, ``eta_vec``,
    ``eta_net_<kind>`` and ``T_net_<kind>``; the preset's ``[efficiency]`` table gives their numbers).
    ``choose_achieved`` (with ``efficiency``): also choose the plan at those figures -- the planner weighs
    each move and einsum with the preset's achieved figures and its per-kernel floor, through the same
    pricing as the plan's totals (``derive --efficiency``, ``search --efficiency`` and the serving models do;
    the training step model keeps the plan the ideal machine chooses, a run's layout being fixed by its
    parallelism).
    """
    plan = _derive(text, mesh, dims, hw, backward, reuse, params, input_grads, overlap, objective, moves,
                   strict, alternatives, choices, efficiency and choose_achieved)
    if not efficiency:
        return plan

    def achieved(steps):
        return tuple(s.achieved() for s in steps)
    alts = tuple(replace(a, steps=achieved(a.steps), chosen=achieved(a.chosen)) for a in plan.alternatives)
    return replace(plan, steps=achieved(plan.steps), alternatives=alts, efficient=True)


class _Planning:
    """One program bound and planned the way a derivation asks: its trace for given choices, the trace
    finished (forward steps, and the backward pass), and a finished trace as a :class:`Plan`."""

    def __init__(self, text, mesh, dims, hw, backward, reuse, params, input_grads, overlap, objective, moves,
                 strict, alternatives, efficiency):
        self.bound = bind(text, mesh, dims, hw)
        self.text, self.backward, self.reuse, self.params, self.input_grads = text, backward, reuse, params, input_grads
        self.overlap, self.objective, self.moves, self.strict = overlap, objective, moves, strict
        self.alternatives, self.efficiency = alternatives, efficiency

    @cached_property
    def expression(self) -> str:
        """The program as its plans show it: its one line as written, else its statements rendered (once: a
        derivation's tied plans share it)."""
        text = self.text
        return text.strip() if isinstance(text, str) and "\n" not in text.strip() else str(self.bound.program)

    def traced(self, choices=None, kept: bool | None = None) -> Trace:
        return plan_program(self.bound, overlap=self.overlap, objective=self.objective, moves=self.moves,
                            strict=self.strict, alternatives=self.alternatives if kept is None else kept,
                            choices=choices, efficiency=self.efficiency)

    def finished(self, trace) -> ties.Planned:
        if not self.backward:
            names = set(trace.param_layouts) or set(default_params(trace))
            return ties.Planned(trace, tuple(flagged(trace.steps, names)))
        return ties.planned(trace, resolve_params(trace, self.params), self.reuse, self.input_grads)

    def planned(self, choices=None) -> ties.Planned:
        return self.finished(self.traced(choices))

    def quick(self, choices=None) -> ties.Planned:
        return self.finished(self.traced(choices, False))

    def plan(self, best: ties.Planned, notes: tuple = ()) -> Plan:
        plan = _plan_of(best.trace, self.expression, best.steps, self.overlap, self.objective)
        if self.backward:
            memory = memory_per_device(plan, list(best.params), optimizer="adam", saved=tuple(best.saved.values()))
            plan = replace(plan, memory=tuple(memory.items()), residuals=tuple(best.saved.values()))
        return replace(plan, notes=plan.notes + notes) if notes else plan


def _derive(text, mesh, dims, hw, backward, reuse, params, input_grads, overlap, objective, moves, strict,
            alternatives, choices=None, efficiency: bool = False) -> Plan:
    p = _Planning(text, mesh, dims, hw, backward, reuse, params, input_grads, overlap, objective, moves, strict,
                  alternatives, efficiency)
    first = p.traced(choices)
    notes: tuple = ()
    if not (backward and first.ties and choices is None):
        best = p.finished(first)
    elif not alternatives:
        best, notes = ties.weighed(p.finished(first), p.planned, reuse, input_grads)
    else:   # weighed where each alternative is spliced in (a trace without runner-ups), then planned once
        weighed, notes = ties.weighed(p.quick(), p.quick, reuse, input_grads)
        best = p.planned({t.at: t.chosen for t in weighed.trace.ties})
    return p.plan(best, notes)


@caching.collector_paused()
def derive_tied(text, mesh=None, dims=None, hw=None, *, at: int, most: int, backward: bool = False,
                reuse: str = "activations", params=None, input_grads: bool = True, overlap=True,
                moves=None) -> list:
    """The plans ``derive_program(text, ..., choices={at: k}, alternatives=False)`` gives for k = 0, 1, ...
    of statement ``at``'s equally fast forward plans, at most ``most`` of them (one where it has no such
    choice). Each is that plan; the k-th is not planned again where it reaches the layout the first plan
    reaches (:func:`symcost.ties.alternative`: its steps spliced in, its backward pass resumed). A k the
    engine refuses is None; the first refused raises as :func:`derive_program` does. The other arguments
    are :func:`derive_program`'s."""
    p = _Planning(text, mesh, dims, hw, backward, reuse, params, input_grads, overlap, "time", moves, False, False,
                  False)
    first = p.traced({at: 0})
    best = p.finished(first)
    out: list = [p.plan(best)]
    n = dict((t.at, t.n) for t in first.ties).get(at, 1)
    reads: dict = {}            # what the first plan's uses read, kept across its alternatives
    for k in range(1, min(n, most)):
        try:
            if backward:
                other = ties.alternative(best, at, k, reuse, input_grads, reads) or p.planned({at: k})
            else:
                spliced = ties.spliced(first, at, k)
                other = p.finished(spliced if spliced is not None else p.traced({at: k}))
        except SymcostError:
            out.append(None)
            continue
        out.append(p.plan(other))
    return out
