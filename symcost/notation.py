"""The notation: text -> syntax tree with source positions.

The book's Part 3 writes a sharded matmul as ``In[B_X, D_Y] * W[D_X, F_Y] -> Out[B_X, F_Y]``::

    >>> prog = parse("In[B_X, D_Y] * W[D_X, F_Y] -> Out[B_X, F_Y]")
    >>> stmt = prog.statements[0]
    >>> [str(t) for t in stmt.operands], str(stmt.output)
    (['In[B_X, D_Y]', 'W[D_X, F_Y]'], 'Out[B_X, F_Y]')

This module knows nothing of meshes or costs: it turns text into immutable records (``TensorRef``,
``Einsum``, ``Collective``) whose ``span`` points back at the text, and reports every syntax error as a
:class:`~symcost.errors.NotationError` with line, column and a caret. The grammar is
``symcost/grammar/symcost.lark``.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

import lark

from .errors import NotationError

GRAMMAR_PATH = Path(__file__).parent / "grammar" / "symcost.lark"

#: dtype names and their sizes in bytes (DESIGN section 2).
DTYPE_BYTES = {"fp32": 4, "f32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "f16": 2,
               "float16": 2, "fp8": 1, "int8": 1, "i8": 1, "int4": 0.5, "i4": 0.5}
#: canonical spelling of each dtype name
DTYPE_CANON = {"fp32": "fp32", "f32": "fp32", "float32": "fp32", "bf16": "bf16", "bfloat16": "bf16",
               "fp16": "fp16", "f16": "fp16", "float16": "fp16", "fp8": "fp8", "int8": "int8",
               "i8": "int8", "int4": "int4", "i4": "int4"}
DEFAULT_DTYPE = "bf16"

COLLECTIVE_KINDS = ("AllGather", "ReduceScatter", "AllReduce", "AllToAll", "Send")


@dataclass(frozen=True)
class Span:
    """Where a piece of syntax stands in the source text (1-based line and column)."""

    line: int
    column: int
    end_line: int
    end_column: int

    @property
    def width(self) -> int:
        return max(1, self.end_column - self.column) if self.end_line == self.line else 1


NO_SPAN = Span(0, 0, 0, 0)


def _span(meta_or_tok) -> Span:
    try:
        return Span(meta_or_tok.line, meta_or_tok.column, meta_or_tok.end_line, meta_or_tok.end_column)
    except AttributeError:
        return NO_SPAN


@dataclass(frozen=True)
class DimRef:
    """One dimension of a tensor as written: ``B_XY`` is ``DimRef('B', ('X', 'Y'))``.

    A dimension written as a number (``KV[2, B_Z, S, K_Y, H]``) has ``size`` set and never carries axes.
    """

    name: str
    axes: tuple[str, ...] = ()
    size: int | None = None
    span: Span = field(default=NO_SPAN, compare=False, repr=False)

    def __str__(self) -> str:
        return self.name + format_axes(self.axes)


@dataclass(frozen=True)
class TensorRef:
    """A tensor as written: name, dimensions with their axes, unreduced axes and dtype."""

    name: str
    dims: tuple[DimRef, ...]
    unreduced: tuple[str, ...] = ()
    dtype: str | None = None
    span: Span = field(default=NO_SPAN, compare=False, repr=False)
    unreduced_span: Span = field(default=NO_SPAN, compare=False, repr=False)

    def __str__(self) -> str:
        dt = f":{self.dtype}" if self.dtype else ""
        body = f"{self.name}{dt}[{', '.join(str(d) for d in self.dims)}]"
        if self.unreduced:
            body += "{U" + format_axes(self.unreduced) + "}"
        return body


@dataclass(frozen=True)
class Einsum:
    """``A * B *_D C -> Out``, ``Out = A * B``, a reshard ``A[I_X] -> A[I]`` or a bare tensor ``A[I_X]``.

    ``contract[i]`` is the explicit contraction of the i-th product (``*_D`` gives ``('D',)``), or None
    for a plain ``*`` (contract the shared dimensions that are not needed later).
    """

    operands: tuple[TensorRef, ...]
    contract: tuple[tuple[str, ...] | None, ...]
    output: TensorRef | None
    assignment: bool
    span: Span = field(default=NO_SPAN, compare=False, repr=False)
    op_spans: tuple[Span, ...] = field(default=(), compare=False, repr=False)
    output_name: str | None = None   # ``Tmp = ...``: a named result whose layout the engine chooses

    @property
    def result_name(self) -> str | None:
        return self.output.name if self.output is not None else self.output_name

    def __str__(self) -> str:
        parts = [str(self.operands[0])]
        for c, t in zip(self.contract, self.operands[1:]):
            op = "*" if c is None else "*_" + (c[0] if len(c) == 1 else "{" + ",".join(c) + "}")
            parts.append(f"{op} {t}")
        rhs = " ".join(parts)
        if self.output is None:
            return f"{self.output_name} = {rhs}" if self.output_name else rhs
        return f"{self.output} = {rhs}" if self.assignment else f"{rhs} -> {self.output}"


@dataclass(frozen=True)
class Collective:
    """An explicit collective: ``AllGather_X(A[I_X, J]) -> A[I, J]``."""

    kind: str
    axes: tuple[str, ...]
    operand: TensorRef
    output: TensorRef
    span: Span = field(default=NO_SPAN, compare=False, repr=False)
    name_span: Span = field(default=NO_SPAN, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.kind}{format_axes(self.axes)}({self.operand}) -> {self.output}"


@dataclass(frozen=True)
class Declaration:
    """``param Win[D, F_Y], Wout[F_Y, D]``: the parameters of a program (what training differentiates)."""

    kind: str
    tensors: tuple[TensorRef, ...]
    span: Span = field(default=NO_SPAN, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.kind} " + ", ".join(str(t) for t in self.tensors)


@dataclass(frozen=True)
class Ranking:
    """``rank B=1048576, D=8192``: sizes at which to compare candidate plans when none are bound."""

    sizes: tuple[tuple[str, int], ...]
    span: Span = field(default=NO_SPAN, compare=False, repr=False)

    def __str__(self) -> str:
        return "rank " + ", ".join(f"{k}={v}" for k, v in self.sizes)


Statement = Einsum | Collective | Declaration | Ranking


@dataclass(frozen=True)
class Program:
    """A parsed program: its statements, in order, and the text they came from."""

    statements: tuple[Statement, ...]
    text: str = field(default="", compare=False, repr=False)

    def __str__(self) -> str:
        return "\n".join(str(s) for s in self.statements)


def format_axes(axes: tuple[str, ...]) -> str:
    """``('X',)`` -> ``_X``; ``('X', 'Y')`` -> ``_XY``; ``('data', 'model')`` -> ``_{data,model}``."""
    if not axes:
        return ""
    if all(len(a) == 1 for a in axes):
        return "_" + "".join(axes)
    return "_{" + ",".join(axes) + "}"


# --------------------------------------------------------------------------------------------------
# parsing


@functools.lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    # cache=True keeps lark's LALR tables in the temp folder between processes (keyed by the grammar)
    try:
        return lark.Lark(GRAMMAR_PATH.read_text(encoding="utf-8"), parser="lalr", propagate_positions=True,
                         maybe_placeholders=True, cache=True)
    except OSError:  # a read-only temp folder: build the tables every time
        return lark.Lark(GRAMMAR_PATH.read_text(encoding="utf-8"), parser="lalr", propagate_positions=True,
                         maybe_placeholders=True)


_TOKEN_NAMES = {
    "RSQB": "']'", "LSQB": "'['", "COMMA": "','", "LPAR": "'('", "RPAR": "')'", "LBRACE": "'{'",
    "RBRACE": "'}'", "EQUAL": "'='", "COLON": "':'", "SEMICOLON": "';'", "_ARROW": "'->'",
    "STAR": "'*'", "CONTRACT": "'*_D'", "NAME": "a name", "INT": "a number", "_NL": "end of line",
    "$END": "end of input",
}


def _expected(names) -> str:
    pretty = sorted({_TOKEN_NAMES.get(n, n) for n in names if not n.startswith("__")})
    if not pretty:
        return ""
    if len(pretty) == 1:
        return pretty[0]
    return ", ".join(pretty[:-1]) + " or " + pretty[-1]


def _syntax_error(text: str, err: lark.exceptions.UnexpectedInput) -> NotationError:
    line, col = getattr(err, "line", None), getattr(err, "column", None)
    tok = getattr(err, "token", None)
    if line is None or line < 1 or (tok is not None and tok.type == "$END"):  # unexpected end of input: point just past the last character
        lines = text.splitlines() or [""]
        line, col = len(lines), len(lines[-1]) + 1
    if isinstance(err, lark.exceptions.UnexpectedCharacters):
        ch = text.splitlines()[line - 1][col - 1] if text else ""
        exp = _expected(err.allowed or ())
        msg = f"unexpected character {ch!r}" + (f"; expected {exp}" if exp else "")
        return NotationError(msg, text=text, line=line, column=col)
    token = getattr(err, "token", None)
    exp = _expected(getattr(err, "expected", None) or getattr(err, "accepts", None) or ())
    if token is None or token.type == "$END":
        found, width = "end of input", 1
    elif token.type == "_NL":
        found, width = "end of line", 1
    else:
        found, width = repr(str(token)), len(str(token))
    msg = f"unexpected {found}" + (f"; expected {exp}" if exp else "")
    return NotationError(msg, text=text, line=line, column=col, width=width)


_DIM_RE = re.compile(r"^([A-Za-z][A-Za-z0-9]*)(?:_(.*))?$")


class _Builder:
    """Turns the lark tree into records; every semantic check points at the text."""

    def __init__(self, text: str):
        self.text = text

    def error(self, msg: str, span: Span, hint: str | None = None) -> NotationError:
        return NotationError(msg, text=self.text, line=span.line or None, column=span.column or None,
                             width=span.width, hint=hint)

    def axis_group(self, node) -> tuple[str, ...]:
        names = [str(t) for t in node.children]
        if len(names) == 1 and len(names[0]) > 1 and names[0].isupper() and names[0].isalpha():
            return tuple(names[0])  # B_{XY}: one-letter axes run together
        return tuple(names)

    def dim(self, node) -> DimRef:
        first = node.children[0]
        span = _span(node.meta)
        if first.type == "INT":
            return DimRef(str(first), (), int(str(first)), span=span)
        name = str(first)
        group = node.children[1]
        m = _DIM_RE.match(name)
        if m is None:
            raise self.error(f"{name!r} is not a dimension name (a letter, then letters or digits, then "
                             f"an optional _ and mesh axes)", span)
        base, run = m.group(1), m.group(2)
        if group is not None:
            if run != "":
                raise self.error(f"dimension {name!r} mixes axis letters and braces", span,
                                 hint="write B_XY, B_{XY} or B_{X,Y}")
            axes = self.axis_group(group)
        elif run is None:
            axes = ()
        elif run == "":
            raise self.error(f"dimension {name!r} has '_' but no mesh axes", span)
        else:
            if not run.isalpha():
                raise self.error(f"axes {run!r} of dimension {base} are not one-letter axis names", span,
                                 hint="multi-letter axis names need braces: B_{data,model}")
            axes = tuple(run)
        return DimRef(base, axes, span=span)

    def tensor(self, node) -> TensorRef:
        name_tok, dtype_tok = node.children[0], node.children[1]
        rest = node.children[2:]
        dims, unreduced, uspan = [], (), NO_SPAN
        for ch in rest:
            if ch is None:
                continue
            if ch.data == "dim":
                dims.append(self.dim(ch))
            elif ch.data == "unreduced":
                unreduced, uspan = self.unreduced(ch), _span(ch.meta)
        name, dtype = str(name_tok), None
        if dtype_tok is not None:
            a, b = str(name_tok), str(dtype_tok)
            if b.lower() in DTYPE_CANON:
                name, dtype = a, DTYPE_CANON[b.lower()]
            elif a.lower() in DTYPE_CANON:
                name, dtype = b, DTYPE_CANON[a.lower()]
            else:
                raise self.error(f"neither {a!r} nor {b!r} is a dtype", _span(dtype_tok),
                                 hint="dtypes: " + ", ".join(sorted(set(DTYPE_CANON.values()))))
        seen: dict[str, DimRef] = {}
        for d in dims:
            if d.size is None and d.name in seen:
                raise self.error(f"dimension {d.name} appears twice in {name}", d.span)
            seen[d.name] = d
        return TensorRef(name, tuple(dims), unreduced, dtype, span=_span(node.meta), unreduced_span=uspan)

    def unreduced(self, node) -> tuple[str, ...]:
        axes: list[str] = []
        for d in node.children:
            ref = self.dim(d)
            if ref.name != "U" or not ref.axes:
                raise self.error(f"expected U_<axes> inside the unreduced braces, found {ref}",
                                 _span(d.meta), hint="write C[I, K]{U_X}")
            axes.extend(ref.axes)
        return tuple(axes)

    def chain(self, node):
        operands, contract, spans = [], [], []
        for ch in node.children:
            if isinstance(ch, lark.Tree) and ch.data == "tensor":
                operands.append(self.tensor(ch))
            else:  # op
                tok = ch.children[0]
                spans.append(_span(tok))
                if tok.type == "STAR":
                    contract.append(None)
                else:
                    body = str(tok)[2:]
                    names = body[1:-1].split(",") if body.startswith("{") else [body]
                    names = [n.strip() for n in names]
                    if not all(_DIM_RE.match(n) and "_" not in n for n in names):
                        raise self.error(f"bad contraction {str(tok)!r}: name dimensions, e.g. *_D or "
                                         f"*_{{D,F}}", _span(tok))
                    contract.append(tuple(names))
        return tuple(operands), tuple(contract), tuple(spans)

    def statement(self, node) -> Statement:
        span = _span(node.meta)
        if node.data == "assignment":
            target = node.children[0]
            ops, contract, spans = self.chain(node.children[1])
            if isinstance(target, lark.Token):  # Tmp = ...: the engine chooses the layout
                return Einsum(ops, contract, None, True, span=span, op_spans=spans, output_name=str(target))
            return Einsum(ops, contract, self.tensor(target), True, span=span, op_spans=spans)
        if node.data == "declaration":
            return Declaration("param", tuple(self.tensor(t) for t in node.children), span=span)
        if node.data == "ranking":
            sizes = []
            for b in node.children:
                name, value = str(b.children[0]), int(str(b.children[1]))
                if value < 1:
                    raise self.error(f"rank {name}={value}: sizes are positive", _span(b.meta))
                sizes.append((name, value))
            return Ranking(tuple(sizes), span=span)
        if node.data == "expression":
            ops, contract, spans = self.chain(node.children[0])
            out = self.tensor(node.children[1]) if node.children[1] is not None else None
            return Einsum(ops, contract, out, False, span=span, op_spans=spans)
        # collective
        name_tok, group, operand, output = node.children
        name = str(name_tok)
        kind, _, run = name.partition("_")
        nspan = _span(name_tok)
        if kind not in COLLECTIVE_KINDS:
            raise self.error(f"unknown collective {kind!r}", nspan,
                             hint="collectives: " + ", ".join(COLLECTIVE_KINDS))
        if group is not None:
            if run:
                raise self.error(f"collective {name!r} mixes axis letters and braces", nspan)
            axes = self.axis_group(group)
        elif run:
            if not run.isalpha():
                raise self.error(f"axes {run!r} are not one-letter axis names", nspan,
                                 hint="multi-letter axis names need braces: AllGather_{data}")
            axes = tuple(run)
        else:
            raise self.error(f"collective {kind} names no mesh axis", nspan, hint=f"write {kind}_X(...)")
        return Collective(kind, axes, self.tensor(operand), self.tensor(output), span=span, name_span=nspan)


def parse(text: str) -> Program:
    """Parse a program (one or more statements) into a :class:`Program`.

    >>> str(parse("C[I, K] = A[I, J_X] *_J B[J_X, K]"))
    'C[I, K] = A[I, J_X] *_J B[J_X, K]'
    """
    if not isinstance(text, str):
        raise NotationError(f"expected notation text, got {type(text).__name__}")
    return _parse(text)


@functools.lru_cache(maxsize=512)
def _parse(text: str) -> Program:
    try:
        tree = _parser().parse(text)
    except lark.exceptions.UnexpectedInput as err:
        raise _syntax_error(text, err) from None
    builder = _Builder(text)
    stmts = tuple(builder.statement(ch) for ch in tree.children)
    if not stmts:
        raise NotationError("the program has no statements", text=text or " ", line=1, column=1)
    return Program(stmts, text)


def parse_tensor(text: str) -> TensorRef:
    """Parse a single tensor, e.g. ``A[I_XY, J]{U_Z}``."""
    prog = parse(text)
    st = prog.statements[0]
    if len(prog.statements) != 1 or not isinstance(st, Einsum) or len(st.operands) != 1 or st.output:
        raise NotationError("expected a single tensor such as A[I_X, J]", text=text, line=1, column=1,
                            width=len(text.splitlines()[0]) if text else 1)
    return st.operands[0]
