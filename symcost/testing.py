"""Hypothesis strategies for random sharded programs (for symcost's tests and for yours).

    >>> from hypothesis import given
    >>> from symcost.testing import einsum_cases
    >>> @given(einsum_cases())
    ... def test_plans_compute_the_einsum(case):
    ...     text, mesh, sizes = case
    ...     ...

Every case is valid by construction: each mesh axis shards at most one dimension of a tensor, every
dimension divides by its axes (unless ``uneven`` asks for padded blocks), and a requested output layout is
reachable.
"""
from __future__ import annotations

import math

from .notation import format_tensor

try:
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    st = None  # type: ignore[assignment]

AXES = ("X", "Y", "Z")
DIMS = ("I", "J", "K", "L")


def _fmt(name, dims, axes, unreduced=()):
    return format_tensor(name, dims, axes, unreduced)


def meshes(max_axes: int = 3, max_devices: int = 16):
    """(names, sizes): 1 to ``max_axes`` axes of 1 to 4 devices, at most ``max_devices`` in all."""
    @st.composite
    def build(draw):
        n = draw(st.integers(1, max_axes))
        sizes = []
        for _ in range(n):
            room = max_devices // max(1, math.prod(sizes))
            sizes.append(draw(st.integers(1, max(1, min(4, room)))))
        return AXES[:n], tuple(sizes)
    return build()


class _Made:
    """The strategies one case generator draws from, each made once and kept by it: hypothesis validates a
    strategy the first time it is drawn from, so one made again at every draw (``st.sampled_from(dims)``
    with the dimensions drawn before) was validated at every draw, about half of drawing a random layer."""

    def __init__(self) -> None:
        self._kept: dict = {}

    def _once(self, key, make):
        got = self._kept.get(key)
        if got is None:
            got = self._kept[key] = make()
        return got

    def pick(self, draw, items):
        """One of ``items`` (``st.sampled_from``)."""
        items = tuple(items)
        return draw(self._once(("pick", items), lambda: st.sampled_from(items)))

    def order(self, draw, items) -> tuple:
        """``items`` in a random order (``st.permutations``)."""
        items = tuple(items)
        return tuple(draw(self._once(("order", items), lambda: st.permutations(items))))

    def some(self, draw, items, min_size: int = 0, max_size: int | None = None) -> tuple:
        """Distinct ``items``, in the order drawn (``st.lists(st.sampled_from(items), unique=True)``)."""
        items = tuple(items)
        key = ("some", items, min_size, max_size)
        return tuple(draw(self._once(key, lambda: st.lists(st.sampled_from(items), min_size=min_size,
                                                           max_size=max_size, unique=True))))


def _layout(draw, dims, axes, allow_unreduced, made: _Made):
    """Each axis to one dimension, to the unreduced set, or to nothing; random order within a dim."""
    per: dict = {d: [] for d in dims}
    unreduced = []
    for a in axes:
        ok_u = allow_unreduced is True or (not isinstance(allow_unreduced, bool) and a in allow_unreduced)
        choices = [None] + list(dims) + (["U"] if ok_u else [])
        c = made.pick(draw, choices)
        if c == "U":
            unreduced.append(a)
        elif c is not None:
            per[c].append(a)
    out = []
    for d in dims:
        out.append(made.order(draw, per[d]) if per[d] else ())
    return tuple(out), tuple(unreduced)


def _sizes(draw, dims, mesh_sizes, uneven: bool = False):
    base = math.prod(mesh_sizes)
    if uneven:   # any size from 1 up: most will not divide by the axes that split them (padded blocks)
        return {d: draw(st.integers(1, 2 * base + 1)) for d in dims}
    return {d: base * draw(st.integers(1, 2)) for d in dims}


def _mesh_text(names, sizes):
    return ",".join(f"{n}={s}" for n, s in zip(names, sizes))


def einsum_cases(max_axes: int = 3, oracle: bool = False, uneven: bool = False):
    """(program text, mesh text, sizes) of a random binary einsum with random layouts; with ``oracle``, a
    fourth item: the numpy subscripts of what it computes (``'ij,jk->ik'``), from the dimensions drawn;
    with ``uneven``, sizes that need not divide by their axes (padded blocks)."""
    mesh_cases, made = meshes(max_axes), _Made()      # made once: see _Made

    @st.composite
    def build(draw):
        names, msizes = draw(mesh_cases)
        pool = made.some(draw, DIMS, 1, 4)
        a_dims = made.some(draw, pool, 1, len(pool))
        b_dims = made.some(draw, pool, 1, len(pool))
        union = list(dict.fromkeys(a_dims + b_dims))
        out_dims = made.order(draw, made.some(draw, union, 0, len(union)))
        unreduced_on = made.pick(draw, ("", "A", "B"))
        a_axes, a_u = _layout(draw, a_dims, names, unreduced_on == "A", made)
        b_axes, b_u = _layout(draw, b_dims, names, unreduced_on == "B", made)
        text = f"{_fmt('A', a_dims, a_axes, a_u)} * {_fmt('B', b_dims, b_axes, b_u)}"
        summed = set(union) - set(out_dims)
        if draw(st.booleans()):
            o_axes, o_u = _layout(draw, out_dims, names, True if summed else set(a_u) | set(b_u), made)
            text += " -> " + _fmt("C", out_dims, o_axes, o_u)
        elif out_dims != tuple(d for d in union if d not in (set(a_dims) & set(b_dims))):
            text += " -> " + _fmt("C", out_dims, [()] * len(out_dims))
        case = (text, _mesh_text(names, msizes), _sizes(draw, union, msizes, uneven))
        return case + (_subscripts([a_dims, b_dims], out_dims),) if oracle else case
    return build()


