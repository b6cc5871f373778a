"""Element types as data: name, aliases, bytes per element, where the size comes from.

    >>> nbytes("bfloat16"), nbytes("int4"), canonical("i8")
    (2, 0.5, 'int8')
    >>> wider("int8", "bf16")
    'bf16'

A tensor written without a dtype is bf16 (book Part 3). FLOP rates per dtype belong to the hardware
presets, not here.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import sympy as sp

from .errors import UsageError


@dataclass(frozen=True)
class DType:
    name: str
    bytes: Fraction
    aliases: tuple[str, ...]
    source: str


TABLE: tuple[DType, ...] = (
    DType("fp32", Fraction(4), ("f32", "float32"), "IEEE 754 binary32"),
    DType("bf16", Fraction(2), ("bfloat16",), "bfloat16: 8 exponent and 7 mantissa bits (the book's default)"),
    DType("fp16", Fraction(2), ("f16", "float16"), "IEEE 754 binary16"),
    DType("fp8", Fraction(1), ("f8", "float8", "e4m3", "e5m2"), "OCP 8-bit floating point (E4M3 / E5M2)"),
    DType("int8", Fraction(1), ("i8",), "8-bit integers (the book's int8 weights and KV caches)"),
    DType("int4", Fraction(1, 2), ("i4",), "4-bit integers, two to a byte"),
)
DEFAULT = "bf16"
_BY_NAME = {n: d for d in TABLE for n in (d.name,) + d.aliases}


def is_dtype(name: str) -> bool:
    return str(name).lower() in _BY_NAME


def lookup(name: str) -> DType:
    d = _BY_NAME.get(str(name).lower())
    if d is None:
        raise UsageError(f"unknown dtype {name!r}; dtypes: {', '.join(names())}")
    return d


def canonical(name: str | None) -> str | None:
    """The canonical spelling (``bfloat16`` -> ``bf16``); None stays None."""
    return None if name is None else lookup(name).name


def names() -> tuple[str, ...]:
    return tuple(d.name for d in TABLE)


def nbytes(name: str) -> int | float:
    """Bytes per element as a plain number (int where whole)."""
    b = lookup(name).bytes
    return int(b) if b.denominator == 1 else float(b)


def nbytes_expr(name: str) -> sp.Rational:
    """Bytes per element as an exact SymPy number."""
    b = lookup(name).bytes
    return sp.Rational(b.numerator, b.denominator)


def wider(a: str, b: str) -> str:
    """The dtype with more bytes per element (``a`` on a tie)."""
    return a if lookup(a).bytes >= lookup(b).bytes else b
