"""Statements alike but for their tensors' names: one piece planned for them all.

A layer's key and value projections (``Kn = X *_D Wk``, ``Vn = X *_D Wv``), or its gate and up projections,
are one statement written twice with other names. Planned alone at the same splits of their tensors, they
have the same plan with the names changed, so the same resources: a search plans the piece once and reads
it for the others (:func:`key` is what they share).

What makes two statements alike is their program alone (:func:`~.pieces.alone`: the sizes, the parameters
they read with their layouts, the statement), written with each tensor's name replaced by its place among
the statement's names in sorted order. So the names correspond in the same order: nothing the engine
orders by name can order them differently. The engine's plans do not otherwise depend on names (a search
and a derivation give the same plan whatever the process's string hashing)::

    >>> from symcost.searching.space import Space
    >>> from symcost.searching.pieces import alone
    >>> sp = Space.of("param Wk[D, H], Wv[D, H]\\nK[B, H] = X[B, D] *_D Wk[D, H]\\n"
    ...               "V[B, H] = X[B, D] *_D Wv[D, H]", "X=4")
    >>> k, v = form(alone(sp, 1)), form(alone(sp, 2))
    >>> k.text == v.text, k.names
    (True, (('K', 't0'), ('Wk', 't1'), ('X', 't2')))
    >>> split = lambda out, w: ((out, ("H",)), (w, (None,)), ("X", (None,)))
    >>> key(k, split("K", "Wk")) == key(v, split("V", "Wv"))
    True

``tests/searching/test_alike.py`` holds the pieces read so equal, to the last bit, to those planned.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from ..notation import Apply, Declaration, Einsum, Program


@dataclass(frozen=True)
class Form:
    """A statement alone with its tensors renamed: ``text`` (its program so written) and ``names``
    (``(name, placeholder)`` pairs, in sorted order)."""

    text: str
    names: tuple[tuple[str, str], ...]

    @cached_property
    def _placeholders(self) -> dict:
        return dict(self.names)

    def rename(self, name: str) -> str:
        return self._placeholders.get(name, name)


def form(sub) -> Form:
    """The :class:`Form` of a statement's space alone (:func:`~.pieces.alone`)."""
    prog: Program = sub.program
    found: set = set()
    for st in prog.statements:
        found.update(t.name for t in getattr(st, "tensors", ()))
        if isinstance(st, (Einsum, Apply)) and st.output_name:
            found.add(st.output_name)
    names = {n: f"t{i}" for i, n in enumerate(sorted(found))}
    text = "\n".join(str(_renamed(st, names)) for st in prog.statements)
    return Form(text, tuple(names.items()))


def key(f: Form, splits: tuple, exact=True) -> tuple:
    """What a piece depends on, names aside: its statement's form, its splits (each open tensor's
    dimension per mesh axis, :func:`~.pieces.splits_of`) and whether it is exact (:func:`~.pieces.exactly`:
    True, False or its result and the operands whose gradients have a floor), each name as placed."""
    if isinstance(exact, tuple):
        res, fixed = exact
        exact = (f.rename(res), tuple(f.rename(n) for n in fixed))
    return f.text, tuple((f.rename(n), dims) for n, dims in splits), exact


def _renamed(st, names: dict):
    if isinstance(st, Declaration):
        return replace(st, tensors=tuple(replace(t, name=names[t.name]) for t in st.tensors))
    if isinstance(st, (Einsum, Apply)):
        out = replace(st, operands=tuple(replace(t, name=names[t.name]) for t in st.operands))
        if st.output is not None:
            out = replace(out, output=replace(st.output, name=names[st.output.name]))
        if st.output_name:
            out = replace(out, output_name=names[st.output_name])
        return out
    return st
