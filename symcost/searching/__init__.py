"""Search: every sharding of a program's open tensors, priced by the engine, filtered by memory, ranked.

    >>> from symcost.searching import search
    >>> r = search('''
    ...     param W_in[D, F], W_out[F, D]
    ...     Out[B, D] = In[B, D] *_D W_in[D, F] *_F W_out[F, D]
    ... ''', mesh="X=4", dims="B=65536,D=8192,F=32768", hw="tpu-v5p", backward=True)
    >>> r.candidates, r.feasible
    (9, 9)
    >>> r.ranked[0].layouts['W_in'], r.ranked[0].description, r.ranked[0].bound
    ('W_in[D, F]', 'DP over X', 'compute')

A search is its four parts, in order: the space (:mod:`.space`: roles of mesh axes, symmetric duplicates
collapsed), the price of each candidate (:mod:`.price`: the engine's plan, made numbers; :mod:`.pool`
spreads them over worker processes, ``jobs``), the filter (does it fit in the preset's HBM) and the rank;
:class:`~.result.SearchResult` holds the answer. :mod:`.regimes` finds the best over a range of one symbol
with exact boundaries, :mod:`.plot` draws them (matplotlib, optional).
"""
from __future__ import annotations

import time
from dataclasses import replace

from .. import caching
from .. import progress as bars
from ..binding import parse_dims
from ..errors import UsageError
from ..notation import Program, Ranking, parse
from .pool import priced_all, workers
from .price import Priced
from .regimes import Boundary, Regime, envelope, grid_of
from .result import SearchResult
from .space import Candidate, Space

OBJECTIVES = ("time", "comms", "memory")
#: candidates priced (or seconds spent) before the search says how long the rest will take
SAMPLE, SAMPLE_SECONDS = 50, 5.0
#: how many times their bounds a search's caches hold (on the LLaMA 3 8B layer on h100 X=4,Y=2, 16 and 256
#: price alike; at the bounds one derivation needs, statement plans the candidates share are evicted)
WIDER = 16


