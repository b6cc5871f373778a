"""The one owner of symcost's caches, and the planning contexts that hold them.

Derivations are values: the same question (a parsed program, a plan search, a step's costs) is answered
once and kept, because sweeps and notebooks ask it again. Every cache in symcost is made here by
:func:`memoize`, is keyed by values (never by objects that keep other state alive), is bounded, and keeps
immutable answers (tuples, frozen dataclasses, read-only mappings), so that one caller cannot change
what the next one is given::

    >>> from symcost import caching
    >>> @caching.memoize(maxsize=4)
    ... def square(x):
    ...     return x * x
    >>> square(3), square.cache_info().currsize
    (9, 1)
    >>> caching.clear(); square.cache_info().currsize
    0

The caches belong to a **planning context** (as ``opt_einsum.shared_intermediates`` owns the
intermediates of the contractions run inside it). The default context is the process's: every call
outside a ``with`` block shares it, as before. A derivation or a search that wants its own opens one, and
everything it memoises is kept there and forgotten when the block ends::

    >>> with caching.context() as mine:
    ...     square(4)
    ...     mine.entries()
    16
    1
    >>> square.cache_info().currsize          # the process's context did not see it
    0

``caching.disabled()`` (or ``SYMCOST_CACHE=off`` in the environment, for the whole process) runs with no
caches at all: every answer is computed afresh, and must be the same (a test derives programs both ways and
compares their plans). ``caching.context(check=True)`` verifies every answer it keeps is immutable.
"""
from __future__ import annotations

import contextvars
import dataclasses
import functools
import gc
import operator
import os
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["memoize", "context", "disabled", "current", "Caches", "clear", "entries", "registered", "frozen",
           "resolved", "kept_hash", "state_without_hash", "collector_paused"]

_MEMOS: list = []


class Caches:
    """One planning context: the caches of every memoised function, made as each is first called here.
    ``enabled=False``: none (each call is computed afresh). ``check=True``: every answer kept is verified
    to be immutable (:func:`frozen`). ``wider``: each cache holds that many times its bound (a search's
    thousands of candidates share statement plans far beyond what one derivation needs)."""

    def __init__(self, enabled: bool = True, check: bool = False, wider: int = 1):
        self.enabled, self.check, self.wider = enabled, check, wider
        self._fns: dict = {}

    def function(self, memo: "_Memo") -> Callable:
        """``memo``'s function as this context runs it (cached or not)."""
        fn = self._fns.get(memo)
        if fn is None:
            if not self.enabled:
                fn = memo.fn
            elif self.check:
                fn = functools.lru_cache(maxsize=memo.maxsize * (self.wider if memo.widens else 1))(_checked(memo))
            else:
                fn = functools.lru_cache(maxsize=memo.maxsize * (self.wider if memo.widens else 1))(memo.fn)
            self._fns[memo] = fn
        return fn

    def clear(self) -> None:
        for fn in self._fns.values():
            if hasattr(fn, "cache_clear"):
                fn.cache_clear()

    def entries(self) -> int:
        """How many answers this context keeps."""
        return sum(fn.cache_info().currsize for fn in self._fns.values() if hasattr(fn, "cache_info"))


_DEFAULT = Caches(enabled=os.environ.get("SYMCOST_CACHE", "on").lower() not in ("off", "0", "no", "false"))
_CURRENT: contextvars.ContextVar[Caches] = contextvars.ContextVar("symcost_caches", default=_DEFAULT)


def current() -> Caches:
    """The planning context calls run in now."""
    return _CURRENT.get()


@contextmanager
def context(enabled: bool = True, check: bool = False, wider: int = 1) -> Iterator[Caches]:
    """A planning context of its own for the calls inside the ``with`` block (asyncio tasks started inside
    inherit it; a thread or a worker process starts in the process's context); its caches are dropped when
    the block ends. ``wider``: its caches hold that many times their bounds (a search opens one so). The
    garbage collector is paused while it is open (:func:`collector_paused`)."""
    caches = Caches(enabled, check, wider)
    token = _CURRENT.set(caches)
    with collector_paused():         # dropped before the collector resumes: its next pass need not walk them
        try:
            yield caches
        finally:
            _CURRENT.reset(token)
            caches.clear()


