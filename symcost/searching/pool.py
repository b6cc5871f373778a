"""Pricing a search's candidates in worker processes.

Each worker plans its share of the candidates with the engine, exactly as the calling process would, and
sends back their numbers only (a plan holds SymPy closed forms: sending one costs more than planning it).
The caller keeps the candidates in their order and derives a candidate's plan again when it is read (the
few a search shows, the boundaries of its regimes), so the ranking is the one a single process finds.

    >>> from symcost.searching.space import Space
    >>> s = Space.of("param W[D, F]\\nOut[B, F] = In[B, D] *_D W[D, F]", "X=4")
    >>> opts = dict(dims={"B": 4096, "D": 8192, "F": 8192}, hw="tpu-v5p")
    >>> two = list(priced_all(s, list(s.candidates()), jobs=2, options=opts))
    >>> one = list(priced_all(s, list(s.candidates()), jobs=1, options=opts))
    >>> [p.description for p in two][:3], two == one, two[2].plan.t_step == one[2].plan.t_step
    (['unused over X', 'DP over X', 'activations over X'], True, True)

Workers are forked where that is safe (they start with the caller's caches; see :func:`start_method`),
else started fresh. :func:`workers` says how many a ``jobs`` setting gives.

Stopping early (Ctrl-C, or the caller closing the generator) returns at once, whatever is left to price:
the pool holds at most :data:`WINDOW` chunks a worker ahead of the one being read, never the whole list.
``Pool.terminate`` (CPython's ``_terminate_pool``) joins the pool's task thread, which stops only between
two writes into the workers' input pipe. Handed the whole list (``imap``), that thread writes chunks as
fast as the pipe takes them and, once the pipe is full (64 KiB on Linux; the chunks of a LLaMA layer's
2,916 candidates take twice that), sits blocked in a write while the workers price. Terminate then takes
the pipe's read lock (a worker waiting on an empty pipe holds it until something arrives), drains the pipe
while the task thread lives, SIGTERMs the workers and joins the task thread, which must still write a stop
mark into the results pipe, under a lock a worker holds while it writes a result (one killed in that write
never gives it back), and one into the input pipe for each worker. Each of those waits hangs on the
backlog or on what a worker is doing at that moment; with a window the input pipe never fills, and the
task thread is idle on its own queue when the stop comes.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from collections import deque

from .. import caching, progress
from ..errors import UsageError
from .price import over_grid, planned, price, priced, replanner
from .space import Space

#: below this many candidates a search prices in its own process (starting workers costs more)
MIN_CANDIDATES = 32
#: the most candidates sent to a worker at once (a message a worker's pricing takes a while to answer)
CHUNK = 16
#: chunks a worker the pool holds ahead of the one being read: one being priced, one waiting, so that a
#: worker never waits for work, while a stop finds no backlog to wait on
WINDOW = 2

_job: dict = {}      # a worker's space and pricing options


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:          # not Linux
        return os.cpu_count() or 1


def workers(jobs, candidates: int) -> int:
    """Worker processes for ``candidates`` candidates: ``jobs`` a number (1: none, price here), or ``None`` /
    ``"auto"`` (every core, where there are at least :data:`MIN_CANDIDATES` candidates)."""
    if jobs is None or jobs == "auto":
        n = cores()
        return n if n > 1 and candidates >= MIN_CANDIDATES else 1
    if isinstance(jobs, str):
        try:
            jobs = int(jobs)
        except ValueError:
            raise UsageError(f"--jobs must be a number of processes or 'auto', not {jobs!r}") from None
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise UsageError(f"--jobs must be at least 1 (or 'auto'), not {jobs!r}")
    return min(jobs, max(candidates, 1))


def priced_all(space: Space, cands: list, *, jobs=1, options: dict, progress_wrap=None, sweep=None):
    """Every candidate of ``cands`` priced (None where the engine refuses it), in order; ``options``: the
    keyword arguments of :func:`~symcost.searching.price.price`; ``progress_wrap``: wraps the iterator of
    results (e.g. ``tqdm``); ``sweep``: ``(symbol, values)`` over which workers also send each candidate's
    :func:`~symcost.searching.price.over_grid` curves (what the regimes read). Workers price in a planning
    context like the caller's (caches on or off, checked or not, as wide). A generator: the caller may stop
    early."""
    n = workers(jobs, len(cands))
    if n == 1:
        results = (price(space, c, **options) for c in cands)
    else:
        results = _pooled(space, cands, n, options, sweep)
    wrapped = results if progress_wrap is None else progress_wrap(results, total=len(cands))
    try:
        yield from wrapped
    finally:                        # stopped early: the workers go now (a wrapper may keep ``results`` alive)
        results.close()


def _pooled(space: Space, cands: list, n: int, options: dict, sweep):
    """The candidates priced by ``n`` workers, in order, with at most ``WINDOW * n`` chunks handed to the
    pool ahead of the one being read (the next is handed over before a chunk's candidates are yielded, so
    the workers stay busy while the caller reads). Stopped or done, the workers are terminated."""
    size = max(1, min(CHUNK, len(cands) // (n * 8)))
    ctx = multiprocessing.get_context(start_method())
    c = caching.current()
    pool = ctx.Pool(n, _start, (space, options, sweep, (c.enabled, c.check, c.wider)))
    try:
        ahead: deque = deque()
        for i in range(0, len(cands), size):
            part = cands[i:i + size]
            ahead.append((part, pool.apply_async(_numbers_of, (part,))))
            if len(ahead) > WINDOW * n:
                yield from _read(space, *ahead.popleft(), options, sweep)
        while ahead:
            yield from _read(space, *ahead.popleft(), options, sweep)
    finally:
        pool.terminate()


def _read(space: Space, part: list, answer, options: dict, sweep):
    """A chunk's candidates priced from the numbers its worker sent (None where the engine refused one)."""
    for c, got in zip(part, answer.get()):
        if got is None:
            yield None
            continue
        curves = None if got[1] is None else (sweep[1], *got[1])
        yield priced(space, c, got[0], replanner(space, c, options), curves)


def start_method() -> str:
    """How workers start: forked from this process where that is safe (Linux, one thread, no JAX or
    PyTorch loaded: their threads do not survive a fork), so they begin with its caches; else from a fresh
    server process (``forkserver``), or spawned (not Linux)."""
    if sys.platform != "linux":
        return "spawn"
    if threading.active_count() > 1 or any(m in sys.modules for m in ("jax", "torch", "tensorflow")):
        return "forkserver"
    return "fork"


def _start(space: Space, options: dict, sweep, caches: tuple = (True, False, 1)) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # Ctrl-C stops the caller, which stops the workers
    progress.quiet()
    own, c = None, caching.current()
    if (c.enabled, c.check, c.wider) != caches:   # a forked worker is in its caller's context already
        own = caching.context(*caches)            # for the worker's life
        own.__enter__()
    _job.update(space=space, options=options, sweep=sweep, context=own)


def _numbers(cand):
    got = planned(_job["space"], cand, **_job["options"])
    if got is None:
        return None
    plan, memory, numbers = got
    sweep = _job["sweep"]
    return numbers, (over_grid(plan, memory, *sweep) if sweep is not None else None)


def _numbers_of(part: list) -> list:
    return [_numbers(c) for c in part]
