"""The public entry points: :func:`derive` and :func:`check`.

    >>> import symcost
    >>> plan = symcost.derive("In[B_X, D_Y] *_D Win[D, F_Y] *_F Wout[F_Y, D] -> Out[B_X, D_Y]",
    ...                       mesh="X=4,Y=4")
    >>> [s.signature() for s in plan.collectives]
    ['AllGather_Y(In[B_X, D_Y]) -> In[B_X, D]', 'ReduceScatter_Y(Out[B_X, D]{U_Y}) -> Out[B_X, D_Y]']
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from .cost import Env, LocalEinsum, Move
from .errors import ShardingError, SymcostError, UsageError
from .layout import Layout, check_layout, layout_from_ref
from .mesh import Mesh, as_mesh
from .notation import (DEFAULT_DTYPE, DTYPE_BYTES, Collective, Declaration, Einsum, Program, Ranking,
                       TensorRef, format_axes, parse)
from .plan import Alternative, Plan, build_step, summarize, totals
from .rewrite import Ranker, moves_from, plan_chain, product_dims, reshard
from . import symbols

RESERVED = set(symbols.HARDWARE_SYMBOLS)
MAX_SIZE = 10 ** 15


# ------------------------------------------------------------------------------------- arguments


def parse_dims(text) -> dict[str, int]:
    """``--dims B=1024,D=8192`` (also accepts a dict). Sizes must be positive integers; ``1e6``-style
    numbers are accepted when they are whole."""
    if text is None:
        return {}
    if isinstance(text, dict):
        items = list(text.items())
    else:
        items = []
        for part in str(text).split(","):
            part = part.strip()
            if not part:
                continue
            if "=" not in part:
                raise UsageError(f"cannot read dimension binding {part!r}; write NAME=SIZE, e.g. B=1024")
            k, v = part.split("=", 1)
            items.append((k.strip(), v.strip()))
    out: dict[str, int] = {}
    for k, v in items:
        if not str(k).replace("_", "").isalnum() or not str(k)[:1].isalpha():
            raise UsageError(f"{k!r} is not a dimension name")
        n = _as_int(k, v)
        if k in out and out[k] != n:
            raise UsageError(f"dimension {k} is bound twice, to {out[k]} and {n}")
        out[str(k)] = n
    return out


def _as_int(name, v) -> int:
    if isinstance(v, bool):
        raise UsageError(f"size of {name} must be a positive integer, not {v!r}")
    if isinstance(v, int):
        n = v
    else:
        s = str(v).strip().replace("_", "")
        try:
            f = float(s) if any(c in s for c in ".eE") else int(s)
        except ValueError:
            raise UsageError(f"size of {name} must be a positive integer, not {v!r}") from None
        if isinstance(f, float):
            if not math.isfinite(f) or f != int(f):
                raise UsageError(f"size of {name} must be a whole number, not {v!r}")
            f = int(f)
        n = f
    if n < 1:
        raise UsageError(f"size of {name} must be positive, not {n}")
    if n > MAX_SIZE:
        raise UsageError(f"size of {name} = {n} is absurdly large (more than 1e15)")
    return n


def resolve_hardware(hw):
    if hw is None or hw == "":
        return None
    if isinstance(hw, str):
        from .hardware import hardware
        return hardware(hw)
    return hw


def _axes_named(prog: Program) -> list[str]:
    names: list[str] = []

    def add(axes):
        for a in axes:
            if a not in names:
                names.append(a)

    def tensor(t: TensorRef):
        for d in t.dims:
            add(d.axes)
        add(t.unreduced)

    for st in prog.statements:
        for t in statement_tensors(st):
            tensor(t)
        if isinstance(st, Collective):  # ReduceScatter_{X,K}: K names a dimension, not an axis
            add(tuple(a for a in st.axes if a not in {d.name for d in st.operand.dims}))
    return names


def statement_tensors(st) -> tuple[TensorRef, ...]:
    """Every tensor a statement writes, operands first."""
    if isinstance(st, Einsum):
        return st.operands + ((st.output,) if st.output else ())
    if isinstance(st, Declaration):
        return st.tensors
    if isinstance(st, Ranking):
        return ()
    return (st.operand, st.output)


def _setup(text, mesh, dims, hw):
    prog = text if isinstance(text, Program) else parse(text)
    mesh = as_mesh(mesh)
    named = _axes_named(prog)
    if not mesh.axes:
        mesh = Mesh(()).with_axes(named)
    sizes = parse_dims(dims)
    hardware = resolve_hardware(hw)
    mesh = mesh.on_hardware(hardware)
    _check_names(prog, mesh)
    return prog, mesh, sizes, hardware


def _check_names(prog: Program, mesh: Mesh):
    def tensor(t: TensorRef):
        for d in t.dims:
            if d.name in RESERVED:
                raise ShardingError(f"dimension {d.name} of {t.name} clashes with the hardware symbol "
                                    f"{d.name} (FLOPs/s)", text=prog.text, line=d.span.line or None,
                                    column=d.span.column or None, width=d.span.width,
                                    hint="rename the dimension")
            if d.name in mesh:
                raise ShardingError(f"dimension {d.name} of {t.name} has the name of a mesh axis",
                                    text=prog.text, line=d.span.line or None, column=d.span.column or None,
                                    width=d.span.width, hint="give dimensions and mesh axes different names")

    for st in prog.statements:
        for t in statement_tensors(st):
            tensor(t)


# ------------------------------------------------------------------------------------- planning


@dataclass
class _State:
    prog: Program
    mesh: Mesh
    sizes: dict
    ranker: Ranker
    env: Env
    known: dict            # tensor name -> Layout (its current layout)
    steps: list
    alternatives: list
    dtypes: set
    initial: dict = None   # tensor name -> the layout it was first written (or declared) with
    params: dict = None    # parameter name -> its declared layout
    produced: dict = None  # tensor name -> line of the statement that produced it
    einsums: list = None   # (LocalEinsum, line) of the chosen plan, in order
    hardware: object = None
    ops: list = None       # in program order: ("einsum", LocalEinsum, line) or ("collective", kind, src, out, line)

    def __post_init__(self):
        self.initial = {} if self.initial is None else self.initial
        self.params = {} if self.params is None else self.params
        self.produced = {} if self.produced is None else self.produced
        self.einsums = [] if self.einsums is None else self.einsums
        self.ops = [] if self.ops is None else self.ops


def _layout(ref: TensorRef, st: _State) -> Layout:
    return layout_from_ref(ref, st.mesh, st.prog.text, st.sizes)


def _use(ref: TensorRef, st: _State, stmt_line: int) -> Layout:
    """The layout of an operand where it is consumed; a tensor defined earlier is resharded to the
    layout written here (or, written without any axes, taken as it is)."""
    written = _layout(ref, st)
    known = st.known.get(ref.name)
    if known is None:
        st.known[ref.name] = written
        st.initial.setdefault(ref.name, written)
        return written
    if known.dims != written.dims:
        if set(known.dims) == set(written.dims):
            raise ShardingError(f"{ref.name} is used with dimensions [{', '.join(written.dims)}] but was "
                                f"defined as [{', '.join(known.dims)}]; transposes are not supported",
                                text=st.prog.text, line=ref.span.line, column=ref.span.column,
                                width=ref.span.width)
        raise ShardingError(f"{ref.name} is used with dimensions [{', '.join(written.dims)}] but was "
                            f"defined as [{', '.join(known.dims)}]", text=st.prog.text,
                            line=ref.span.line, column=ref.span.column, width=ref.span.width)
    if not any(d.axes for d in ref.dims) and not ref.unreduced and ref.dtype is None:
        return known  # unannotated use: the layout propagates
    if ref.dtype is None:
        written = replace(written, dtype=known.dtype)
    if written.same_sharding(known):
        return known
    cost, moves = reshard(known, written, st.mesh, st.ranker)
    for m in moves:
        st.steps.append(build_step(m, st.env, why=f"{ref.name} is used as {written.render(st.mesh)} "
                                                  f"on line {stmt_line}"))
    st.known[ref.name] = written
    return written


def _einsum_dims(stmt: Einsum, layouts: list[Layout], st: _State) -> tuple[str, ...]:
    """Validate contractions and dimension agreement; return the output dims."""
    text = st.prog.text
    seen_in = set()
    for lay in layouts:
        seen_in |= set(lay.dims)
    for i, c in enumerate(stmt.contract):
        if c is None:
            continue
        left = set(layouts[0].dims)
        for lay in layouts[1:i + 1]:
            left |= set(lay.dims)
        for d in c:
            if d not in left or d not in layouts[i + 1].dims:
                sp_ = stmt.op_spans[i] if i < len(stmt.op_spans) else stmt.span
                raise ShardingError(f"*_{d} contracts {d}, which is not a dimension of both sides of "
                                    f"this product", text=text, line=sp_.line, column=sp_.column,
                                    width=sp_.width)
    if stmt.output is not None:
        out_dims = tuple(d.name for d in stmt.output.dims)
        for d in stmt.output.dims:
            if d.name not in seen_in and d.size is None:
                raise ShardingError(f"output {stmt.output.name} has dimension {d.name}, which no operand "
                                    f"has", text=text, line=d.span.line, column=d.span.column,
                                    width=d.span.width)
        return out_dims
    # no output: the dimensions still needed after the last product
    dims = layouts[0].dims
    for i, lay in enumerate(layouts[1:]):
        later = set()
        for t in layouts[i + 2:]:
            later |= set(t.dims)
        dims = product_dims(dims, lay.dims, stmt.contract[i], later)
    return dims


def _plan_einsum(stmt: Einsum, st: _State, line: int):
    layouts = [_use(ref, st, line) for ref in stmt.operands]
    for lay in layouts:
        st.dtypes.add(lay.dtype)
    out_dims = _einsum_dims(stmt, layouts, st)
    out = stmt.output
    name = stmt.result_name or _fresh_name(st, "Out")
    if not (len(stmt.operands) == 1 and name == stmt.operands[0].name):  # a reshard keeps its tensor
        _produce(name, stmt, st)
    out_dtype = out.dtype if out is not None and out.dtype else None
    target = None
    if out is not None:
        target = _layout(out, st)
        if out_dtype is None:
            target = replace(target, dtype=max((l.dtype for l in layouts), key=lambda d: DTYPE_BYTES[d]))
    if len(layouts) == 1 and target is not None and layouts[0].dims == target.dims:
        # a reshard: A[I_X, J] -> A[I, J_X]
        src = layouts[0]
        target = replace(target, dtype=out_dtype or src.dtype)
        if not target.unreduced <= src.unreduced:
            extra = "".join(sorted(target.unreduced - src.unreduced))
            raise ShardingError(f"{out.name} asks for partial sums over {extra}, which {src.name} does not "
                                f"hold", text=st.prog.text, line=out.span.line, column=out.span.column,
                                width=out.span.width)
        _, moves = reshard(src, replace(target, name=src.name), st.mesh, st.ranker)
        for m in moves:
            st.steps.append(build_step(m, st.env, why=f"reshard to {target.render(st.mesh)}"))
        st.known[out.name] = target
        st.initial.setdefault(out.name, target)
        return
    cands = plan_chain(layouts, list(stmt.contract), name, out_dims, target, st.mesh, st.ranker,
                       out_dtype=target.dtype if target is not None else None,
                       names=[_fresh_name(st, f"T{i + 1}") for i in range(len(layouts) - 2)])
    best = cands[0]
    best_steps = _materialize(best.steps, st, target)
    st.steps.extend(best_steps)
    for c in cands[1:]:
        steps = _materialize(c.steps, st, target)
        t = totals(steps, st.mesh, st.ranker.overlap)
        st.alternatives.append(Alternative(summarize(steps), t["t_comms"], t["t_step"], tuple(steps),
                                           tuple(best_steps), st.mesh))
    final = best.steps[-1]
    final_layout = final.output if isinstance(final, LocalEinsum) else final.after
    st.known[name] = final_layout
    st.initial.setdefault(name, final_layout)
    st.einsums.extend((op, line) for op in best.steps if isinstance(op, LocalEinsum))
    st.ops.extend(("einsum", op, line) for op in best.steps if isinstance(op, LocalEinsum))


def _produce(name: str, stmt, st: _State):
    """A tensor is produced once: a second assignment would make the program ambiguous."""
    where = stmt.output.span if getattr(stmt, "output", None) is not None else stmt.span
    if name in st.produced:
        raise ShardingError(f"{name} is assigned twice (first on line {st.produced[name]})",
                            text=st.prog.text, line=where.line, column=where.column, width=where.width)
    if name in st.params:
        raise ShardingError(f"{name} is a parameter and cannot be assigned", text=st.prog.text,
                            line=where.line, column=where.column, width=where.width)
    st.produced[name] = stmt.span.line


def _fresh_name(st: _State, base: str) -> str:
    name, i = base, 1
    while name in st.known:
        i += 1
        name = f"{base}{i}"
    return name


def _materialize(ops, st: _State, target):
    """Symbolic steps with a reason for each."""
    out = []
    einsum_idx = [i for i, o in enumerate(ops) if isinstance(o, LocalEinsum)]
    for i, op in enumerate(ops):
        if isinstance(op, LocalEinsum):
            why = _why_einsum(op, st.mesh)
        else:
            nxt = next((ops[j] for j in einsum_idx if j > i), None)
            why = _why_move(op, nxt, target, st.mesh)
        out.append(build_step(op, st.env, why=why))
    return out


def _why_einsum(e: LocalEinsum, mesh) -> str:
    contracted = [d for d in e.dims if d not in e.output.dims]
    split = [f"{d} over {format_axes(ax)[1:]}" for d, ax in zip(e.dims, e.axes) if ax]
    parts = ["local einsum"]
    if split:
        parts.append("splits " + ", ".join(split))
    else:
        parts.append("every device does the whole product")
    unred = [f"{d} is contracted over {format_axes(ax)[1:]}" for d, ax in zip(e.dims, e.axes)
             if ax and d in contracted]
    if unred:
        parts.append("partial sums stay unreduced because " + " and ".join(unred))
    return "; ".join(parts)


def _why_move(m: Move, nxt: LocalEinsum | None, target, mesh) -> str:
    ax = format_axes(m.axes)[1:]
    if nxt is not None and m.before.name in {t.name for t in nxt.inputs}:
        use = next(t for t in nxt.inputs if t.name == m.before.name)
        lead = f"{m.before.name} must be {use.render(mesh)} for the local einsum"
    elif isinstance(target, Layout):
        lead = f"the result must be {target.render(mesh)}"
    else:
        lead = "the result is reduced"
    detail = {
        "AllGather": f"gathers {m.before.name} over {ax}",
        "Slice": f"slices the replicated {m.before.name} over {ax} (no communication)",
        "AllToAll": f"moves axis {ax} to another dimension of {m.before.name}",
        "ReduceScatter": f"sums the partial sums over {ax} and scatters them",
        "AllReduce": f"sums the partial sums over {ax}",
        "Permute": f"reorders the blocks over {ax} (a collective-permute)",
    }[m.kind]
    return f"{lead}: {detail}"


def _plan_collective(stmt: Collective, st: _State, line: int):
    src = _use(stmt.operand, st, line)
    text = st.prog.text
    # the book's ReduceScatter_{X,K} / AllToAll_{X,J}: a dimension among the axes names the target
    dims_named = [a for a in stmt.axes if a not in st.mesh and a in src.dims]
    if dims_named:
        stmt = replace(stmt, axes=tuple(a for a in stmt.axes if a not in dims_named))
        out_dims = {d.name: d.axes for d in stmt.output.dims}
        for d in dims_named:
            if not any(a in out_dims.get(d, ()) for a in stmt.axes):
                raise ShardingError(f"{stmt.kind} names dimension {d} as its target, but {stmt.output.name} "
                                    f"does not split {d} over {format_axes(stmt.axes)[1:]}", text=text,
                                    line=stmt.span.line, column=stmt.span.column, width=stmt.name_span.width)
    for a in stmt.axes:
        if a not in st.mesh:
            raise ShardingError(f"unknown mesh axis {a!r} in {stmt.kind}", text=text,
                                line=stmt.name_span.line, column=stmt.name_span.column,
                                width=stmt.name_span.width,
                                hint=f"the mesh has axes {', '.join(st.mesh.names)}")
    out = _layout(stmt.output, st)
    out = replace(out, dtype=stmt.output.dtype or src.dtype)
    out_named = out
    want = replace(out, name=src.name)
    axes = set(stmt.axes)
    if stmt.kind == "Send":  # one hop along the axes: a collective-permute that keeps the layout
        if not want.same_sharding(src):
            raise ShardingError(f"Send_{format_axes(stmt.axes)[1:]} keeps the layout of {src.name}; "
                                f"{want.render(st.mesh)} differs from {src.render(st.mesh)}", text=text,
                                line=stmt.span.line, column=stmt.span.column, width=stmt.name_span.width,
                                hint=_collective_hint("Send"))
        st.steps.append(build_step(Move("Permute", tuple(stmt.axes), src, src), st.env,
                                   why=f"sends each block one hop along {format_axes(stmt.axes)[1:]} "
                                       f"(line {line})"))
        st.known[stmt.output.name] = out
        st.ops.append(("collective", "Send", src, out, line))
        return
    matches = [m for m in moves_from(src, st.mesh) if m.kind == stmt.kind and set(m.axes) == axes
               and m.after == want]
    moves = []
    if matches:
        moves = [matches[0]]
    else:  # a major axis: a Permute first makes it exact
        for p in moves_from(src, st.mesh):
            if p.kind != "Permute":
                continue
            ms = [m for m in moves_from(p.after, st.mesh) if m.kind == stmt.kind and set(m.axes) == axes
                  and m.after == want]
            if ms:
                moves = [p, ms[0]]
                break
    if not moves:
        raise ShardingError(_collective_reason(stmt, src, want, st.mesh), text=text, line=stmt.span.line,
                            column=stmt.span.column, width=stmt.name_span.width,
                            hint=_collective_hint(stmt.kind))
    for m in moves:
        st.steps.append(build_step(m, st.env, why=f"written on line {line}"))
    st.known[stmt.output.name] = out_named
    st.initial.setdefault(stmt.output.name, out_named)
    st.ops.append(("collective", stmt.kind, src, out_named, line))


_SIGNATURES = {
    "AllGather": "AllGather_X(A[I_X, J]) -> A[I, J]",
    "ReduceScatter": "ReduceScatter_X(A[I, J]{U_X}) -> A[I, J_X]",
    "AllReduce": "AllReduce_X(A[I_Y, J]{U_X}) -> A[I_Y, J]",
    "AllToAll": "AllToAll_X(A[I_X, J]) -> A[I, J_X]",
    "Send": "Send_X(A[I, J]) -> A[I, J] (each device's block goes one hop along X)",
}


def _collective_hint(kind: str) -> str:
    return f"{kind}'s signature is {_SIGNATURES[kind]}"


def _collective_reason(stmt: Collective, src: Layout, want: Layout, mesh: Mesh) -> str:
    k, ax = stmt.kind, format_axes(stmt.axes)[1:]
    if src.dims != want.dims:
        return f"{k}_{ax} keeps the dimensions of {src.name}, but the result has different dimensions"
    if k == "AllGather":
        missing = [a for a in stmt.axes if a not in src.sharding_axes]
        if missing:
            return f"{k}_{ax}: mesh axis {missing[0]!r} does not shard any dimension of {src.name}"
        if want.unreduced != src.unreduced:
            return f"{k}_{ax} does not change the unreduced axes of {src.name}"
    if k in ("ReduceScatter", "AllReduce"):
        missing = [a for a in stmt.axes if a not in src.unreduced]
        if missing:
            return f"{k}_{ax}: {src.name} holds no partial sums over {missing[0]!r} (no {{U_{missing[0]}}})"
        if k == "AllReduce" and want.axes != src.axes:
            return f"AllReduce_{ax} keeps the sharding of {src.name}; it cannot change it"
    if k == "AllToAll":
        missing = [a for a in stmt.axes if a not in src.sharding_axes]
        if missing:
            return f"AllToAll_{ax}: mesh axis {missing[0]!r} does not shard any dimension of {src.name}"
    return (f"{k}_{ax}({src.render(mesh)}) cannot give {want.render(mesh)}")


#: the moves the engine inserts in a strategy (a program with ``param`` declarations): the book's
#: algorithms gather, slice and reduce; an AllToAll or a send is part of a strategy only when written.
STRATEGY_MOVES = ("AllGather", "ReduceScatter", "AllReduce", "Slice")
ALL_MOVES = ("AllGather", "ReduceScatter", "AllReduce", "AllToAll", "Slice", "Permute")


def _ranker(mesh, sizes, hardware, overlap, objective, moves=None):
    return _cached_ranker(mesh, tuple(sorted(sizes.items())), hardware, overlap, objective,
                          None if moves is None else tuple(moves))


@functools.lru_cache(maxsize=64)
def _cached_ranker(mesh, sizes, hardware, overlap, objective, moves):
    """Rankers keep the moves and prices they have worked out; derivations on the same mesh, sizes and
    hardware share one."""
    constants = hardware.bindings("bf16") if hardware is not None else None
    return Ranker(mesh, dict(sizes), constants, objective=objective, overlap=overlap, moves=moves)


def _moves_for(prog: Program, moves) -> tuple | None:
    if moves in (None, "auto"):
        strategy = any(isinstance(s, Declaration) for s in prog.statements)
        return STRATEGY_MOVES if strategy else None
    if moves == "all":
        return None
    if moves == "strategy":
        return STRATEGY_MOVES
    if moves == "none":  # the program is taken literally: every collective must be written
        return ()
    kinds = tuple(moves.split(",")) if isinstance(moves, str) else tuple(moves)
    bad = [k for k in kinds if k not in ALL_MOVES]
    if bad:
        raise UsageError(f"unknown move {bad[0]!r}; moves are {', '.join(ALL_MOVES)}")
    return kinds


def run(text, mesh=None, dims=None, hw=None, *, overlap: bool = True, objective: str = "time",
        moves=None) -> _State:
    """Plan every statement of a program in order; the state the backward pass starts from."""
    if objective not in ("time", "comms"):
        raise UsageError(f"objective must be 'time' or 'comms', not {objective!r}")
    prog, mesh, sizes, hardware = _setup(text, mesh, dims, hw)
    ranking = {k: v for s in prog.statements if isinstance(s, Ranking) for k, v in s.sizes}
    st = _State(prog, mesh, sizes, _ranker(mesh, {**ranking, **sizes}, hardware, overlap, objective,
                                           _moves_for(prog, moves)),
                Env.symbolic(mesh), {}, [], [], set())
    st.hardware = hardware
    for stmt in prog.statements:
        line = stmt.span.line
        if isinstance(stmt, Declaration):
            for ref in stmt.tensors:
                if ref.name in st.known:
                    raise ShardingError(f"{ref.name} is declared a parameter after it is used",
                                        text=prog.text, line=ref.span.line, column=ref.span.column,
                                        width=ref.span.width)
                lay = _use(ref, st, line)
                st.params[ref.name] = lay
                st.dtypes.add(lay.dtype)
        elif isinstance(stmt, Ranking):
            continue
        elif isinstance(stmt, Collective):
            _plan_collective(stmt, st, line)
        elif len(stmt.operands) == 1 and stmt.result_name is None:
            lay = _use(stmt.operands[0], st, line)
            st.dtypes.add(lay.dtype)
        else:
            _plan_einsum(stmt, st, line)
    return st


def plan_of(st: _State, text, steps=None, overlap=True, objective="time") -> Plan:
    dtype = max(st.dtypes or {DEFAULT_DTYPE}, key=lambda d: DTYPE_BYTES[d])
    expression = text.strip() if isinstance(text, str) and "\n" not in text.strip() else str(st.prog)
    return Plan(expression, st.mesh, tuple(st.steps if steps is None else steps), st.hardware,
                tuple(sorted(st.sizes.items())), tuple(st.alternatives), overlap, dtype, objective,
                tuple(st.known.values()))


def derive(text, mesh=None, dims=None, hw=None, *, overlap: bool = True, objective: str = "time",
           moves=None) -> Plan:
    """Derive the plan of a program: the collectives it needs, in order, with their costs.

    ``mesh``: a ``--mesh`` string, a dict or a :class:`Mesh` (default: a symbolic one-link ICI axis for
    every axis the notation names); ``dims``: sizes to bind (``"B=1024,D=8192"`` or a dict); ``hw``: a
    hardware preset name. ``objective``: rank plans by step ``time`` (default) or by ``comms`` alone.
    ``moves``: which moves the engine may insert: ``all``, ``strategy`` (gathers, slices and reductions
    only, as the book's algorithms), ``none`` (take the program literally: every collective is written)
    or ``auto`` (default: ``strategy`` for a program that declares parameters, ``all`` otherwise).
    """
    st = run(text, mesh, dims, hw, overlap=overlap, objective=objective, moves=moves)
    return plan_of(st, text, overlap=overlap, objective=objective)


def clear_caches() -> None:
    """Forget parsed programs, plan searches and built steps (they are kept because a question asked
    twice -- a sweep, a notebook re-run -- is answered from them)."""
    from . import notation, plan, rewrite
    for f in (notation._parse, _cached_ranker, rewrite._plan_chain, plan._build_step, plan._wins_when_cached):
        f.cache_clear()


def check(text, mesh=None, dims=None, hw=None) -> Plan:
    """Is this sharding (or program) valid? Raises :class:`ShardingError` saying which axis and which
    tensor when it is not; otherwise returns its plan."""
    return derive(text, mesh, dims, hw)


__all__ = ["derive", "check", "parse_dims", "clear_caches", "SymcostError"]