def collector_paused() -> "_Paused":
    """Python's cyclic garbage collector paused for a ``with`` block, or for each call of a function it
    decorates (a derivation, a search), put back as it was when the last such block open in the process ends
    (in any thread); reference counting frees the engine's values as ever. A collector the caller had paused
    stays paused."""
    return _PAUSED


class _Paused:
    """:func:`collector_paused`: a context manager and a decorator (no generator made at each call: a
    search's pieces call a decorated derivation thousands of times)."""

    def __enter__(self) -> None:
        _COLLECTOR.pause(True)

    def __exit__(self, *exc) -> None:
        _COLLECTOR.pause(False)

    def __call__(self, fn: Callable) -> Callable:
        pause = _COLLECTOR.pause

        @functools.wraps(fn)
        def paused(*args, **kwargs):
            pause(True)
            try:
                return fn(*args, **kwargs)
            finally:
                pause(False)
        return paused


class _Collector:
    """The collector's state while planning blocks are open (in any thread): paused when the first opens,
    put back when the last closes.

    Why planning pauses it: the engine's values are immutable tuples and frozen dataclasses that reference
    counting frees, and the collector finds next to no cyclic garbage among them (none after a serving
    search of LLaMA 3 8B, 26 objects after a search of the MLP), yet each of its passes walks the objects
    the caches keep, hundreds of thousands in a search. Paused, a serving search of DeepSeek-V3 on 64 H100s
    took 5.8 s of CPU, not 8.9 s, and the LLaMA 3 8B layer's bounded search on h100 X=4,Y=2,Z=2 43 s, not
    50-53 s (its full passes were already a hundred times rarer), with the same answers and peak memory."""

    def __init__(self):
        self.open, self.was, self.lock = 0, True, threading.Lock()

    def pause(self, opening: bool) -> None:
        with self.lock:
            if opening:
                if self.open == 0:
                    self.was = gc.isenabled()
                    gc.disable()
                self.open += 1
            else:
                self.open -= 1
                if self.open == 0 and self.was:
                    gc.enable()


_COLLECTOR = _Collector()
_PAUSED = _Paused()


def disabled():
    """A context without caches: every answer is computed afresh."""
    return context(enabled=False)


@dataclasses.dataclass(frozen=True, eq=False)
class _Memo:
    fn: Callable
    maxsize: int
    holds_state: bool      # the answer is itself a cache the context owns (a parser, a layout graph)
    widens: bool = True    # a wider context holds more of them


def memoize(maxsize: int = 1024, holds_state: bool = False, widens: bool = True):
    """Keep a function's answers in the current planning context, at most ``maxsize`` of them (least
    recently used dropped first). Answers must be immutable; ``holds_state``: the answer is a cache object
    itself (a layout graph that grows as searches use it), owned by the context like the other caches.
    ``widens=False``: a context with wider caches keeps no more of them (answers large in memory and read
    again soon after they are made, or never)."""
    if maxsize is None or maxsize < 1:
        raise ValueError("symcost's caches are bounded: give maxsize >= 1")

    def wrap(fn):
        memo = _Memo(fn, maxsize, holds_state, widens)
        get, default, in_default = _CURRENT.get, _DEFAULT, _DEFAULT.function(memo)

        @functools.wraps(fn)
        def cached(*args, **kwargs):
            caches = get()
            if caches is default:              # the common case: one lookup, then the C cache
                return in_default(*args, **kwargs)
            f = caches._fns.get(memo)
            if f is None:
                f = caches.function(memo)
            return f(*args, **kwargs)

        cached.cache_info = lambda: _info(current(), memo)
        cached.cache_clear = lambda: getattr(current().function(memo), "cache_clear", lambda: None)()
        cached.memo = memo
        _MEMOS.append(cached)
        return cached
    return wrap


