"""The planner: a bound program -> a :class:`~symcost.trace.Trace` of typed operations, in order.

    >>> from symcost.binding import bind
    >>> t = plan_program(bind("In[B_X, D_Y] *_D Win[D, F_Y] *_F Wout[F_Y, D] -> Out[B_X, D_Y]", mesh="X,Y"))
    >>> [s.signature() for s in t.steps if s.is_collective]
    ['AllGather_Y(In[B_X, D_Y]) -> In[B_X, D]', 'ReduceScatter_Y(Out[B_X, D]{U_Y}) -> Out[B_X, D_Y]']

Statements are planned in order. A tensor's layout propagates to later uses written without axes; a use
written with axes gets the moves that take it there. An einsum or chain is planned by the rewriter
(every assignment of axes to its dimensions, priced end to end); a written collective is checked
against its kind's signature. A program that declares parameters is a strategy: there the engine
inserts only gathers, slices and reductions (``moves``).
"""
from __future__ import annotations

from dataclasses import replace

from . import dtypes, elementwise
from .binding import BoundProgram
from .collectives import Move, rule, written_moves
from .einsum import LocalEinsum
from .elementwise import Elementwise
from .errors import ShardingError
from .layout import Layout, layout_from_ref
from .notation import Apply, Collective, Declaration, Einsum, Ranking, TensorRef, format_axes
from .rewrite import Ranker, plan_chain, product_dims, reshard
from .rewrite.chains import LAYOUT_LIMIT
from .rewrite.ranking import ranker_for
from .explain import explained_steps, final_layout
from .trace import Step, Tie, Trace, Use

#: the runner-up plans of an einsum weighed against its best (by the overlapped step time), kept on request
ALTERNATIVES = 6


def plan_program(bound: BoundProgram, *, overlap=True, objective: str = "time", moves=None,
                 strict: bool = False, alternatives: bool = True, choices=None, efficiency: bool = False) -> Trace:
    """Plan every statement of a bound program in order. ``strict``: a dimension that does not divide by
    its axes is an error (otherwise its blocks are padded). ``alternatives``: keep the runner-up plans of
    each einsum (False: they are still weighed, so the plan is the same, but not explained or kept).
    ``choices``: ``{statement index: k}``, the k-th of the equally fast plans of that einsum instead of the
    first (the trace's ``ties`` say which einsums have several). ``efficiency``: weighed as priced, floors in."""
    ranker = ranker_for(bound, overlap=overlap, objective=objective, moves=moves, efficiency=efficiency)
    walk = _Walk(bound, ranker, strict)
    walk.kept, walk.choices = alternatives, dict(choices or {})
    for walk.at, stmt in enumerate(bound.program.statements):
        walk.statement(stmt)
    return walk.trace()


# ---------------------------------------------------------------------------------------- the walk


