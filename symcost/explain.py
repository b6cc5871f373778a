"""Why each step of a plan is there: the sentence ``derive`` prints under every step.

    >>> from symcost.layout import Layout
    >>> from symcost.einsum import LocalEinsum
    >>> a, b = Layout.of("A", "IJ", [(), ("X",)]), Layout.of("B", "JK", [("X",), ()])
    >>> c = Layout("C", ("I", "K"), ((), ()), frozenset({"X"}))
    >>> explain_einsum(LocalEinsum((a, b), c, ("I", "J", "K"), ((), ("X",), ())))
    'local einsum; splits J over X; partial sums stay unreduced because J is contracted over X'
"""
from __future__ import annotations

from . import caching
from .collectives import Move
from .einsum import LocalEinsum
from .layout import Layout
from .notation import format_axes
from .trace import Step


@caching.memoize(maxsize=4096)
def explain_einsum(e: LocalEinsum) -> str:
    """Kept: the routes a search explains share their einsums."""
    split = [f"{d} over {format_axes(ax)[1:]}" for d, ax in zip(e.dims, e.axes) if ax]
    parts = ["local einsum", "splits " + ", ".join(split) if split else "every device does the whole product"]
    unred = [f"{d} is contracted over {format_axes(ax)[1:]}" for d, ax in zip(e.dims, e.axes)
             if ax and d in e.contracted]
    if unred:
        parts.append("partial sums stay unreduced because " + " and ".join(unred))
    return "; ".join(parts)


@caching.memoize(maxsize=4096)
def explain_move(m: Move, nxt: LocalEinsum | None, target, mesh) -> str:
    if nxt is not None and m.before.name in {t.name for t in nxt.inputs}:
        use = next(t for t in nxt.inputs if t.name == m.before.name)
        lead = f"{m.before.name} must be {_rendered(use, mesh)} for the local einsum"
    elif isinstance(target, Layout):
        lead = f"the result must be {_rendered(target, mesh)}"
    else:
        lead = "the result is reduced"
    return f"{lead}: {_rule_explained(m, mesh)}"


@caching.memoize(maxsize=4096)
def _rendered(layout: Layout, mesh) -> str:
    """A layout as written (kept: the moves of a search's routes are there for the same few layouts)."""
    return layout.render(mesh)


@caching.memoize(maxsize=4096)
def _rule_explained(m: Move, mesh) -> str:
    """What a move does, in words (kept: a move recurs in many routes, each explained whole)."""
    return m.rule.explain(m, mesh)


def explained_steps(ops, mesh, target, phase: str = "forward", sizes=()) -> tuple[Step, ...]:
    """Steps of a route the rewriter chose, each with the reason it is there."""
    return _explained_steps(tuple(ops), mesh, target, phase, sizes)


@caching.memoize(maxsize=4096)
def _explained_steps(ops: tuple, mesh, target, phase: str, sizes: tuple) -> tuple[Step, ...]:
    """Kept: a search's candidates, and the tied plans each weighs, take the same routes again (the steps
    are values, made once)."""
    return tuple(Step(op, mesh, phase, why, sizes=sizes) for op, why in zip(ops, _reasons(ops, mesh, target)))


def _reasons(ops: tuple, mesh, target) -> tuple[str, ...]:
    """Why each operation of a route is there (not kept: :func:`_explained_steps`, its one caller, keeps
    its answer under a wider key, so no route was ever explained here twice)."""
    einsum, move = caching.resolved(explain_einsum), caching.resolved(explain_move)
    out, nxt = [], None          # read from the end: the einsum each move is there for comes after it
    for op in reversed(ops):
        if isinstance(op, LocalEinsum):
            out.append(einsum(op))
            nxt = op
        else:
            out.append(move(op, nxt, target, mesh))
    return tuple(reversed(out))


def final_layout(ops) -> Layout:
    last = ops[-1]
    return last.output if isinstance(last, LocalEinsum) else last.after


def repeated_moves(steps, mesh) -> tuple[str, ...]:
    """A note for each move the forward pass makes twice from the same layout to the same layout (a tensor
    two statements read gathered, each gathering it): the engine does not keep a copy one statement made
    for the next (the backward pass reuses the forward's, ``--reuse``), so the plan pays each; a statement
    that makes the copy once, before both, lets every later use read it."""
    seen: dict = {}
    notes = []
    for s in steps:
        if s.phase != "forward" or s.is_compute or not s.is_collective:
            continue
        key = (s.op.before, s.op.after)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] == 2:
            before, after = _rendered(s.op.before, mesh), _rendered(s.op.after, mesh)
            notes.append(f"{s.op.before.name} is moved from {before} to {after} more than once ({s.label}); "
                         f"`{after} = {before}` written once before its uses would move it once")
    return tuple(notes)
