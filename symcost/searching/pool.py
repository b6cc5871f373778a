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

The processes, how they start and how a stop ends them are :mod:`symcost.processes`'; :func:`workers`
says how many a ``jobs`` setting gives.
"""
from __future__ import annotations

from .. import processes
from ..processes import cores, start_method, workers  # noqa: F401  (how many, and how they start)
from .price import over_grid, planned, price, priced, replanner
from .space import Space

#: below this many candidates a search prices in its own process (starting workers costs more)
MIN_CANDIDATES = processes.MIN_ITEMS
#: the most candidates sent to a worker at once (a message a worker's pricing takes a while to answer)
CHUNK = 16

_job: dict = {}      # a worker's space, pricing options and work


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
    worker processes (:func:`symcost.processes.answered`), each set up with the space, the options and the
    sweep."""
    size = max(1, min(CHUNK, len(items) // (n * 8)))
    parts = [items[i:i + size] for i in range(0, len(items), size)]
    yield from processes.answered(parts, n, _call, _start, (space, options, sweep, work), what="pricing worker")


def _start(space: Space, options: dict, sweep, work) -> None:
    _job.update(space=space, options=options, sweep=sweep, work=work)


def _call(item):
    return _job["work"](_job, item)


def _read(space: Space, part: list, numbers: list, options: dict, sweep):
    """A chunk's candidates priced from the numbers its worker sent (None where the engine refused one)."""
    for c, got in zip(part, numbers):
        if got is None:
            yield None
            continue
        curves = None if got[1] is None else (sweep[1], *got[1])
        yield priced(space, c, got[0], replanner(space, c, options), curves)


def _numbers(job: dict, cand):
    """A candidate's numbers (and its curves over the sweep), as a worker sends them."""
    got = planned(job["space"], cand, **job["options"])
    if got is None:
        return None
    plan, memory, numbers = got
    sweep = job["sweep"]
    return numbers, (over_grid(plan, memory, *sweep) if sweep is not None else None)
