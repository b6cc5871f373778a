"""The moves between layouts, as a registry of rules (one module a kind).

    >>> from symcost.layout import Layout
    >>> from symcost.mesh import parse_mesh
    >>> a = Layout.of("A", "IJ", [("X",), ()])
    >>> [str(m) for m in moves_from(a, parse_mesh("X=4")) if m.kind == "AllGather"]
    ['AllGather_X(A[I_X, J]) -> A[I, J]']
    >>> rule("AllGather").transpose(Move("AllGather", ("X",), a, Layout.of("A", "IJ"))).signature()
    'ReduceScatter_X(dA[I, J]{U_X}) -> dA[I_X, J]'

Every kind is a frozen rule value (:class:`~.base.MoveRule`): its signature, the edges it adds to the
layout graph, V, its link time per link model, its transpose, its explanation, its numpy semantics (the
simulator runs them), its JAX lowering (export runs it) and its ring-model bytes (the XLA comparison).
To add a kind: write a module beside these, register its rule, import it below, and give it a test; the
parametrized tests over ``RULES`` (the simulator, the adjoint check) cover it at once.
"""
# registered in the order the layout search explores their edges (ties go to the earlier kind)
from . import all_gather, slice, all_to_all, permute, all_reduce, reduce_scatter  # noqa: F401,I001
from . import send, to_host, to_device  # noqa: F401,I001
from .base import RULES, Move, MoveRule, gradient
from .blocks import Grid
from ..errors import ShardingError


def rule(name: str) -> MoveRule:
    if name not in RULES:
        raise ShardingError(f"unknown move {name!r}; moves are {', '.join(RULES)}")
    return RULES[name]


def kinds(inserted_only: bool = False) -> tuple[str, ...]:
    """The move kinds, in the order their edges are explored."""
    return tuple(n for n, r in RULES.items() if r.inserted or not inserted_only)


def moves_from(layout, mesh, allowed=None):
    """Every move one step away from ``layout`` (the edges of the layout graph), of the ``allowed`` kinds."""
    for name, r in RULES.items():
        if r.inserted and (allowed is None or name in allowed):
            yield from r.edges(layout, mesh)


def written_moves(kind: MoveRule, axes: set, src, want, mesh) -> list[Move]:
    """The move a collective written in a program is, from ``src`` to ``want`` over ``axes``, or a Permute
    then that move when it works on a major axis (the Permute's reason says so: the program did not write
    it); [] when there is none."""
    for m in kind.edges(src, mesh):
        if set(m.axes) == axes and m.after == want:
            return [m]
    for p in rule("Permute").edges(src, mesh):
        for m in kind.edges(p.after, mesh):
            if set(m.axes) == axes and m.after == want:
                return [p, m]
    return []


__all__ = ["RULES", "Move", "MoveRule", "Grid", "gradient", "rule", "kinds", "moves_from", "written_moves"]
