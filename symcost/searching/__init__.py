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
spreads them over worker processes, ``jobs``), the filter (does it fit in the preset's HBM) and the rank,
driven by :func:`symcost.searches.run` as the run and serving searches are (the count and an estimate
before and while pricing, Ctrl-C keeps what was priced); :class:`~.result.SearchResult` holds the answer.
:mod:`.regimes` finds the best over a range of one symbol with exact boundaries, :mod:`.plot` draws them
(matplotlib, optional).
"""
from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass, replace

from .. import caching, searches
from ..binding import parse_dims
from ..errors import UsageError
from ..notation import Program, Ranking, parse
from ..printers.text import fmt_seconds
from . import bounded
from .pool import priced_all, workers
from .price import Priced, none_priced, rounded
from .regimes import Boundary, Regime, envelope, grid_of
from .result import SearchResult
from .space import Candidate, Space

OBJECTIVES = ("time", "comms", "memory")
#: how many times their bounds a search's caches hold: the LLaMA 3 8B layer on h100 X=4,Y=2 poses 15,195
#: distinct chain problems, which 64 times the chain planner's bound of 256 keeps (at 16, about 5,000 of them
#: were planned twice; at the bounds one derivation needs, the plans the candidates share are evicted)
WIDER = 64


def search(text, mesh, dims=None, hw=None, *, backward: bool = False, objective: str = "time", overlap=True,
           moves=None, vs: str | None = None, range=None, progress=None, jobs=1, exact: bool = False,
           efficiency: bool = False, time_limit: float | None = None, top: int | None = None) -> SearchResult:
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
    ranking is the same, a candidate's plan is derived again here when it is read (see :mod:`.pool`).
    Interrupted (Ctrl-C), the search returns what it priced until then, ``complete`` False. ``exact``:
    solve for the best plan with a proven lower bound instead of pricing every candidate (:mod:`.exact`;
    ``jobs`` processes plan its pieces, the same pieces however many; ``time_limit``: the seconds it spends
    closing its gap once the pieces are planned, default :data:`.exact.SECONDS`).
    ``top``: the best this many are all the caller reads (the command line's ``--top``): a space of
    :data:`.bounded.FROM` candidates or more, ranked by step time on the ideal machine, is then bounded
    (:mod:`.bounded`): each statement's pieces planned once, candidates derived from the least bound up until
    the best ``top`` are proven, ``ranked`` holding those derived and ``bounded`` counting the others (None,
    the default: every candidate is priced).
    ``efficiency``: price with the preset's achieved figures and its per-kernel floor, as ``derive
    --efficiency`` does (each candidate's plan chosen and totalled by :mod:`symcost.pricing`, so a plan of
    more kernels pays more floors), instead of the book's ideal machine; ``exact`` proves its bound on the
    ideal machine only.

    A search runs in a planning context of its own (:func:`symcost.caching.context`), its caches
    :data:`WIDER` times their bounds: candidates share most of their statements' plans, and what the search
    kept is freed when it ends. Called where caches are off (``caching.disabled()``) or checked, its own
    context is so too."""
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise UsageError(f"top must be a number of candidates, at least 1 (or None: every one), not {top!r}")
    if objective not in OBJECTIVES:
        raise UsageError(f"--objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
    if hw is None:
        raise UsageError("search ranks by numbers: give --hw (a preset, e.g. tpu-v5p)")
    if time_limit is not None and (not exact or isinstance(time_limit, bool)
                                   or not isinstance(time_limit, (int, float)) or not time_limit >= 0):
        raise UsageError("time_limit is the exact search's seconds to close its gap: a number >= 0, with exact=True"
                         if exact else "time_limit is the exact search's: give exact=True too")
    outer = caching.current()
    with caching.context(outer.enabled, outer.check, WIDER):
        if exact:
            if efficiency:
                raise UsageError("search --exact proves its bound on the book's ideal machine: drop --efficiency "
                                 "or --exact")
            from .exact import SECONDS, exact_search
            space, sizes, _ = _space(text, mesh, dims, hw, None, None)
            return exact_search(space, sizes, dict(dims=sizes, hw=hw, backward=backward, overlap=overlap,
                                                   moves=moves), objective=objective, vs=vs, jobs=jobs,
                                seconds=SECONDS if time_limit is None else float(time_limit))
        return _searched(text, mesh, dims, hw, backward, objective, overlap, moves, vs, range, progress, jobs,
                         efficiency, top)


def _searched(text, mesh, dims, hw, backward, objective, overlap, moves, vs, range, progress, jobs, efficiency,
              top=None):
    """The search, in order: its space, each candidate priced, filtered by memory, ranked."""
    space, sizes, span = _space(text, mesh, dims, hw, vs, range)
    # the preset as the space resolved it: each candidate's binding then takes it as it is
    resolved = space.hardware if space.hardware is not None else hw
    options = dict(dims=sizes, hw=resolved, backward=backward, overlap=overlap, moves=moves, efficiency=efficiency)
    sweep = None if vs is None else (vs, grid_of(*span))
    start, left = time.perf_counter(), 0
    position = {c: i for i, c in enumerate(space.candidates())}
    if bounded.applies(space, top=top, objective=objective, vs=vs, efficiency=efficiency, overlap=overlap):
        b = bounded.Bounds(space, options, jobs, position)
        found = searches.run(_Bounded(space, jobs, options, progress, sweep, objective, position, b, top),
                             keep_failed=True)
        left = len(b.cands) - b.derived if found.complete else 0
    else:
        found = searches.run(_Stages(space, jobs, options, progress, sweep, objective, position), keep_failed=True)
    if not found.priced:
        if not found.complete:
            raise KeyboardInterrupt
        raise none_priced(space, options)
    ranked = found.ranked
    hbm = getattr(space.hardware, "hbm_bytes", None)
    result = SearchResult(space, space.size, space.assignments, len(ranked), found.passed,
                          time.perf_counter() - start, ranked, objective, hbm_bytes=hbm,
                          planned_at={a.name: sizes[a.name] for a in space.mesh.axes if a.size is None},
                          complete=found.complete, sizes=sizes, bounded=left, top=top if left else None)
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
        if span is not None:
            raise UsageError("--range is the span --vs sweeps: give --vs too (e.g. --vs B --range 1e4:1e8)")
        return space, sizes, None
    dims_of = sorted(space.dimensions())
    if vs not in dims_of and axis_range is None:
        axes = ", ".join(a.name for a in space.mesh.axes)
        raise UsageError(f"--vs {vs}: the program has no dimension {vs} and the mesh no axis {vs} (its dimensions: "
                         f"{', '.join(dims_of)}; its axes: {axes})")
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


@dataclass(frozen=True)
class _Stages:
    """The program search as :class:`symcost.searches.Stages`: its candidates, each priced by the engine
    (in ``jobs`` processes, :mod:`.pool`), filtered by whether it fits in HBM (a program search ranks those
    that do not after those that do: they say why nothing fits) and ranked by the objective."""

    space: Space
    jobs: object
    options: dict
    wrap: object
    sweep: object
    objective: str
    position: dict       # each candidate's place in the space (the last tie-break of the ranking)
    name = "search"
    unit = "candidates"

    def items(self) -> list:
        return list(self.space.candidates())

    def count(self, n: int) -> str:
        procs = workers(self.jobs, n)
        return (f"{n:,} candidates ({self.space.assignments:,} assignments, symmetric duplicates collapsed) to price "
                f"on {procs} process{'es' if procs > 1 else ''}")

    def price(self, items):
        with closing(priced_all(self.space, items, jobs=self.jobs, options=self.options, progress_wrap=self.wrap,
                                sweep=self.sweep)) as got:
            for p in got:
                yield () if p is None else (p,)

    def passes(self, p: Priced) -> bool:
        return p.fits

    def rank(self, kept: list[Priced]) -> list[Priced]:
        """By the objective (rounded to 10 digits, so that equal totals summed in another order tie), then
        communication time, then memory, then the space's order (whatever order they were priced in)."""
        return sorted(kept, key=self.rank_key)

    def rank_key(self, p: Priced) -> tuple:
        return (rounded(p.objective(self.objective)), p.t_comms, p.memory_bytes or 0.0, self.position[p.candidate])

    def label(self, item) -> str:
        return ""


@dataclass(frozen=True)
class _Bounded(_Stages):
    """The program search of a bounded space (:mod:`.bounded`): its candidates taken from the least bound
    up, their statements' pieces planned as they need them and each derived here unless its bounds rank it
    below the best ``top`` found, until those are proven; how long it takes depends on where that happens,
    so no estimate of the rest is given (the bar shows the pieces planned so far)."""

    bounds: object = None
    top: int = 10
    estimate = False

    def items(self) -> list:
        return self.bounds.cands

    def count(self, n: int) -> str:
        return (f"{n:,} candidates bounded; taken from the least bound up in this process, each one's pieces "
                f"planned as it needs them and the candidate derived, until the best {self.top} are proven")

    def price(self, items):
        yield from bounded.until_proven(self.bounds, self.top, key=self.rank_key)

    def label(self, item) -> str:
        """The pieces planned so far and, once there are as many as asked, how far the least bound left is
        under the slowest of the best found (the top is proven where it is not); where the candidates left
        may be as fast, how far their communication's bound is under its (they rank by it)."""
        b, done = self.bounds, f"{self.bounds.planned:,} pieces planned"
        if b.kth is None:
            return done
        best = "the best" if self.top == 1 else f"the {_nth(self.top)} best"
        (low, comms), step, shown = b.least, rounded(b.kth.t_step), fmt_seconds(b.kth.t_step)
        if low < step:
            return f"{done}; least bound left {(step - low) / step:.2%} under {best} ({shown})"
        under = max(b.kth.t_comms - comms, 0.0) / b.kth.t_comms if b.kth.t_comms > 0 else 0.0
        return f"{done}; bound left as fast as {best} ({shown}), its communication {under:.2%} under"


def _nth(k: int) -> str:
    """``k`` as an ordinal (2nd, 10th, 21st)."""
    end = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{end}"


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



__all__ = ["search", "SearchResult", "Space", "Candidate", "Priced", "Regime", "Boundary", "OBJECTIVES"]