class _Walk:
    """The state of planning one program, statement by statement (private: the planner returns a Trace)."""

    def __init__(self, bound: BoundProgram, ranker: Ranker, strict: bool = False):
        self.bound, self.ranker, self.strict = bound, ranker, strict
        self.mesh, self.text = bound.mesh, bound.text
        self.known: dict[str, Layout] = {}
        self.initial: dict[str, Layout] = {}
        self.params: dict[str, Layout] = {}
        self.produced: dict[str, int] = {}
        self.steps: list[Step] = []
        self.alternatives: list = []
        self.uses: list[Use] = []
        self.dtypes: set[str] = set()
        self.notes: list[str] = []
        self.kept = True      # keep the runner-up plans (they are weighed either way: they choose the best)
        self.on_host: dict[str, int] = {}    # tensors in host memory -> the line that moved them there
        self.at = 0                           # the statement
        self.choices: dict[int, int] = {}     # which tie to take
        self.ties: list[Tie] = []             # each einsum's equally fast plans

    def trace(self) -> Trace:
        dtype = max(self.dtypes or {dtypes.DEFAULT}, key=dtypes.nbytes)
        return Trace(self.bound, self.ranker, tuple(self.steps), tuple(self.alternatives),
                     tuple(self.known.items()), tuple(self.initial.items()), tuple(self.params.items()),
                     tuple(self.produced.items()), tuple(self.uses), dtype, tuple(self.notes), tuple(self.ties))

    def error(self, msg: str, span, hint: str | None = None) -> ShardingError:
        return ShardingError(msg, text=self.text, line=span.line or None, column=span.column or None,
                             width=span.width, hint=hint)

    # ------------------------------------------------------------------ statements
    def statement(self, stmt) -> None:
        line = stmt.span.line
        if isinstance(stmt, Ranking):
            return
        if isinstance(stmt, Declaration):
            for ref in stmt.tensors:
                if ref.name in self.known:
                    raise self.error(f"{ref.name} is declared a parameter after it is used", ref.span)
                self.params[ref.name] = self.use(ref, line)
            return
        if isinstance(stmt, Collective):
            return self.collective(stmt, line)
        if isinstance(stmt, Apply):
            return self.apply(stmt, line)
        if len(stmt.operands) == 1 and stmt.result_name is None:
            self.use(stmt.operands[0], line)
            return
        self.einsum(stmt, line)

    def layout(self, ref: TensorRef) -> Layout:
        return layout_from_ref(ref, self.mesh, self.text, self.bound.size_map, strict=self.strict)

    def use(self, ref: TensorRef, line: int) -> Layout:
        """The layout of an operand where it is consumed; a tensor defined earlier is resharded to the
        layout written here (or, written without any axes, taken as it is)."""
        written = self.layout(ref)
        self.dtypes.add(written.dtype)
        known = self.known.get(ref.name)
        if known is None:
            self.known[ref.name] = written
            self.initial.setdefault(ref.name, written)
            return written
        if known.dims != written.dims:
            extra = "; transposes are not supported" if set(known.dims) == set(written.dims) else ""
            raise self.error(f"{ref.name} is used with dimensions [{', '.join(written.dims)}] but was defined as "
                             f"[{', '.join(known.dims)}]{extra}", ref.span)
        if not ref.annotated:
            return known  # unannotated use: the layout propagates
        if ref.dtype is None:
            written = replace(written, dtype=known.dtype)
        if written.same_sharding(known):
            return known
        _, moves = reshard(known, written, self.mesh, self.ranker)
        why = f"{ref.name} is used as {written.render(self.mesh)} on line {line}"
        self.steps.extend(Step(m, self.mesh, why=why, sizes=self.bound.sizes) for m in moves)
        self.known[ref.name] = written
        return written

    def produce(self, name: str, stmt) -> None:
        """A tensor is produced once: a second assignment would make the program ambiguous."""
        where = stmt.output.span if getattr(stmt, "output", None) is not None else stmt.span
        if name in self.produced:
            raise self.error(f"{name} is assigned twice (first on line {self.produced[name]})", where)
        if name in self.params:
            raise self.error(f"{name} is a parameter and cannot be assigned", where)
        self.produced[name] = stmt.span.line

    def fresh_name(self, base: str) -> str:
        name, i = base, 1
        while name in self.known:
            i += 1
            name = f"{base}{i}"
        return name

    # ------------------------------------------------------------------ einsums
    def einsum(self, stmt: Einsum, line: int) -> None:
        for ref in stmt.operands:
            if ref.name in self.on_host:
                raise self.error(f"{ref.name} is in host memory ({self.where(self.on_host[ref.name])}); bring it "
                                 f"back with ToDevice({ref.name}[...]) before using it", ref.span)
        layouts = [self.use(ref, line) for ref in stmt.operands]
        out_dims = self.result_dims(stmt, layouts)
        out = stmt.output
        name = stmt.result_name or self.fresh_name("Out")
        out_names = tuple(d.name for d in out.dims) if out is not None else ()
        if len(layouts) == 1 and out is not None and out.name == layouts[0].name and out_names != layouts[0].dims \
                and set(out_names) == set(layouts[0].dims):
            raise self.error(f"{out.name} is asked for as [{', '.join(out_names)}] but is "
                             f"[{', '.join(layouts[0].dims)}]: transposes are not supported", out.span,
                             hint="keep the dimensions in their order, or name the result differently (B[J, I] = A[I, J])")  # noqa: E501
        reshard_only = len(layouts) == 1 and out is not None and layouts[0].dims == out_names
        if not (len(stmt.operands) == 1 and name == stmt.operands[0].name):  # a reshard keeps its tensor
            self.produce(name, stmt)
        target = None
        if out is not None:
            target = self.layout(out)
            if out.dtype is None:
                target = replace(target, dtype=max((l.dtype for l in layouts), key=dtypes.nbytes))
        if reshard_only:   # A[I_X, J] -> A[I, J_X]
            assert out is not None and target is not None     # reshard_only says so
            return self.reshard(layouts[0], target, out)
        names = [self.fresh_name(f"T{i + 1}") for i in range(len(layouts) - 2)]
        cands = plan_chain(layouts, list(stmt.contract), name, out_dims, target, self.mesh, self.ranker,
                           out_dtype=target.dtype if target is not None else None, names=names, keep=ALTERNATIVES,
                           ties_only=not self.kept)
        tied = sum(c.rank[0] == cands[0].rank[0] for c in cands)    # equally fast: the backward pass may choose
        k = min(self.choices.get(self.at, 0), tied - 1)
        best, s0, u0 = cands[k], len(self.steps), len(self.uses)
        chosen = explained_steps(best.steps, self.mesh, target, sizes=self.bound.sizes)
        if best.bounded:
            self.notes.append(f"line {line}: the layout search was bounded ({len(self.mesh.axes)} mesh axes): each "
                              f"search looked at {LAYOUT_LIMIT:,} moves from the cheapest layouts out, routes "
                              f"through costlier layouts were not explored; write the collectives you want to "
                              f"compare them")
        self.steps.extend(chosen)
        self.alternatives.extend((explained_steps(c.steps, self.mesh, target, sizes=self.bound.sizes), tuple(chosen))
                                 for c in (cands if self.kept else ()) if c is not best)
        self.known[name] = final_layout(best.steps)
        self.initial.setdefault(name, self.known[name])
        self.uses.extend(Use(op, line) for op in best.steps if isinstance(op, LocalEinsum))
        if tied > 1:
            self.ties.append(Tie(self.at, line, tied, tuple(cands[:tied]), target, k, (s0, len(self.steps)),
                                 (u0, len(self.uses))))

    def reshard(self, src: Layout, target: Layout, out: TensorRef) -> None:
        target = replace(target, dtype=out.dtype or src.dtype)
        if not target.unreduced <= src.unreduced:
            extra = "".join(sorted(target.unreduced - src.unreduced))
            raise self.error(f"{out.name} asks for partial sums over {extra}, which {src.name} does not hold", out.span)
        _, moves = reshard(src, replace(target, name=src.name), self.mesh, self.ranker)
        why = f"reshard to {target.render(self.mesh)}"
        self.steps.extend(Step(m, self.mesh, why=why, sizes=self.bound.sizes) for m in moves)
        self.known[out.name] = target
        self.initial.setdefault(out.name, target)

    def result_dims(self, stmt: Einsum, layouts: list[Layout]) -> tuple[str, ...]:
        """Check contractions and dimension agreement; the result's dimensions."""
        seen_in = set().union(*(set(l.dims) for l in layouts))
        for i, c in enumerate(stmt.contract):
            if c is None:
                continue
            left = set().union(*(set(l.dims) for l in layouts[:i + 1]))
            for d in c:
                if d not in left or d not in layouts[i + 1].dims:
                    span = stmt.op_spans[i] if i < len(stmt.op_spans) else stmt.span
                    raise self.error(f"*_{d} contracts {d}, which is not a dimension of both sides of this product",
                                     span)
        if stmt.output is not None:
            for ref in stmt.output.dims:
                if ref.name not in seen_in and ref.size is None:
                    raise self.error(f"output {stmt.output.name} has dimension {ref.name}, which no operand has",
                                     ref.span)
            return tuple(ref.name for ref in stmt.output.dims)
        dims = layouts[0].dims
        for i, lay in enumerate(layouts[1:]):
            later = set().union(*(set(t.dims) for t in layouts[i + 2:]))
            dims = product_dims(dims, lay.dims, stmt.contract[i], later)
        return dims

    # ------------------------------------------------------------------ elementwise work
    def apply(self, stmt: Apply, line: int) -> None:
        """Elementwise work runs where its result is laid out: operands are moved to the result's sharding
        (a norm or softmax needs the dimension it works over whole on each device)."""
        layouts = [self.use(ref, line) for ref in stmt.operands]
        kind, reduce = elementwise.check_apply(stmt, layouts, self.error)
        first = layouts[0]
        if kind.broadcasts:
            assert stmt.output is not None            # check_apply: a broadcast writes its result
            out_dims = tuple(d.name for d in stmt.output.dims)
        else:
            out_dims = tuple(d for d in first.dims if not (kind.drops and d == reduce))
        name = stmt.result_name
        self.produce(name, stmt)
        # the result's sharding: as written, else the first operand's (partial sums reduced unless linear)
        keep = [first.axes_of(d) if d in first.dims else () for d in out_dims] if kind.broadcasts else \
            [a for d, a in zip(first.dims, first.axes) if not (kind.drops and d == reduce)]
        target = Layout(name, out_dims, tuple(keep), first.unreduced if kind.linear else frozenset(), first.dtype)
        if stmt.output is not None:
            written = tuple(d.name for d in stmt.output.dims)
            if len(written) != len(out_dims) or (written != out_dims and not kind.relabels):
                raise self.error(f"{stmt.op} gives [{', '.join(out_dims)}], not [{', '.join(written)}]"
                                 + ("" if kind.relabels else "; only View, Rotary and TopK rename dimensions"),
                                 stmt.output.span)
            target = replace(self.layout(stmt.output), dtype=stmt.output.dtype or first.dtype)
        want = elementwise.operand_layouts(target, layouts, reduce if kind.drops else None)
        over = (target if kind.broadcasts else want[0]).axes_of(reduce) if reduce is not None else ()
        if over:
            raise self.error(f"{stmt.op}_{reduce} needs {reduce} whole on each device, but {name} splits it over "
                             f"{format_axes(over)[1:]}", stmt.name_span,
                             hint=f"lay {reduce} out unsplit")
        ready = []
        for lay, w in zip(layouts, want):
            if lay.same_sharding(w):
                ready.append(lay)
                continue
            _, moves = reshard(lay, w, self.mesh, self.ranker)
            why = f"{lay.name} must be {w.render(self.mesh)} for {stmt.op}"
            self.steps.extend(Step(m, self.mesh, why=why, sizes=self.bound.sizes) for m in moves)
            ready.append(w)
        op = Elementwise(stmt.op, tuple(ready), target, reduce)
        self.steps.append(Step(op, self.mesh, why=elementwise.describe(op, self.mesh), sizes=self.bound.sizes))
        self.known[name] = target
        self.initial.setdefault(name, target)
        self.uses.append(Use(op, line))

    # ------------------------------------------------------------------ written collectives
    def collective(self, stmt: Collective, line: int) -> None:
        if stmt.kind == "ToDevice" and stmt.operand.name not in self.known:
            self.on_host[stmt.operand.name] = 0        # an input kept in host memory
        src = self.use(stmt.operand, line)
        stmt = self.target_axes(stmt, src)
        out = replace(self.layout(stmt.output), dtype=stmt.output.dtype or src.dtype)
        kind = rule(stmt.kind)
        self.check_memory(stmt, src)
        moves = self.collective_moves(stmt, kind, src, replace(out, name=src.name))
        if out.name != src.name:   # the collective names its result: the last move carries the rename
            moves[-1] = replace(moves[-1], after=out)
        why = f"{kind.explain(moves[0], self.mesh)} (line {line})" if not kind.inserted else f"written on line {line}"
        if len(moves) == 2:
            major = ", ".join(a for a in stmt.axes if a in moves[0].after.sharding_axes)
            self.steps.append(Step(moves[0], self.mesh, sizes=self.bound.sizes,
                                   why=f"not written: {major} is the major axis of its dimension in "
                                       f"{src.render(self.mesh)}, so the blocks are permuted first to make the "
                                       f"{stmt.kind} on line {line} exact"))
            moves = moves[1:]
        self.steps.extend(Step(m, self.mesh, why=why, sizes=self.bound.sizes) for m in moves)
        if stmt.output.name != src.name:
            self.produce(stmt.output.name, stmt)
        self.known[stmt.output.name] = out
        self.initial.setdefault(stmt.output.name, out)
        self.uses.append(Use(replace(moves[-1], before=src, after=out), line, written=True))
        if stmt.kind == "ToHost":
            self.on_host[stmt.output.name] = line
        elif stmt.kind == "ToDevice":
            self.on_host.pop(src.name, None)
            self.on_host.pop(stmt.output.name, None)

    def target_axes(self, stmt: Collective, src: Layout) -> Collective:
        """The statement with the book's target dimensions (ReduceScatter_{X,K}, AllToAll_{X,J}) taken out of
        its axes once checked against its result; every axis left must be the mesh's."""
        dims_named = [a for a in stmt.axes if a not in self.mesh and a in src.dims]
        if dims_named:
            stmt = replace(stmt, axes=tuple(a for a in stmt.axes if a not in dims_named))
            out_dims = {d.name: d.axes for d in stmt.output.dims}
            for d in dims_named:
                if not any(a in out_dims.get(d, ()) for a in stmt.axes):
                    raise self.error(f"{stmt.kind} names dimension {d} as its target, but {stmt.output.name} does "
                                     f"not split {d} over {format_axes(stmt.axes)[1:]}", stmt.name_span)
        for a in stmt.axes:
            if a not in self.mesh:
                raise self.error(f"unknown mesh axis {a!r} in {stmt.kind}", stmt.name_span,
                                 hint=f"the mesh has axes {', '.join(self.mesh.names)}")
        return stmt

    def collective_moves(self, stmt: Collective, kind, src: Layout, want: Layout) -> list:
        """The moves a written collective makes of ``src`` (a send or a host transfer keeps the layout and
        moves the blocks; the others are the kind's moves to ``want``, a permute first where needed)."""
        label, hint = stmt.kind + format_axes(stmt.axes), f"{stmt.kind}'s signature is {kind.signature}"
        if not kind.inserted:
            if not want.same_sharding(src):
                raise self.error(f"{label} keeps the layout of {src.name}; {want.render(self.mesh)} differs "
                                 f"from {src.render(self.mesh)}", stmt.name_span, hint=hint)
            if stmt.kind == "Send" and len(stmt.axes) != 1:
                raise self.error(f"a send goes along one mesh axis, not {format_axes(stmt.axes)[1:]}", stmt.name_span,
                                 hint="write Send_Z(...), or Send_{Z,2} for two devices along Z")
            return [Move(stmt.kind, tuple(stmt.axes), src, src, stmt.distance or (1 if stmt.axes else 0))]
        moves = written_moves(kind, set(stmt.axes), src, want, self.mesh)
        if not moves:
            if src.dims != want.dims:
                reason = f"{label} keeps the dimensions of {src.name}, but the result has different dimensions"
            else:
                r = kind.reason(stmt.axes, src, want)
                reason = (f"{label}: {r}" if r else
                          f"{label}({src.render(self.mesh)}) cannot give {want.render(self.mesh)}")
            raise self.error(reason, stmt.name_span, hint=hint)
        return moves

    def check_memory(self, stmt: Collective, src: Layout) -> None:
        """A tensor in host memory is only brought back; one in HBM is not brought back again."""
        host = self.on_host.get(src.name)
        if stmt.kind == "ToDevice" and host is None:
            raise self.error(f"{src.name} is in HBM already; ToDevice brings back what ToHost moved out",
                             stmt.name_span)
        if stmt.kind != "ToDevice" and host is not None:
            raise self.error(f"{src.name} is in host memory ({self.where(host)}); bring it back with "
                             f"ToDevice({src.name}[...]) first", stmt.name_span)

    @staticmethod
    def where(line: int) -> str:
        return f"ToHost on line {line}" if line else "an input kept there"
