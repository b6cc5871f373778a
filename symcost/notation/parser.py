"""Text -> syntax tree, every error a :class:`~symcost.errors.NotationError` with line, column and caret.

    >>> prog = parse("In[B_X, D_Y] * W[D_X, F_Y] -> Out[B_X, F_Y]")
    >>> [str(t) for t in prog.statements[0].operands]
    ['In[B_X, D_Y]', 'W[D_X, F_Y]']

The grammar is ``symcost/grammar/symcost.lark``; this module turns lark's tree into the records of
:mod:`symcost.notation.records` and checks what the grammar cannot (dimension names, dtypes, collective
names), pointing at the text.
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import cast
from pathlib import Path

import lark

from .. import caching, dtypes
from ..errors import NotationError
from .records import (COLLECTIVE_KINDS, HOST_KINDS, NO_SPAN, Apply, Collective, Declaration, DimRef, Einsum, Program,
                      Ranking, Span, Statement, TensorRef)

GRAMMAR_PATH = Path(__file__).parent.parent / "grammar" / "symcost.lark"


def _span(meta_or_tok) -> Span:
    try:
        return Span(meta_or_tok.line, meta_or_tok.column, meta_or_tok.end_line, meta_or_tok.end_column)
    except AttributeError:
        return NO_SPAN


@caching.memoize(maxsize=1, holds_state=True)
def _parser() -> lark.Lark:
    # cache=True keeps lark's LALR tables in the temp folder between processes (keyed by the grammar)
    kw = dict(parser="lalr", propagate_positions=True, maybe_placeholders=True)
    text = GRAMMAR_PATH.read_text(encoding="utf-8")
    try:
        return lark.Lark(text, cache=True, **kw)
    except OSError:  # a read-only temp folder: build the tables every time
        return lark.Lark(text, **kw)


_TOKEN_NAMES = {
    "RSQB": "']'", "LSQB": "'['", "COMMA": "','", "LPAR": "'('", "RPAR": "')'", "LBRACE": "'{'",
    "RBRACE": "'}'", "EQUAL": "'='", "COLON": "':'", "SEMICOLON": "';'", "_ARROW": "'->'",
    "STAR": "'*'", "CONTRACT": "'*_D'", "NAME": "a name", "INT": "a number", "_NL": "end of line",
    "GROUPED": "a name", "$END": "end of input",
}


def _expected(names) -> str:
    pretty = sorted({_TOKEN_NAMES.get(n, n) for n in names if not n.startswith("__")})
    if not pretty:
        return ""
    if len(pretty) == 1:
        return pretty[0]
    return ", ".join(pretty[:-1]) + " or " + pretty[-1]


def _acceptable(err) -> set:
    """The tokens the parser could take where it stopped (exact, unlike a merged LALR state's lookahead)."""
    ip = getattr(err, "interactive_parser", None)
    if ip is not None:
        try:
            return set(ip.accepts())
        except Exception:  # noqa: BLE001 - fall back to lark's own list
            pass
    return set(getattr(err, "expected", None) or getattr(err, "accepts", None) or ())


def _syntax_error(text: str, err: lark.exceptions.UnexpectedInput) -> NotationError:
    line, col = getattr(err, "line", None), getattr(err, "column", None)
    tok = getattr(err, "token", None)
    if line is None or line < 1 or (tok is not None and tok.type == "$END"):
        lines = text.splitlines() or [""]   # unexpected end of input: point just past the last character
        line, col = len(lines), len(lines[-1]) + 1
    line, col = cast(int, line), cast(int, col)   # lark's position, or the end of the input above
    if isinstance(err, lark.exceptions.UnexpectedCharacters):
        ch = text.splitlines()[line - 1][col - 1] if text else ""
        exp = _expected(err.allowed or ())
        return NotationError(f"unexpected character {ch!r}" + (f"; expected {exp}" if exp else ""),
                             text=text, line=line, column=col)
    exp = _expected(_acceptable(err))
    if tok is None or tok.type == "$END":
        found, width = "end of input", 1
    elif tok.type == "_NL":
        found, width = "end of line", 1
    else:
        found, width = repr(str(tok)), len(str(tok))
    return NotationError(f"unexpected {found}" + (f"; expected {exp}" if exp else ""), text=text, line=line,
                         column=col, width=width)


_DIM_RE = re.compile(r"^([A-Za-z][A-Za-z0-9]*)(?:_(.*))?$")


class _Builder:
    """Turns the lark tree into records; every semantic check points at the text."""

    def __init__(self, text: str):
        self.text = text

    def error(self, msg: str, span: Span, hint: str | None = None) -> NotationError:
        return NotationError(msg, text=self.text, line=span.line or None, column=span.column or None,
                             width=span.width, hint=hint)

    @staticmethod
    def group_axes(node) -> tuple[str, ...]:
        """``B_{XY}`` (one-letter axes run together), ``B_{X,Y}``, ``B_{data,model}``."""
        names = [str(t) for t in node.children[1:] if isinstance(t, lark.Token)]
        if len(names) == 1 and len(names[0]) > 1 and names[0].isupper() and names[0].isalpha():
            return tuple(names[0])
        return tuple(names)

    def shift(self, node) -> int | None:
        """The hop count of ``Send_{Z,2}`` / ``Send_{Z,-1}`` (None when the braces hold only axes)."""
        shifts = [t for t in node.children[1:] if isinstance(t, lark.Tree)]
        if not shifts:
            return None
        if len(shifts) > 1 or node.children[-1] is not shifts[0]:
            raise self.error("a hop count comes once, after the mesh axes: Send_{Z,2}", _span(shifts[-1].meta))
        return int("".join(str(t) for t in shifts[0].children if t is not None))

    def dim(self, node) -> DimRef:
        first = node.children[0]
        span = _span(node.meta)
        if isinstance(first, lark.Token) and first.type == "INT":
            return DimRef(str(first), (), int(str(first)), span=span)
        if isinstance(first, lark.Tree):  # B_{X,Y}
            if self.shift(first) is not None:
                raise self.error("a number among a dimension's mesh axes: only a send takes a hop count "
                                 "(Send_{Z,2})", span)
            base = str(first.children[0])[:-2]
            if not re.match(r"^[A-Za-z][A-Za-z0-9]*$", base):
                raise self.error(f"{base!r} is not a dimension name (a letter, then letters or digits)", span)
            return DimRef(base, self.group_axes(first), span=span)
        name = str(first)
        m = _DIM_RE.match(name)
        if m is None:
            raise self.error(f"{name!r} is not a dimension name (a letter, then letters or digits, then "
                             f"an optional _ and mesh axes)", span)
        base, run = m.group(1), m.group(2)
        if run is None:
            return DimRef(base, span=span)
        if run == "":
            raise self.error(f"dimension {name!r} has '_' but no mesh axes", span)
        if not run.isalpha():
            raise self.error(f"axes {run!r} of dimension {base} are not one-letter axis names", span,
                             hint="multi-letter axis names need braces: B_{data,model}")
        return DimRef(base, tuple(run), span=span)

    def tensor(self, node) -> TensorRef:
        name_tok, dtype_tok = node.children[0], node.children[1]
        dims, uspan = [], NO_SPAN
        unreduced: tuple[str, ...] = ()
        for ch in node.children[2:]:
            if ch is None:
                continue
            if ch.data == "dim":
                dims.append(self.dim(ch))
            elif ch.data == "unreduced":
                unreduced, uspan = self.unreduced(ch), _span(ch.meta)
        name, dtype = str(name_tok), None
        if dtype_tok is not None:
            a, b = str(name_tok), str(dtype_tok)
            if dtypes.is_dtype(b):
                name, dtype = a, dtypes.canonical(b)
            elif dtypes.is_dtype(a):
                name, dtype = b, dtypes.canonical(a)
            else:
                raise self.error(f"neither {a!r} nor {b!r} is a dtype", _span(dtype_tok),
                                 hint="dtypes: " + ", ".join(dtypes.names()))
        seen: set[str] = set()
        for d in dims:
            if d.size is None and d.name in seen:
                raise self.error(f"dimension {d.name} appears twice in {name}", d.span)
            seen.add(d.name)
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
                continue
            tok = ch.children[0]
            spans.append(_span(tok))
            if tok.type == "STAR":
                contract.append(None)
                continue
            body = str(tok)[2:]
            names = [n.strip() for n in (body[1:-1].split(",") if body.startswith("{") else [body])]
            if not all(_DIM_RE.match(n) and "_" not in n for n in names):
                raise self.error(f"bad contraction {str(tok)!r}: name dimensions, e.g. *_D or *_{{D,F}}",
                                 _span(tok))
            contract.append(tuple(names))
        return tuple(operands), tuple(contract), tuple(spans)

    def statement(self, node) -> Statement:
        span = _span(node.meta)
        kind = node.data
        if kind == "assignment":
            target = node.children[0]
            ops, contract, spans = self.chain(node.children[1])
            if isinstance(target, lark.Token):  # Tmp = ...: the engine chooses the layout
                return Einsum(ops, contract, None, True, span=span, op_spans=spans, output_name=str(target))
            return Einsum(ops, contract, self.tensor(target), True, span=span, op_spans=spans)
        if kind == "apply":
            return self.apply(node, span)
        if kind == "declaration":
            return Declaration("param", tuple(self.tensor(t) for t in node.children), span=span)
        if kind == "ranking":
            return Ranking(tuple(self.binding(b) for b in node.children), span=span)
        if kind == "expression":
            ops, contract, spans = self.chain(node.children[0])
            out = self.tensor(node.children[1]) if node.children[1] is not None else None
            return Einsum(ops, contract, out, False, span=span, op_spans=spans)
        return self.collective(node, span)

    def apply(self, node, span: Span) -> Apply:
        """``Out[...] = Op_D(In[...], ...)``: elementwise work (the planner checks the operation's name)."""
        target, head, *operands = node.children
        nspan = _span(head.meta if isinstance(head, lark.Tree) else head)
        if isinstance(head, lark.Tree):  # Softmax_{S}
            op, subs = str(head.children[0])[:-2], [str(t) for t in head.children[1:]]
        else:
            op, _, run = str(head).partition("_")
            subs = [run] if run else []
        if len(subs) > 1:
            raise self.error(f"{op} works over one dimension, not {', '.join(subs)}", nspan)
        if subs and not re.match(r"^[A-Za-z][A-Za-z0-9]*$", subs[0]):
            raise self.error(f"{subs[0]!r} is not a dimension name", nspan)
        ops = tuple(self.tensor(t) for t in operands)
        if isinstance(target, lark.Token):
            return Apply(op, subs[0] if subs else None, ops, None, str(target), span=span, name_span=nspan)
        return Apply(op, subs[0] if subs else None, ops, self.tensor(target), span=span, name_span=nspan)

    def binding(self, node) -> tuple[str, int]:
        name, value = str(node.children[0]), int(str(node.children[1]))
        if value < 1:
            raise self.error(f"rank {name}={value}: sizes are positive", _span(node.meta))
        return name, value

    def collective(self, node, span: Span) -> Collective:
        head, operand, output = node.children
        nspan = _span(head.meta if isinstance(head, lark.Tree) else head)
        distance = None
        if isinstance(head, lark.Tree):  # AllGather_{X,Y}, Send_{Z,2}
            kind, axes, distance = str(head.children[0])[:-2], self.group_axes(head), self.shift(head)
        else:
            kind, _, run = str(head).partition("_")
            if not run:
                if kind in COLLECTIVE_KINDS and kind not in HOST_KINDS:
                    raise self.error(f"collective {kind} names no mesh axis", nspan, hint=f"write {kind}_X(...)")
            elif not run.isalpha():
                raise self.error(f"axes {run!r} are not one-letter axis names", nspan,
                                 hint="multi-letter axis names need braces: AllGather_{data}")
            axes = tuple(run)
        if kind not in COLLECTIVE_KINDS:
            raise self.error(f"unknown collective {kind!r}", nspan, hint="collectives: " + ", ".join(COLLECTIVE_KINDS))
        if kind in HOST_KINDS and axes:
            raise self.error(f"{kind} moves each device's block between its HBM and its host's memory; it names no "
                             f"mesh axis", nspan, hint=f"write {kind}(A[...]) -> A[...]")
        if distance is not None and kind != "Send":
            raise self.error(f"only a send takes a hop count, not {kind}", nspan,
                             hint="write Send_{Z,2}(A[...]) -> A[...]")
        if distance == 0:
            raise self.error("a send of zero hops moves nothing", nspan, hint="write Send_{Z,1} or leave it out")
        return Collective(kind, axes, self.tensor(operand), self.tensor(output), span=span, name_span=nspan,
                          distance=distance)


def parse(text: str) -> Program:
    """Parse a program (one or more statements) into a :class:`Program`.

    >>> str(parse("C[I, K] = A[I, J_X] *_J B[J_X, K]"))
    'C[I, K] = A[I, J_X] *_J B[J_X, K]'
    """
    if not isinstance(text, str):
        raise NotationError(f"expected notation text, got {type(text).__name__}")
    return _parse(text.removeprefix("\ufeff"))     # a UTF-8 byte-order mark is not part of the program


@caching.memoize(maxsize=512)
def _parse(text: str) -> Program:
    """A program, line by line where it can be: no statement spans two lines, so each line is parsed
    once (kept: the programs a search writes share most of their lines) and its spans moved down to where
    it stands. Any error is reported by the whole text's parse, which points at it in the program."""
    stmts: list = []
    for i, line in enumerate(text.split("\n")):
        got = _line_at(line.removesuffix("\r"), i)
        if got is None:
            return _parsed_whole(text)
        stmts.extend(got)
    if not stmts:
        raise NotationError("the program has no statements", text=text or " ", line=1, column=1)
    return Program(tuple(stmts), text)


@caching.memoize(maxsize=4096)
def _line_at(line: str, row: int) -> tuple | None:
    """The statements of one line standing ``row`` lines down (kept: a search's programs have the same
    line at the same place, each with other shardings elsewhere, and moving its spans is most of a parse)."""
    got = _line(line)
    return got if got is None or row == 0 else tuple(_moved(st, row) for st in got)


@caching.memoize(maxsize=4096)
def _line(line: str) -> tuple | None:
    """The statements of one line, their spans on line 1; None where the line is not a program of its own
    (an error, reported where the whole text is parsed)."""
    if not line.strip():
        return ()
    try:
        tree = _parser().parse(line)
        builder = _Builder(line)
        return tuple(builder.statement(ch) for ch in tree.children)
    except (lark.exceptions.UnexpectedInput, NotationError):
        return None


def _moved(record, lines: int):
    """``record`` (a statement, a tensor, a dimension, a span) with every span ``lines`` lines further down."""
    if isinstance(record, Span):
        return record if record.line == 0 else Span(record.line + lines, record.column, record.end_line + lines,
                                                    record.end_column)
    if isinstance(record, tuple):
        return tuple(_moved(r, lines) for r in record)
    fields = _SPANNED.get(type(record))
    if fields is None:
        return record
    return replace(record, **{f: _moved(getattr(record, f), lines) for f in fields})


#: the fields of each record that hold spans or records with spans
_SPANNED: dict = {
    DimRef: ("span",),
    TensorRef: ("dims", "span", "unreduced_span"),
    Einsum: ("operands", "output", "span", "op_spans"),
    Collective: ("operand", "output", "span", "name_span"),
    Apply: ("operands", "output", "span", "name_span"),
    Declaration: ("tensors", "span"),
    Ranking: ("span",),
}


def _parsed_whole(text: str) -> Program:
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
