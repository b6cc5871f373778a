"""Equally fast forward plans, weighed with the backward pass.

An einsum can have several forward plans that are equally fast (the same moves over other axes, the
local product on other shards). Which one the forward pass takes fixes the layouts the backward pass
reads, so with ``backward`` each is weighed by the whole step it makes, at the sizes plans are ranked at;
einsums are taken in program order, each with the choices before it settled.

An alternative that reaches the layout the first plan reaches (the usual case) changes nothing else in
the forward pass, and nothing the backward pass does for the statements after its einsum: it is the
trace with that einsum's steps exchanged (:func:`spliced`), and its backward pass resumes where the
statements after it left off (:func:`symcost.backward.resumed`); where it reaches, below its einsum, the
state the pass it varies had there, the rest is that pass's (:class:`symcost.backward.Follows`: the same
gradients and layouts at hand give the same steps). Any other alternative is planned again
from the start. Either way it is the plan that ``choices`` would give (a test holds the two equal).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import NamedTuple

from .backward import Follows, flagged, resumed
from .einsum import LocalEinsum
from .explain import explained_steps, final_layout
from .printers.text import fmt_seconds
from .trace import Tie, Trace, Use


class Planned(NamedTuple):
    """A program planned, before it is a :class:`~symcost.plan.Plan`: the trace, its forward steps (marked
    on or off the critical path) and backward steps, the parameters, the activations the backward pass
    reads, and where the backward pass stood at the end of each tie's uses (``{use index: State}``)."""

    trace: Trace
    forward: tuple
    backward: tuple = ()
    params: Mapping = MappingProxyType({})     # read-only defaults: a NamedTuple's defaults are shared
    saved: Mapping = MappingProxyType({})
    states: Mapping = MappingProxyType({})

    @property
    def steps(self) -> list:
        return list(self.forward + self.backward)


def planned(trace: Trace, params: dict, reuse: str, input_grads: bool) -> Planned:
    """The forward steps and the whole backward pass of a trace."""
    steps, saved, states = resumed(trace, params, reuse, input_grads, marks=_marks(trace))
    return Planned(trace, tuple(flagged(trace.steps, params)), tuple(steps), params, saved, states)


def spliced(trace: Trace, at: int, k: int) -> Trace | None:
    """The trace with the ``k``-th of the tied plans of statement ``at`` taken instead of the one it took;
    None when that plan reaches another layout (the statements after it would be planned from there)."""
    tie = _tie(trace, at)
    took, other = tie.plans[tie.chosen], tie.plans[k]
    if trace.alternatives or final_layout(other.steps) != final_layout(took.steps):
        return None
    steps = explained_steps(other.steps, trace.mesh, tie.target, sizes=trace.bound.sizes)
    uses = [Use(op, tie.line) for op in other.steps if isinstance(op, LocalEinsum)]
    (s0, s1), (u0, u1) = tie.steps, tie.uses
    if len(uses) != u1 - u0:
        return None
    shift = len(steps) - (s1 - s0)     # equally fast plans may take more or fewer steps
    ties = tuple(t._replace(chosen=k, steps=(s0, s0 + len(steps))) if t.at == at else
                 t._replace(steps=(t.steps[0] + shift, t.steps[1] + shift)) if t.steps[0] >= s1 else t
                 for t in trace.ties)
    return replace(trace, steps=trace.steps[:s0] + tuple(steps) + trace.steps[s1:],
                   uses=trace.uses[:u0] + tuple(uses) + trace.uses[u1:], ties=ties)


