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


def kept_hash(self) -> int:
    """``__hash__`` for a frozen dataclass hashed again and again (a search's layouts, a run's layer): its
    fields' hash, computed once and kept on the instance (write ``__hash__ = caching.kept_hash`` in the class
    body, with ``__getstate__ = caching.state_without_hash``: the kept hash is this process's)."""
    try:
        return self._hash
    except AttributeError:
        h = hash(tuple(getattr(self, f) for f in self.__dataclass_fields__))
        object.__setattr__(self, "_hash", h)
        return h


def state_without_hash(self) -> dict:
    return {k: v for k, v in self.__dict__.items() if k != "_hash"}


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