def search(text, mesh, dims=None, hw=None, *, backward: bool = False, objective: str = "time", overlap=True,
           moves=None, vs: str | None = None, range=None, progress=None, jobs=1,
           efficiency: bool = False) -> SearchResult:
    """Price every sharding of the program's open tensors (see :mod:`.space`) and rank them: the space,
    each candidate priced by the engine, filtered by memory, ranked.

    ``mesh``: a ``--mesh`` string, a dict (``{"X": 4, "Y": 4}``) or a :class:`~symcost.mesh.Mesh`;
    ``dims``: sizes (with the program's ``rank`` sizes, every size the costs use must be bound); ``hw``: the
    preset whose figures price and whose HBM filters; ``objective``: ``time`` (step time), ``comms`` or
    ``memory``; ``vs``: a dimension to find the regimes over, from ``range = (lo, hi)`` (default: its bound
    value / 1000 to x 1000), or a mesh axis (the chip count growing along it; plans are chosen at its size,
    which is then its own class of axes; default range 1 to 64 times its size); ``progress``: a callable
    wrapping the iterator of priced candidates (e.g. ``tqdm``; the command line shows
    :mod:`symcost.progress`'s bar on a terminal instead); ``jobs``: processes that price candidates (1: this
    one; a number; ``"auto"``: every core, for spaces of :data:`.pool.MIN_CANDIDATES` or more): the
    ranking is the same, a candidate's plan is derived again here when it is read (see :mod:`.pool`);
    ``efficiency``: price with the preset's achieved figures and its per-kernel floor, as ``derive
    --efficiency`` does (each candidate's plan totalled by :func:`symcost.pricing.totals`, so a plan of more
    kernels pays more floors), instead of the book's ideal machine.
    Interrupted (Ctrl-C), the search returns what it priced until then, ``complete`` False.

    A search runs in a planning context of its own (:func:`symcost.caching.context`), its caches
    :data:`WIDER` times their bounds: candidates share most of their statements' plans, and what the search
    kept is freed when it ends. Called where caches are off (``caching.disabled()``) or checked, its own
    context is so too."""
    if objective not in OBJECTIVES:
        raise UsageError(f"--objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
    if hw is None:
        raise UsageError("search ranks by numbers: give --hw (a preset, e.g. tpu-v5p)")
    outer = caching.current()
    with caching.context(outer.enabled, outer.check, WIDER):
        return _searched(text, mesh, dims, hw, backward, objective, overlap, moves, vs, range, progress, jobs,
                         efficiency)


def _searched(text, mesh, dims, hw, backward, objective, overlap, moves, vs, range, progress, jobs, efficiency):
    """The search, in order: its space, each candidate priced, filtered by memory, ranked."""
    space, sizes, span = _space(text, mesh, dims, hw, vs, range)
    start = time.perf_counter()
    options = dict(dims=sizes, hw=hw, backward=backward, overlap=overlap, moves=moves, efficiency=efficiency)
    sweep = None if vs is None else (vs, grid_of(*span))
    priced, complete = _price(space, jobs, options, progress, sweep)
    if not priced:
        if not complete:
            raise KeyboardInterrupt
        raise UsageError("no candidate could be priced: bind every size the program uses with --dims")
    ranked = _rank(priced, objective)
    hbm = getattr(space.hardware, "hbm_bytes", None)
    result = SearchResult(space, space.size, space.assignments, len(ranked), sum(p.fits for p in ranked),
                          time.perf_counter() - start, tuple(ranked), objective, hbm_bytes=hbm,
                          planned_at={a.name: sizes[a.name] for a in space.mesh.axes if a.size is None},
                          complete=complete, sizes=sizes)
    if vs is None:
        return result
    return replace(result, vs=vs, range=(float(span[0]), float(span[1])),
                   regimes=tuple(envelope(list(ranked), vs, *span, hbm)))


def _space(text, mesh, dims, hw, vs, span):
    """The space a search walks, the sizes its candidates are priced at and the range of ``vs``; every
    question about the request is answered here, before anything is priced."""
    prog = text if isinstance(text, Program) else parse(text)
    sizes = {**prog.ranking, **parse_dims(dims)}
    axis_range = None
    if vs is not None:
        mesh, sizes, axis_range = _free_axis(mesh, sizes, vs)
    space = Space.of(_ranked_at(prog, sizes), mesh, hw, sizes)
    free = space.unbound(sizes)
    if free:
        raise UsageError(f"search ranks by numbers: bind {', '.join(free)} with --dims (or a rank statement), "
                         f"e.g. --dims " + ",".join(f"{d}=8192" for d in free))
    if vs is None:
        return space, sizes, None
    if vs not in sizes:
        raise UsageError(f"--vs {vs}: bind {vs} with --dims (the value plans are chosen at), "
                         f"e.g. --dims {vs}=1048576")
    lo, hi = span if span is not None else axis_range or (sizes[vs] / 1000, sizes[vs] * 1000)
    if not 0 < lo < hi:
        raise UsageError(f"--range must be two positive numbers LO:HI with LO < HI, not {lo}:{hi}")
    return space, sizes, (lo, hi)


def _ranked_at(prog: Program, sizes: dict) -> Program:
    """The program with its ``rank`` statements at the sizes the search binds (``--dims B=65536`` over a
    program's ``rank B=1048576``): the program a search shows and writes into each candidate is the one it
    priced."""
    if not any(isinstance(st, Ranking) and any(sizes.get(k, v) != v for k, v in st.sizes)
               for st in prog.statements):
        return prog
    statements = tuple(replace(st, sizes=tuple((k, sizes.get(k, v)) for k, v in st.sizes))
                       if isinstance(st, Ranking) else st for st in prog.statements)
    return Program(statements, "\n".join(str(st) for st in statements))


def _price(space: Space, jobs, options: dict, wrap, sweep) -> tuple[list[Priced], bool]:
    """Every candidate priced by the engine, in order (those it refuses left out), and whether all were:
    Ctrl-C stops the pricing and keeps what was priced. The person waiting is told the count at once and,
    after the first :data:`SAMPLE` candidates (or :data:`SAMPLE_SECONDS`), how long the rest will take."""
    cands = list(space.candidates())
    n, procs = len(cands), workers(jobs, len(cands))
    bars.say(f"search: {n:,} candidates ({space.assignments:,} assignments, symmetric duplicates collapsed) "
             f"to price on {procs} process{'es' if procs > 1 else ''}")
    out: list[Priced] = []
    start, said = time.perf_counter(), n <= SAMPLE
    try:
        for k, p in enumerate(priced_all(space, cands, jobs=jobs, options=options, progress_wrap=wrap,
                                         sweep=sweep), 1):
            if p is not None:
                out.append(p)
            spent = time.perf_counter() - start
            if not said and (k >= SAMPLE or spent >= SAMPLE_SECONDS):
                said = True
                bars.say(f"search: about {_duration(spent / k * (n - k))} more at {k / spent:,.0f} "
                         f"candidates a second (the first {k:,})")
    except KeyboardInterrupt:
        return out, False
    return out, True


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _rank(priced: list[Priced], objective: str) -> list[Priced]:
    """Candidates that fit in HBM first, each group by the objective (rounded to 10 digits, so that equal
    totals summed in another order tie), then communication time, then memory."""
    return sorted(priced, key=lambda p: (not p.fits, _rounded(p.objective(objective)), p.t_comms,
                                         p.memory_bytes or 0.0))


def _free_axis(mesh, sizes: dict, vs: str):
    """``--vs AXIS``: the mesh with that axis symbolic, its size moved to the sizes (plans are chosen there,
    their costs stay functions of it), and its default range (one device to 64 times the size: the chip
    count grows along that axis). A dimension is returned as it is."""
    from dataclasses import replace as _replace

    from ..mesh import Mesh, as_mesh
    m = as_mesh(mesh)
    if vs not in m:
        return mesh, sizes, None
    ax = m.axis(vs)
    size = sizes.get(vs, ax.size)
    if size is None:
        raise UsageError(f"--vs {vs}: give the mesh axis a size (--mesh {vs}=16,...), the size plans are chosen at")
    free = Mesh(tuple(_replace(a, size=None) if a.name == vs else a for a in m.axes))
    return free, {**sizes, vs: size}, (1.0, float(size) * 64)


def _rounded(x: float) -> float:
    return float(f"{x:.9e}")


__all__ = ["search", "SearchResult", "Space", "Candidate", "Priced", "Regime", "Boundary", "OBJECTIVES"]