def resolved(memoised: Callable) -> Callable:
    """The function a :func:`memoize`-d one runs as in the current planning context (its cache there, or the
    bare function where caches are off): for a loop that calls it thousands of times in one context, which
    then skips finding the context at each call. Use it only for the loop's lifetime (a context opened
    later has caches of its own)::

        >>> @memoize(maxsize=4)
        ... def cube(x):
        ...     return x ** 3
        >>> with context():
        ...     f = resolved(cube)
        ...     [f(x) for x in (1, 2, 2)], cube.cache_info().hits
        ([1, 8, 8], 1)
    """
    memo: _Memo = memoised.memo  # type: ignore[attr-defined]
    return current().function(memo)


def _info(caches: Caches, memo: _Memo):
    fn = caches.function(memo)
    if hasattr(fn, "cache_info"):
        return fn.cache_info()
    return functools._CacheInfo(0, 0, memo.maxsize, 0)


def _checked(memo: _Memo) -> Callable:
    @functools.wraps(memo.fn)
    def run(*args, **kwargs):
        out = memo.fn(*args, **kwargs)
        if not memo.holds_state and not frozen(out):
            raise TypeError(f"{memo.fn.__module__}.{memo.fn.__qualname__} keeps a mutable answer "
                            f"({type(out).__name__}); return a tuple, frozenset, frozen dataclass or read-only mapping")
        return out
    return run


def frozen(value, _depth: int = 0) -> bool:
    """Whether ``value`` cannot be changed through itself: numbers, strings, None, SymPy expressions,
    functions, tuples and frozensets of such, read-only mappings, frozen dataclasses, read-only NumPy
    arrays (checked a few levels deep)."""
    if _depth > 6 or value is None or isinstance(value, (bool, int, float, complex, str, bytes, range)):
        return True
    mod = type(value).__module__ or ""
    if mod.startswith("sympy") or isinstance(value, type):
        return True
    if isinstance(value, (tuple, frozenset)):
        return all(frozen(v, _depth + 1) for v in value)
    if isinstance(value, types.MappingProxyType):
        return all(frozen(v, _depth + 1) for v in value.values())
    if mod.startswith("numpy"):
        return not getattr(value, "flags", None) or not value.flags.writeable
    if dataclasses.is_dataclass(value):
        params = getattr(type(value), "__dataclass_params__", None)
        return bool(params and params.frozen) and all(
            frozen(getattr(value, f.name), _depth + 1) for f in dataclasses.fields(value) if f.compare)
    return bool(getattr(type(value), "__frozen_value__", False)) or (callable(value) and not hasattr(value, "__dict__")
                                                                      or isinstance(value, types.FunctionType))


def kept_hash(self) -> int:
    """``__hash__`` for a frozen dataclass hashed again and again (a search's layouts, a run's layer): its
    fields' hash, computed once and kept on the instance (write ``__hash__ = caching.kept_hash`` in the class
    body, with ``__getstate__ = caching.state_without_hash``: the kept hash is this process's). A hash is the
    value's, whatever context asks, so it is no cache a context needs to own."""
    h = getattr(self, "_hash", None)       # no exception raised where it is not kept yet: half the cost
    if h is None:
        fields = _FIELDS.get(type(self)) or _fields(type(self))
        h = self.__dict__["_hash"] = hash(fields(self))
    return h


#: each class's fields read at once, as a tuple (:func:`kept_hash`; as constant as the class itself)
_FIELDS: dict[type, Callable] = {}


def _fields(cls: type) -> Callable:
    names = tuple(cls.__dataclass_fields__)       # type: ignore[attr-defined]
    _FIELDS[cls] = getter = operator.attrgetter(*names) if len(names) > 1 else (lambda x: (getattr(x, names[0]),))
    return getter


def state_without_hash(self) -> dict:
    return {k: v for k, v in self.__dict__.items() if k != "_hash"}


def clear() -> None:
    """Forget everything the current context's caches hold."""
    current().clear()


def entries() -> int:
    """How many entries the current context's caches hold together (for tests and benchmarks)."""
    return current().entries()


def registered() -> tuple:
    """The memoised functions, for inspection."""
    return tuple(_MEMOS)
