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

import contextlib
import functools
import types

_CACHES: list = []
_FACTOR = [1]        # how many times larger than their bounds the stores are now (see widened)


def memoize(maxsize: int = 1024):
    """``functools.lru_cache`` with a bound, registered so that :func:`clear` forgets it (and
    :func:`widened` can give it a larger one for a while)."""
    if maxsize is None or maxsize < 1:
        raise ValueError("symcost's caches are bounded: give maxsize >= 1")

    def wrap(fn):
        cached = _Cache(fn, maxsize)
        _CACHES.append(cached)
        return cached
    return wrap


class _Cache:
    """A bounded cache of ``fn`` whose store :func:`widened` can exchange for a larger one."""

    def __init__(self, fn, maxsize: int):
        self.__wrapped__, self.maxsize = fn, maxsize
        self._store = functools.lru_cache(maxsize=maxsize)(fn)
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        return self._store(*args, **kwargs)

    def __reduce__(self) -> str:
        return self.__qualname__         # pickled by name, as the function it caches

    def __get__(self, obj, owner=None):
        """A cached method binds like a function (the instance is part of the key)."""
        return self if obj is None else types.MethodType(self, obj)

    def cache_info(self):
        return self._store.cache_info()

    def cache_clear(self) -> None:
        self._store.cache_clear()


@contextlib.contextmanager
def widened(factor: int):
    """Every cache ``factor`` times larger inside this block, then its bound again with what it held before.
    A search owns the larger stores: its thousands of candidates share statement plans (the same chain
    problems, routes and step costs) far beyond the bounds a single derivation needs, and what it kept is
    freed when it ends."""
    if factor <= _FACTOR[0]:       # already as wide (a search inside a search's process)
        yield
        return
    before, _FACTOR[0], was = [c._store for c in _CACHES], factor, _FACTOR[0]
    for c in _CACHES:
        c._store = functools.lru_cache(maxsize=c.maxsize * factor)(c.__wrapped__)
    try:
        yield
    finally:
        _FACTOR[0] = was
        for c, store in zip(_CACHES, before):
            c._store = store


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
