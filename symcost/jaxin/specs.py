"""The command line's small languages for a traced function, read by hand (never evaluated): the abstract
arguments ``x=bf16[8,2048,4096],w=bf16[4096,14336]``, the shardings ``x=B_X,T,D;w=D,F_Y`` and dimension
names ``K=8,H=128``. Every error says where in the text it is.

    >>> parse_args("x=bf16[8,2048],w=f32[2048,64]")
    {'x': ('bf16', (8, 2048)), 'w': ('fp32', (2048, 64))}
    >>> parse_specs("x=B_X,T,D;w=D,F_{X,Y}")
    {'x': (('B', ('X',)), ('T', ()), ('D', ())), 'w': (('D', ()), ('F', ('X', 'Y')))}
"""
from __future__ import annotations

import re

from .. import dtypes
from ..errors import UsageError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIM = re.compile(r"([A-Za-z][A-Za-z0-9]*)(?:_(\{[A-Za-z0-9_, ]*\}|[A-Za-z]+))?$")

#: JAX's dtype names -> the notation's
JAX_DTYPES = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16", "int8": "int8", "int4": "int4",
              "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "float8_e4m3": "fp8", "uint8": "int8"}


def _fail(what: str, text: str, pos: int, why: str) -> UsageError:
    return UsageError(f"{what} {text!r}: {why} (at character {pos + 1})")


def _split(text: str, sep: str):
    """(start, piece) for each piece of ``text`` between ``sep`` outside brackets and braces."""
    depth, start = 0, 0
    for i, ch in enumerate(text + sep):
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == sep and depth == 0:
            yield start, text[start:i]
            start = i + 1
    if depth:                   # an unclosed bracket: the rest is one piece, which its reader refuses
        yield start, text[start:]


def _named(what: str, text: str, start: int, piece: str) -> tuple[str, str, int]:
    lead = len(piece) - len(piece.lstrip())
    name, eq, rest = piece.strip().partition("=")
    if not eq:
        raise _fail(what, text, start + lead, f"write NAME=..., not {piece.strip()!r}")
    if not _NAME.fullmatch(name.strip()):
        raise _fail(what, text, start + lead, f"{name.strip()!r} is not a name")
    return name.strip(), rest, start + piece.index("=") + 1


def parse_args(text: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """``x=bf16[8,2048]`` per argument: {name: (dtype, shape)}."""
    out = {}
    for start, piece in _split(text, ","):
        name, rest, at = _named("--args", text, start, piece)
        m = re.fullmatch(r"\s*([A-Za-z][A-Za-z0-9_]*)\[([0-9,\s]*)\]\s*", rest)
        if not m:
            raise _fail("--args", text, at, f"write {name}=DTYPE[SIZE,...], e.g. {name}=bf16[8,4096]")
        if not dtypes.is_dtype(m.group(1)):
            raise _fail("--args", text, at, f"unknown dtype {m.group(1)!r}; dtypes: {', '.join(dtypes.names())}")
        sizes = [s.strip() for s in m.group(2).split(",") if s.strip()]
        if any(not s.isdigit() or int(s) < 1 for s in sizes):
            raise _fail("--args", text, at, "sizes are positive integers")
        if name in out:
            raise _fail("--args", text, start, f"{name} is given twice")
        out[name] = (dtypes.canonical(m.group(1)), tuple(int(s) for s in sizes))
    return out


def parse_spec(text: str, what: str = "--specs", base: int = 0, full: str | None = None):
    """``B_X,T,D``: ((name, mesh axes), ...) per array axis."""
    full = text if full is None else full
    out = []
    for start, piece in _split(text, ","):
        m = _DIM.fullmatch(piece.strip())
        if not m:
            raise _fail(what, full, base + start, f"{piece.strip()!r} is not a dimension (write D, D_X or D_XY)")
        axes = m.group(2) or ""
        if axes.startswith("{"):
            axes = tuple(a.strip() for a in axes[1:-1].split(",") if a.strip())
        else:
            axes = tuple(axes)
        out.append((m.group(1), axes))
    return tuple(out)


def parse_specs(text: str) -> dict[str, tuple]:
    """``x=B_X,T,D;w=D,F_Y``: {argument: ((name, axes), ...)}."""
    out = {}
    for start, piece in _split(text, ";"):
        if not piece.strip():
            continue
        name, rest, at = _named("--specs", text, start, piece)
        out[name] = parse_spec(rest, "--specs", at, text)
    return out


def parse_names(text: str) -> dict[str, int]:
    """``K=8,H=128``: names for dimensions the specs do not name, by their size."""
    out = {}
    for start, piece in _split(text, ","):
        name, rest, at = _named("--names", text, start, piece)
        if not rest.strip().isdigit():
            raise _fail("--names", text, at, "write NAME=SIZE")
        out[name] = int(rest)
    return out


def notation_dtype(dtype) -> str:
    """The notation's name of a JAX dtype; one it cannot hold is an error naming it."""
    name = str(dtype)
    if name in JAX_DTYPES:
        return JAX_DTYPES[name]
    raise UsageError(f"the notation has no dtype for {name} (it holds {', '.join(dtypes.names())})")
