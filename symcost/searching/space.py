"""The space a search walks: every assignment of mesh axes to the dimensions a program leaves open.

    >>> sp = Space.of('''
    ...     param W_in[D, F], W_out[F, D]
    ...     Out[B, D] = In[B, D] *_D W_in[D, F] *_F W_out[F, D]
    ... ''', "X=4,Y=4")
    >>> sp.groups
    (('param', ('D', 'F')), ('activation', ('B', 'D')))
    >>> sp.assignments, sp.size, len(list(sp.candidates())) # 9 roles an axis; X and Y interchangeable
    (81, 45, 45)

A tensor is *open* when it is written without axes where it is defined: a declared parameter, a program
input, an einsum's written output. The search assigns each mesh axis a *role*: the dimension it splits in
every open parameter (or none) and the dimension it splits in every open activation (or none). A dimension
name is split the same way in every open tensor of its group (``W_in[D_X, F_Y]`` goes with
``W_out[F_Y, D_X]``, ``In[B_X, D_Y]`` with ``Out[B_X, D_Y]``: a layer's output is the next layer's input),
and a dimension split over several axes takes them in mesh order. Axes with the same size, link kind, link
count, wraparound and slice edges are interchangeable: assignments that differ only by exchanging them are one candidate
(symmetric duplicates collapsed).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from math import comb

from .. import caching
from ..binding import bind
from ..errors import UsageError
from ..notation import Apply, Collective, Declaration, DimRef, Einsum, Program, TensorRef, format_axes, parse

GROUPS = ("param", "activation")


@dataclass(frozen=True)
class Candidate:
    """One sharding: for each mesh axis (in mesh order), the dimension it splits in the open parameters
    and in the open activations (None: that group is replicated over the axis)."""

    roles: tuple[tuple[str | None, str | None], ...]
    axes: tuple[str, ...]

    def split(self, group: str) -> dict[str, tuple[str, ...]]:
        """``{dimension: axes}`` for a group (``param`` or ``activation``), axes in mesh order."""
        i = GROUPS.index(group)
        out: dict[str, tuple[str, ...]] = {}
        for a, r in zip(self.axes, self.roles):
            if r[i] is not None:
                out[r[i]] = out.get(r[i], ()) + (a,)
        return out

    def describe(self, batch: frozenset, activation_dims=frozenset(), params: bool = True) -> str:
        """The book's names for what each axis does: FSDP (splits the batch and the weights), DP (the batch
        only), TP (the weights, and either the activations' model dimension or a weight dimension no
        activation has: Megatron's hidden F, activations replicated), weights (a weight dimension the
        activations have, the activations not split), activations (their model dimension only), replicated
        (no tensor the program gives is split over the axis; its plan may still split the work over it, slicing
        what is replicated, as the plan's steps show).
        Without open parameters (``params`` False) there is no batch to tell from a weight: each axis is
        named by the dimension it splits (``I over X, K over Y``)."""
        kinds: dict[str, list[str]] = {}
        if not params:
            for a, (_, act) in zip(self.axes, self.roles):
                kinds.setdefault(act or "replicated", []).append(a)
            named = [k for k in kinds if k != "replicated"] + (["replicated"] if "replicated" in kinds else [])
            return ", ".join(f"{k} over {_axes(kinds[k])}" for k in named)
        for a, (p, act) in zip(self.axes, self.roles):
            on_batch = act is not None and act in batch
            kind = ("FSDP" if on_batch and p else "DP" if on_batch else
                    "TP" if p and (act or p not in activation_dims) else
                    "weights" if p else "activations" if act else "replicated")
            kinds.setdefault(kind, []).append(a)
        return ", ".join(f"{k} over {_axes(kinds[k])}" for k in KINDS if k in kinds)


KINDS = ("FSDP", "DP", "TP", "weights", "activations", "replicated")


def _axes(names) -> str:
    return "".join(names) if all(len(a) == 1 for a in names) else ",".join(names)


@dataclass(frozen=True)
class Space:
    """A program, its mesh, and the open dimensions of each group."""

    program: Program
    mesh: object
    groups: tuple[tuple[str, tuple[str, ...]], ...]
    open_tensors: frozenset       # (statement index, tensor position) of the open tensors
    classes: tuple[tuple[str, ...], ...]   # interchangeable axes, in mesh order
    batch: frozenset              # activation dimensions no parameter has
    hardware: object = None       # the preset the candidates are priced with

    @property
    def has_params(self) -> bool:
        """Does the search choose any parameter's layout?"""
        return any(g == "param" for g, _ in self.groups)

    @property
    def activation_dims(self) -> frozenset:
        return frozenset(d for g, dims in self.groups if g == "activation" for d in dims)

    @classmethod
    def of(cls, text, mesh, hw=None, dims=None) -> "Space":
        """The space of ``text`` on ``mesh``; an axis without a size in the mesh may take it from ``dims``
        (its costs then stay functions of it, and it is interchangeable with no other axis)."""
        prog = text if isinstance(text, Program) else parse(text)
        bound = bind(prog, mesh, None, hw)
        m = bound.mesh
        sized = dict(dims or {})
        if not m.axes or any(a.size is None and a.name not in sized for a in m.axes):
            raise UsageError("search needs every mesh axis with a size, e.g. --mesh X=16,Y=16,Z=16")
        opened, dims = _open(prog)
        groups = tuple((g, tuple(dims[g])) for g in GROUPS if dims[g])
        if not groups:
            raise UsageError("nothing to search: every tensor of the program is written with its axes; write the "
                             "parameters and the input without axes (W_in[D, F]) to let the search choose them")
        key = {}
        for a in m.axes:
            key.setdefault((a.size or a.name, a.kind, a.links, a.wraparound, a.edges), []).append(a.name)
        classes = tuple(tuple(v) for v in key.values())
        batch = frozenset(dims["activation"]) - frozenset(dims["param"])
        return cls(prog, m, groups, opened, classes, batch, bound.hardware)

    def dimensions(self, sized: bool = True) -> list[str]:
        """The program's dimension names, in order of appearance (``sized`` False: those its text gives no
        size)."""
        out: list[str] = []
        for st in self.program.statements:
            for t in getattr(st, "tensors", ()):
                for d in t.dims:
                    if not d.name.isdigit() and (sized or d.size is None) and d.name not in out:
                        out.append(d.name)
        return out

    def unbound(self, sizes) -> list[str]:
        """The program's dimension names without a size in ``sizes``, in order of appearance (a search
        ranks by numbers: each needs one)."""
        return [d for d in self.dimensions(sized=False) if d not in sizes]

    @property
    def roles(self) -> tuple:
        """Every role an axis can take: a dimension (or None) in each group."""
        per = {g: (None,) + d for g, d in self.groups}
        return tuple(itertools.product(per.get("param", (None,)), per.get("activation", (None,))))

    @property
    def assignments(self) -> int:
        """Assignments before symmetric duplicates are collapsed."""
        return len(self.roles) ** len(self.mesh.axes)

    @property
    def size(self) -> int:
        """Candidates after collapsing: multisets of roles within each class of interchangeable axes."""
        n, r = 1, len(self.roles)
        for c in self.classes:
            n *= comb(r + len(c) - 1, len(c))
        return n

    def candidates(self):
        """Every candidate, once (a generator; :attr:`size` of them)."""
        order = {a.name: i for i, a in enumerate(self.mesh.axes)}
        per_class = [itertools.combinations_with_replacement(range(len(self.roles)), len(c)) for c in self.classes]
        names = [a for c in self.classes for a in c]
        # the axes in mesh order: the same places of the classes' picks for every candidate
        places = sorted(range(len(names)), key=lambda i: order[names[i]])
        axes, roles = tuple(names[i] for i in places), self.roles
        for choice in itertools.product(*[list(p) for p in per_class]):
            flat = [i for pick in choice for i in pick]
            yield Candidate(tuple([roles[flat[i]] for i in places]), axes)

    def program_for(self, cand: Candidate) -> Program:
        """The program with the candidate's axes written on its open tensors (each statement and its line
        written once for all the candidates that give its open tensors the same axes)."""
        splits = {g: cand.split(g) for g in GROUPS}
        statements = []
        for i, st in enumerate(self.program.statements):
            if isinstance(st, Declaration):
                tensors = tuple(_with(t, splits["param"]) if (i, j) in self.open_tensors else t
                                for j, t in enumerate(st.tensors))
                statements.append(_declared(st, tensors))
            elif isinstance(st, (Einsum, Apply)):      # a product, or elementwise work: activations
                ops = tuple(_with(t, splits["activation"]) if (i, j) in self.open_tensors else t
                            for j, t in enumerate(st.operands))
                out = st.output
                if out is not None and (i, len(st.operands)) in self.open_tensors:
                    out = _with(out, splits["activation"])
                statements.append(_einsum(st, ops, out))
            else:
                statements.append(st)
        return Program(tuple(statements), "\n".join(_line(st) for st in statements))

    def layouts(self, cand) -> dict[str, str]:
        """``{tensor: its written layout}`` for the open tensors (each written once, not the whole program)."""
        out: dict[str, str] = {}
        for i, j in sorted(self.open_tensors):
            st = self.program.statements[i]
            t = st.tensors[j]
            if t.name not in out:
                out[t.name] = _line(self.written(cand, t, "param" if isinstance(st, Declaration) else "activation"))
        return out

    def written(self, cand, t: TensorRef, group: str) -> TensorRef:
        """An open tensor of ``group`` with the axes the candidate gives it."""
        return _with(t, cand.split(group))


def _with(t: TensorRef, split: dict) -> TensorRef:
    """``t`` with the axes ``split`` gives its dimensions (one object for every candidate that gives the same)."""
    return _written(t, tuple(split.get(d.name, ()) for d in t.dims))


@caching.memoize(maxsize=4096)
def _written(t: TensorRef, axes: tuple) -> TensorRef:
    return replace(t, dims=tuple(d if d.size is not None else DimRef(d.name, a, None, d.span)
                                 for d, a in zip(t.dims, axes)))


@caching.memoize(maxsize=4096)
def _declared(st: Declaration, tensors: tuple) -> Declaration:
    return replace(st, tensors=tensors)


@caching.memoize(maxsize=4096)
def _einsum(st: Einsum | Apply, operands: tuple, output) -> Einsum | Apply:
    return replace(st, operands=operands, output=output)


@caching.memoize(maxsize=8192)
def _line(record) -> str:
    """A statement's (or a tensor's) text: the candidates of a search share most of their statements."""
    return str(record)


def _open(prog: Program):
    """The open tensors (statement, position) and the dimension names of each group, in order of appearance."""
    opened = set()
    dims: dict[str, list] = {g: [] for g in GROUPS}
    for i, j, t, group in _first_appearances(prog):
        if t.annotated:                 # written with its layout: not the search's to choose
            continue
        opened.add((i, j))
        for d in t.dims:
            if d.size is None and d.name not in dims[group]:
                dims[group].append(d.name)
    return frozenset(opened), dims


def _first_appearances(prog: Program):
    """(statement, position, tensor, group) where each tensor first appears: parameters where they are
    declared, activations where a statement first reads or writes them; a collective's tensors are written
    with their layouts, so they only count as seen."""
    params = {t.name for s in prog.statements if isinstance(s, Declaration) for t in s.tensors}
    seen: set[str] = set()
    for i, st in enumerate(prog.statements):
        if isinstance(st, Declaration):
            for j, t in enumerate(st.tensors):
                seen.add(t.name)
                yield i, j, t, "param"
        elif isinstance(st, (Einsum, Apply)):     # elementwise work's tensors are activations too
            for j, t in enumerate(st.operands):
                if t.name not in seen and t.name not in params:
                    seen.add(t.name)
                    yield i, j, t, "activation"
            if st.output is not None and st.output.name not in seen:
                seen.add(st.output.name)
                yield i, len(st.operands), st.output, "activation"
            elif st.output_name:
                seen.add(st.output_name)
        elif isinstance(st, Collective):
            seen.update({st.operand.name, st.output.name})


__all__ = ["Space", "Candidate", "GROUPS", "format_axes"]
