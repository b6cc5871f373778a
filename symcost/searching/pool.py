"""Pricing a search's candidates in worker processes (and planning an exact search's pieces: :func:`mapped`).

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
    (['replicated over X', 'DP over X', 'activations over X'], True, True)

Workers are forked where that is safe (they start with the caller's caches; see :func:`start_method`),
else started fresh. :func:`workers` says how many a ``jobs`` setting gives.

Stopping early (Ctrl-C, or the caller closing the generator) returns at once, whatever is left to price:
the workers are processes of this module's own, each with a pipe of its own and at most :data:`WINDOW`
chunks handed to it ahead of the one being read; a stop closes the pipes, kills the workers and joins
them. ``multiprocessing.Pool`` is not used: its ``terminate`` joins the pool's task thread, which must
first write a stop mark into the results queue under a lock the workers share, and a worker killed while
it wrote a result never gives that lock back (a search stopped so waited 1.5 and, once, 12 minutes).
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading

from .. import caching, progress
from ..errors import SymcostError, UsageError
from .price import over_grid, planned, price, priced, replanner
from .space import Space

#: below this many candidates a search prices in its own process (starting workers costs more)
MIN_CANDIDATES = 32
#: the most candidates sent to a worker at once (a message a worker's pricing takes a while to answer)
CHUNK = 16
#: chunks a worker is handed ahead of the one being read: one being priced, one waiting, so that a worker
#: never waits for work, while a stop leaves no backlog
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


def mapped(work, items: list, *, jobs=1, space: Space, options: dict):
    """``work(job, item)`` of every item, in order, in ``jobs`` processes (:func:`workers`; 1: here), where
    ``job`` is ``{"space": space, "options": options}``; ``work`` is a module-level function (a worker is
    handed it by name) whose answers are small (numbers: they travel back through a pipe). Workers compute
    in a planning context like the caller's. A generator: the caller may stop early (the workers go then)."""
    n = workers(jobs, len(items))
    if n == 1:
        job = dict(space=space, options=options, sweep=None)
        yield from (work(job, x) for x in items)
        return
    for _, answers in _answered(items, n, work, space, options, None):
        yield from answers


def _pooled(space: Space, cands: list, n: int, options: dict, sweep):
    """The candidates priced by ``n`` worker processes, in order (each worker sends a candidate's numbers,
    read here into a :class:`~.price.Priced`)."""
    for part, numbers in _answered(cands, n, _numbers, space, options, sweep):
        yield from _read(space, part, numbers, options, sweep)


def _answered(items: list, n: int, work, space: Space, options: dict, sweep):
    """``(chunk, [work(job, item) for item in chunk])`` of each chunk of ``items``, in order, from ``n``
    worker processes. Each worker has a pipe of its own; chunk ``k`` goes to worker ``k % n``, which answers
    its chunks in the order it got them, and at most ``WINDOW * n`` chunks are handed out ahead of the one
    being read (the next is sent before a chunk's answers are yielded, so the workers stay busy while the
    caller reads). Stopped or done, the workers are killed and joined: nothing is shared with them but
    their own pipe (see the module's docstring)."""
    size = max(1, min(CHUNK, len(items) // (n * 8)))
    method = start_method()
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":     # its workers are forked from a server that has imported the engine once
        ctx.set_forkserver_preload(["__main__", __name__, work.__module__])
    c = caching.current()
    init = (space, options, sweep, (c.enabled, c.check, c.wider))
    parts = [items[i:i + size] for i in range(0, len(items), size)]
    workers: list = []
    try:
        for _ in range(min(n, len(parts))):
            here, there = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(there, init, work), daemon=True)
            proc.start()
            there.close()
            workers.append((proc, here))
        sent = 0
        for k, part in enumerate(parts):
            while sent < min(len(parts), k + WINDOW * len(workers)):
                _send(workers[sent % len(workers)], parts[sent])
                sent += 1
            yield part, _answer(workers[k % len(workers)])
    finally:
        for proc, conn in workers:
            conn.close()
            if proc.is_alive():
                proc.kill()
        for proc, _ in workers:
            proc.join()


def _stopped(proc) -> SymcostError:
    proc.join(1)
    return SymcostError(f"a pricing worker stopped (exit code {proc.exitcode})")


def _send(worker, part: list) -> None:
    """Hand a worker a chunk; a worker that has died (killed, out of memory) is an error that says so."""
    proc, conn = worker
    try:
        conn.send(part)
    except (BrokenPipeError, ConnectionResetError):
        raise _stopped(proc) from None


def _answer(worker) -> list:
    """The next answer of a worker: its chunk's numbers, or the error its pricing raised, raised here."""
    proc, conn = worker
    try:
        ok, got = conn.recv()
    except (EOFError, ConnectionResetError):
        raise _stopped(proc) from None
    if not ok:
        raise got
    return got


def _serve(conn, init: tuple, work) -> None:
    """A worker: set up (:func:`_start`), then answers each chunk it receives (``work(job, item)`` of each
    item), in order, until its pipe closes."""
    _start(*init)
    while True:
        try:
            part = conn.recv()
        except (EOFError, OSError):
            return
        try:
            answer = (True, [work(_job, x) for x in part])
        except Exception as e:           # sent back: the caller raises it, as pricing in one process would
            answer = (False, e)
        try:
            conn.send(answer)
        except (BrokenPipeError, OSError):
            return


def _read(space: Space, part: list, numbers: list, options: dict, sweep):
    """A chunk's candidates priced from the numbers its worker sent (None where the engine refused one)."""
    for c, got in zip(part, numbers):
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


def _numbers(job: dict, cand):
    """A candidate's numbers (and its curves over the sweep), as a worker sends them."""
    got = planned(job["space"], cand, **job["options"])
    if got is None:
        return None
    plan, memory, numbers = got
    sweep = job["sweep"]
    return numbers, (over_grid(plan, memory, *sweep) if sweep is not None else None)
