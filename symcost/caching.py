"""The one owner of symcost's caches.

Derivations are values: the same question (a parsed program, a plan search, a step's costs) is answered
once and kept, because sweeps and notebooks ask it again. Every cache in symcost is made here, is keyed by
values (never by objects that keep other state alive), is bounded, and is forgotten by one call::

    >>> from symcost import caching
    >>> @caching.memoize(maxsize=4)
    ... def square(x):
    ...     return x * x
    >>> square(3), square.cache_info().currsize
    (9, 1)
    >>> caching.clear(); square.cache_info().currsize
    0
"""
from __future__ import annotations

import functools

_CACHES: list = []


def memoize(maxsize: int = 1024):
    """``functools.lru_cache`` with a bound, registered so that :func:`clear` forgets it."""
    if maxsize is None or maxsize < 1:
        raise ValueError("symcost's caches are bounded: give maxsize >= 1")

    def wrap(fn):
        cached = functools.lru_cache(maxsize=maxsize)(fn)
        _CACHES.append(cached)
        return cached
    return wrap


def clear() -> None:
    """Forget everything every symcost cache holds."""
    for c in _CACHES:
        c.cache_clear()


def entries() -> int:
    """How many entries the caches hold together (for tests and benchmarks)."""
    return sum(c.cache_info().currsize for c in _CACHES)


def registered() -> tuple:
    """The cached functions, for inspection."""
    return tuple(_CACHES)
