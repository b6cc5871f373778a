"""Work spread over worker processes, answered in order: what the program search prices its candidates
with (:mod:`symcost.searching.pool`), and the run search its runs (:mod:`symcost.models.runs`).

:func:`answered` hands chunks of items to ``n`` processes of this module's own, each with a pipe of its own
and at most :data:`WINDOW` chunks handed to it ahead of the one being read, and yields each chunk's answers
in the chunks' order. A worker first runs ``setup(*init)``, in a planning context like the caller's
(caches on or off, checked or not, as wide), then ``work(item)`` of each item it is sent; both are
module-level functions (a worker is handed them by name) whose answers are small (numbers: they travel
back through a pipe). An error ``work`` raises is raised in the caller, as doing the work there would.

Stopping early (Ctrl-C, or the caller closing the generator) returns at once, whatever is left to do: a
stop closes the pipes, kills the workers and joins them. ``multiprocessing.Pool`` is not used: its
``terminate`` joins the pool's task thread, which must first write a stop mark into the results queue under
a lock the workers share, and a worker killed while it wrote a result never gives that lock back (a search
stopped so waited 1.5 and, once, 12 minutes).

Workers are forked where that is safe (they start with the caller's caches; see :func:`start_method`),
else started fresh. :func:`workers` says how many a ``jobs`` setting gives.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from typing import Any

from . import caching, progress
from .errors import SymcostError, UsageError

#: below this many items the work is done in the caller's process (starting workers costs more)
MIN_ITEMS = 32
#: chunks a worker is handed ahead of the one being read: one being worked on, one waiting, so that a worker
#: never waits for work, while a stop leaves no backlog
WINDOW = 2

_own: list = []      # a worker's own planning context, held for its life


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:          # not Linux
        return os.cpu_count() or 1


def workers(jobs, items: int, least: int = MIN_ITEMS) -> int:
    """Worker processes for ``items`` items: ``jobs`` a number (1: none, work here), or ``None`` / ``"auto"``
    (every core, where there are at least ``least`` items: what pays for starting workers depends on how
    long an item takes)."""
    if jobs is None or jobs == "auto":
        n = cores()
        return n if n > 1 and items >= least else 1
    if isinstance(jobs, str):
        try:
            jobs = int(jobs)
        except ValueError:
            raise UsageError(f"--jobs must be a number of processes or 'auto', not {jobs!r}") from None
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise UsageError(f"--jobs must be at least 1 (or 'auto'), not {jobs!r}")
    return min(jobs, max(items, 1))


def start_method() -> str:
    """How workers start: forked from this process where that is safe (Linux, one thread, no JAX or
    PyTorch loaded: their threads do not survive a fork), so they begin with its caches; else from a fresh
    server process (``forkserver``), or spawned (not Linux)."""
    if sys.platform != "linux":
        return "spawn"
    if threading.active_count() > 1 or any(m in sys.modules for m in ("jax", "torch", "tensorflow")):
        return "forkserver"
    return "fork"


def answered(parts: list, n: int, work, setup, init: tuple, what: str = "worker"):
    """``(part, [work(item) for item in part])`` of each chunk of ``parts``, in order, from ``n`` worker
    processes that each ran ``setup(*init)`` first. Chunk ``k`` goes to worker ``k % n``, which answers its
    chunks in the order it got them, and at most ``WINDOW * n`` chunks are handed out ahead of the one being
    read (the next is sent before a chunk's answers are yielded, so the workers stay busy while the caller
    reads). Stopped or done, the workers are killed and joined: nothing is shared with them but their own
    pipe. ``what``: the workers as an error that one stopped names them ("a pricing worker").

    A worker that is not forked runs the caller's main module again; where that is a program read from
    standard input (``python - < script.py``), which no process can read again, the work is done here, in
    order, as one process would."""
    method = start_method()
    if method != "fork" and not _main_importable():
        setup(*init)
        yield from ((part, [work(x) for x in part]) for part in parts)
        return
    ctx: Any = multiprocessing.get_context(method)      # each start method's context has its Process
    if method == "forkserver":     # its workers are forked from a server that has imported the engine once
        ctx.set_forkserver_preload(["__main__", __name__, work.__module__, setup.__module__])
    c = caching.current()
    caches = (c.enabled, c.check, c.wider)
    procs: list = []
    try:
        for _ in range(min(n, len(parts))):
            here, there = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(there, caches, setup, init, work), daemon=True)
            proc.start()
            there.close()
            procs.append((proc, here))
        sent = 0
        for k, part in enumerate(parts):
            while sent < min(len(parts), k + WINDOW * len(procs)):
                _send(procs[sent % len(procs)], parts[sent], what)
                sent += 1
            yield part, _answer(procs[k % len(procs)], what)
    finally:
        for proc, conn in procs:
            conn.close()
            if proc.is_alive():
                proc.kill()
        for proc, _ in procs:
            proc.join()


def _main_importable() -> bool:
    """Whether a process that is not forked can run the caller's main module again (as multiprocessing's
    spawned and forkserver workers do): it has no file (``python -c``, a notebook), or a file that exists
    (not ``<stdin>``, which a worker would look for and stop at once)."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return path is None or os.path.isfile(path)


def _stopped(proc, what: str) -> SymcostError:
    proc.join(1)
    return SymcostError(f"a {what} stopped (exit code {proc.exitcode})")


def _send(worker, part: list, what: str) -> None:
    """Hand a worker a chunk; a worker that has died (killed, out of memory) is an error that says so."""
    proc, conn = worker
    try:
        conn.send(part)
    except (BrokenPipeError, ConnectionResetError):
        raise _stopped(proc, what) from None


def _answer(worker, what: str) -> list:
    """The next answer of a worker: its chunk's answers, or the error its work raised, raised here."""
    proc, conn = worker
    try:
        ok, got = conn.recv()
    except (EOFError, ConnectionResetError):
        raise _stopped(proc, what) from None
    if not ok:
        raise got
    return got


def _serve(conn, caches: tuple, setup, init: tuple, work) -> None:
    """A worker: Ctrl-C left to the caller (which stops the workers), no progress bars, the caller's kind
    of planning context, ``setup(*init)``; then it answers each chunk it receives (``work(item)`` of each
    item), in order, until its pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    progress.quiet()
    c = caching.current()
    if (c.enabled, c.check, c.wider) != caches:   # a forked worker is in its caller's context already
        own = caching.context(*caches)            # for the worker's life
        own.__enter__()
        _own.append(own)
    setup(*init)
    while True:
        try:
            part = conn.recv()
        except (EOFError, OSError):
            return
        answer: tuple[bool, object]
        try:
            answer = (True, [work(x) for x in part])
        except Exception as e:           # sent back: the caller raises it, as the work in one process would
            answer = (False, e)
        try:
            conn.send(answer)
        except (BrokenPipeError, OSError):
            return


__all__ = ["MIN_ITEMS", "WINDOW", "answered", "cores", "start_method", "workers"]