def weighed(best: Planned, replan, reuse: str, input_grads: bool) -> tuple[Planned, tuple[str, ...]]:
    """The fastest whole step over the ties' choices (``replan(choices)``: the program planned with
    ``{statement: k}``), and a note for each tie whose choices differ."""
    choices: dict[int, int] = {}
    priced: dict = {}     # id(step) -> (step, its ranked cost): the alternatives share most of their steps
    reads: dict = {}      # what the uses below each index of ``best`` name (:class:`Follows`), while it is best
    score = rank(best, priced)
    notes = []
    while (todo := [t for t in best.trace.ties if t.at not in choices]):
        tie = todo[0]
        choices[tie.at] = 0
        scores = [score]
        for k in range(1, tie.n):
            other = _alternative(best, tie.at, k, reuse, input_grads, reads) or replan({**choices, tie.at: k})
            scores.append(rank(other, priced))
            if scores[-1] < score:
                best, score, choices[tie.at], reads = other, scores[-1], k, {}
        if len({s[0] for s in scores}) > 1:
            fastest, slowest = fmt_seconds(min(scores)[0]), fmt_seconds(max(scores)[0])
            notes.append(f"line {tie.line}: {tie.n} forward plans are equally fast; the one chosen makes the step "
                         f"with the backward pass fastest ({fastest}, the others up to {slowest})")
    return best, tuple(notes)


def alternative(best: Planned, at: int, k: int, reuse: str, input_grads: bool, reads: dict | None = None) \
        -> Planned | None:
    """The ``k``-th of statement ``at``'s equally fast forward plans taken instead of the one ``best`` took,
    its backward pass resumed where the statements after it left off; None where it reaches another layout
    (then plan it again with ``choices``). ``reads``: kept across ``best``'s alternatives."""
    return _alternative(best, at, k, reuse, input_grads, reads)


def _alternative(best: Planned, at: int, k: int, reuse: str, input_grads: bool,
                 reads: dict | None = None) -> Planned | None:
    """The ``k``-th plan of statement ``at`` taken instead of the one ``best`` took (None: plan it again);
    ``reads``: :class:`Follows`'s read sets of ``best``'s uses, kept across its alternatives."""
    trace = spliced(best.trace, at, k)
    if trace is None:
        return None
    took = _tie(best.trace, at)
    (s0, s1), end, taken = took.steps, took.uses[1], _tie(trace, at).steps[1]
    forward = best.forward[:s0] + tuple(flagged(trace.steps[s0:taken], best.params)) + best.forward[s1:]
    u0 = took.uses[0]
    reads = {} if reads is None else reads
    follows = (Follows(u0, best.trace.uses, best.states, best.backward, best.saved, reads)
               if _names(trace.uses[u0:end]) == _names(best.trace.uses[u0:end]) else None)
    steps, saved, states = resumed(trace, best.params, reuse, input_grads, start=(end, best.states[end]),
                                   marks=_marks(trace), follows=follows)
    kept = {i: s for i, s in best.states.items() if i >= end}
    return Planned(trace, forward, tuple(steps), best.params, saved, {**kept, **states})


def _tie(trace: Trace, at: int) -> Tie:
    return next(t for t in trace.ties if t.at == at)


def _marks(trace: Trace) -> frozenset:
    """Where the backward pass keeps its state: at each tie's uses' end (an alternative resumes there) and
    start (an alternative that reaches the same state there joins the pass it varies)."""
    return frozenset(i for t in trace.ties for i in t.uses)


def _names(uses) -> list:
    """The tensors each use reads and writes (an alternative that keeps them keeps which gradients the
    backward pass asks for)."""
    return [(tuple(t.name for t in u.op.inputs), u.op.output.name) for u in uses]


def rank(planned: Planned, priced: dict | None = None) -> tuple[float, float]:
    """A whole plan's objective at the ranking sizes, then its communication time (of two equally fast
    steps, the one that leaves the links more room); rounded as the chain planner rounds its own.
    ``priced``: ``{id(step): (step, cost)}`` kept across the plans one weighing ranks (each step is held
    there, so its id is not reused), each step's cost looked up once."""
    ranker = planned.trace.ranker
    steps = planned.forward + planned.backward
    if priced is None:
        costs = [s.ranked(ranker) for s in steps]
    else:
        costs = []
        for s in steps:
            got = priced.get(id(s))
            if got is None:
                got = priced[id(s)] = (s, s.ranked(ranker))
            costs.append(got[1])
    t = ranker.totals_of(costs)
    return float(f"{ranker.objective_of(t):.9g}"), float(f"{t.t_comms:.9g}")