def _subscripts(operands, out) -> str:
    letters = {d: chr(97 + i) for i, d in enumerate(DIMS)}
    return ",".join("".join(letters[d] for d in t) for t in operands) + "->" + "".join(letters[d] for d in out)


def chain_cases(max_axes: int = 2):
    """(text, mesh, sizes) of a three-operand chain ``A[I, J] *_J B[J, K] *_K C[K, L] -> Out[I, L]``
    with random layouts everywhere."""
    mesh_cases, made = meshes(max_axes, 8), _Made()     # made once: see _Made

    @st.composite
    def build(draw):
        names, msizes = draw(mesh_cases)
        shapes = [("A", ("I", "J")), ("B", ("J", "K")), ("C", ("K", "L"))]
        parts = []
        for n, dims in shapes:
            axes, _ = _layout(draw, dims, names, False, made)
            parts.append(_fmt(n, dims, axes))
        o_axes, _ = _layout(draw, ("I", "L"), names, False, made)
        text = f"{parts[0]} *_J {parts[1]} *_K {parts[2]} -> {_fmt('Out', ('I', 'L'), o_axes)}"
        return text, _mesh_text(names, msizes), _sizes(draw, ("I", "J", "K", "L"), msizes)
    return build()


def reshard_cases(max_axes: int = 3, uneven: bool = False):
    """(text, mesh, sizes) of ``A[...] -> A[...]`` between two random layouts (sizes that need not divide
    with ``uneven``)."""
    mesh_cases, made = meshes(max_axes), _Made()      # made once: see _Made

    @st.composite
    def build(draw):
        names, msizes = draw(mesh_cases)
        dims = made.some(draw, DIMS, 1, 3)
        a_axes, a_u = _layout(draw, dims, names, True, made)
        keep = tuple(u for u in a_u if draw(st.booleans()))
        free = [a for a in names if a not in keep]
        b_axes, _ = _layout(draw, dims, free, False, made)
        text = f"{_fmt('A', dims, a_axes, a_u)} -> {_fmt('A', dims, b_axes, keep)}"
        return text, _mesh_text(names, msizes), _sizes(draw, dims, msizes, uneven)
    return build()


#: elementwise work a random layer may put after a product (``None``: none)
_ELEMENTWISE = (None, "GeLU", "SiLU", "ReLU", "LayerNorm", "RMSNorm", "Softmax", "Dropout", "Add")


def training_cases(max_axes: int = 2, max_statements: int = 3):
    """(text, mesh, sizes) of a random layer to train: ``In`` through 1 to ``max_statements`` products with
    declared parameters ``W1, W2, ...``, each product possibly followed by elementwise work (an activation,
    a norm or softmax over one of its dimensions, dropout, or a residual add of ``In``), every tensor in a
    random layout. Each dimension of a product's operands is kept or contracted by both (no broadcasts),
    so every tensor has a gradient; sizes divide by the device count."""
    mesh_cases, made = meshes(max_axes, 8), _Made()     # made once: see _Made

    @st.composite
    def build(draw):
        names, msizes = draw(mesh_cases)
        cur = made.some(draw, DIMS, 1, 3)
        first = cur
        lines, params = [], []
        src = _fmt("In", cur, _layout(draw, cur, names, False, made)[0])
        n = draw(st.integers(1, max_statements))
        for k in range(1, n + 1):
            shared = made.some(draw, cur, 1, len(cur))
            new = [d for d in DIMS if d not in cur]
            w_dims = shared + (made.some(draw, new, 0, 1) if new else ())
            w_dims = made.order(draw, w_dims)
            union = list(dict.fromkeys(cur + w_dims))
            contract = [d for d in shared if draw(st.booleans())]
            if len(contract) == len(union):
                contract = contract[1:]
            out = tuple(d for d in union if d not in contract)
            if set(out) == set(first) and draw(st.booleans()):
                out = first                                   # laid out as the input: room for a residual add
            else:
                out = made.order(draw, out)
            w = _fmt(f"W{k}", w_dims, _layout(draw, w_dims, names, False, made)[0])
            params.append(w)
            kind = made.pick(draw, _ELEMENTWISE)
            if kind == "Add" and out != first:
                kind = None
            whole = made.pick(draw, out) if kind in ("LayerNorm", "RMSNorm", "Softmax") else None
            axes = _layout(draw, out, names, False, made)[0]
            if whole is not None:          # a norm or softmax needs its dimension whole on each device
                axes = tuple(() if d == whole else a for d, a in zip(out, axes))
            t = f"T{k}"
            lines.append(f"{_fmt(t, out, axes)} = {src} * {w}")
            cur, src = out, _fmt(t, out, [()] * len(out))
            if kind is not None:
                e = f"E{k}"
                if kind == "Add":
                    arg = f"In{_fmt('', first, [()] * len(first))}, {src}"
                elif whole is not None:
                    kind, arg = f"{kind}_{whole}", src
                else:
                    arg = src
                lines.append(f"{e} = {kind}({arg})")
                src = _fmt(e, cur, [()] * len(cur))
        text = "param " + ", ".join(params) + "\n" + "\n".join(lines)
        return text, _mesh_text(names, msizes), _sizes(draw, DIMS, msizes)
    return build()
