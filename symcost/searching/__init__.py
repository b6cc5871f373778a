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

:mod:`.space` says what is searched (roles of mesh axes, symmetric duplicates collapsed), :mod:`.price`
prices a candidate (the engine's plan, made numbers; vectorised curves), :mod:`.pool` prices them in worker
processes (``jobs``), :mod:`.regimes` finds the best
over a range of one symbol with exact boundaries, :mod:`.plot` draws them (matplotlib, optional).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..binding import parse_dims
from ..errors import UsageError
from ..notation import Program, parse
from .pool import priced_all
from .price import Priced
from .regimes import Boundary, Regime, envelope, grid_of
from .space import Candidate, Space

OBJECTIVES = ("time", "comms", "memory")


@dataclass(frozen=True)
class SearchResult:
    """What a search found: how many candidates it priced, how many fit, all of them ranked (feasible
    first), and the regimes over ``vs`` when asked."""

    space: Space = field(repr=False)
    candidates: int
    assignments: int
    priced: int
    feasible: int
    seconds: float
    ranked: tuple[Priced, ...] = field(repr=False)
    objective: str = "time"
    vs: str | None = None
    range: tuple[float, float] | None = None
    regimes: tuple[Regime, ...] = ()
    hbm_bytes: float | None = None
    planned_at: dict = field(default_factory=dict, repr=False)   # sizes of the axes --vs left symbolic

    @property
    def mesh_sizes(self) -> dict:
        """``{axis: size}``, an axis ``--vs`` varies at the size its plans were chosen at."""
        return {a.name: a.size if a.size is not None else self.planned_at.get(a.name) for a in self.space.mesh.axes}

    @property
    def best(self) -> Priced | None:
        return self.ranked[0] if self.ranked and self.ranked[0].fits else None

    def to_dict(self, top: int = 10) -> dict:
        shown = list(range(min(top, len(self.ranked))))
        for r in self.regimes:
            if r.best not in shown:
                shown.append(r.best)
        index = {i: n for n, i in enumerate(shown)}
        ranked = [{"rank": i + 1, **self.ranked[i].as_dict()} for i in shown]
        return {
            "program": str(self.space.program), "mesh": self.mesh_sizes, "links": self.space.mesh.links(),
            "candidates": self.candidates, "assignments": self.assignments, "priced": self.priced,
            "feasible": self.feasible, "seconds": self.seconds, "objective": self.objective,
            "hbm_bytes": self.hbm_bytes, "ranked": ranked,
            **({"vs": self.vs, "range": list(self.range),
                "regimes": [_regime(r, index[r.best], self.range) for r in self.regimes]} if self.vs else {}),
        }


def search(text, mesh, dims=None, hw=None, *, backward: bool = False, objective: str = "time", overlap=True,
           moves=None, vs: str | None = None, range=None, progress=None, jobs=1) -> SearchResult:
    """Price every sharding of the program's open tensors (see :mod:`.space`) and rank them.

    ``dims``: sizes (with the program's ``rank`` sizes, every size the costs use must be bound); ``hw``: the
    preset whose figures price and whose HBM filters; ``objective``: ``time`` (step time), ``comms`` or
    ``memory``; ``vs``: a dimension to find the regimes over, from ``range = (lo, hi)`` (default: its bound
    value / 1000 to x 1000), or a mesh axis (the chip count growing along it; plans are chosen at its size,
    which is then its own class of axes; default range 1 to 64 times its size); ``progress``: a callable
    wrapping the iterator of priced candidates (e.g. ``tqdm``; the command line shows
    :mod:`symcost.progress`'s bar on a terminal instead); ``jobs``: processes that price candidates (1: this
    one; a number; ``"auto"``: every core, for spaces of :data:`.pool.MIN_CANDIDATES` or more): the
    ranking is the same, a candidate's plan is derived again here when it is read (see :mod:`.pool`)."""
    if objective not in OBJECTIVES:
        raise UsageError(f"--objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
    if hw is None:
        raise UsageError("search ranks by numbers: give --hw (a preset, e.g. tpu-v5p)")
    prog = text if isinstance(text, Program) else parse(text)
    sizes = {**prog.ranking, **parse_dims(dims)}
    axis_range = None
    if vs is not None:
        mesh, sizes, axis_range = _free_axis(mesh, sizes, vs)
    space = Space.of(prog, mesh, hw, sizes)
    free = space.unbound(sizes)
    if free:
        raise UsageError(f"search ranks by numbers: bind {', '.join(free)} with --dims (or a rank statement), "
                         f"e.g. --dims " + ",".join(f"{d}=8192" for d in free))
    if vs is not None:
        if vs not in sizes:
            raise UsageError(f"--vs {vs}: bind {vs} with --dims (the value plans are chosen at), "
                             f"e.g. --dims {vs}=1048576")
        lo, hi = range if range is not None else axis_range or (sizes[vs] / 1000, sizes[vs] * 1000)
        if not 0 < lo < hi:
            raise UsageError(f"--range must be two positive numbers LO:HI with LO < HI, not {lo}:{hi}")
    start = time.perf_counter()
    options = dict(dims=sizes, hw=hw, backward=backward, overlap=overlap, moves=moves)
    priced = [p for p in priced_all(space, list(space.candidates()), jobs=jobs, options=options,
                                    progress_wrap=progress, sweep=None if vs is None else (vs, grid_of(lo, hi)))
              if p is not None]
    if not priced:
        raise UsageError("no candidate could be priced: bind every size the program uses with --dims")
    priced.sort(key=lambda p: (not p.fits, _rounded(p.objective(objective)), p.t_comms, p.memory_bytes or 0.0))
    seconds = time.perf_counter() - start
    hbm = getattr(space.hardware, "hbm_bytes", None)
    result = SearchResult(space, space.size, space.assignments, len(priced), sum(p.fits for p in priced),
                          seconds, tuple(priced), objective, hbm_bytes=hbm,
                          planned_at={a.name: sizes[a.name] for a in space.mesh.axes if a.size is None})
    if vs is None:
        return result
    regimes = tuple(envelope(list(priced), vs, lo, hi, hbm))
    from dataclasses import replace
    return replace(result, vs=vs, range=(float(lo), float(hi)), regimes=regimes)


def _free_axis(mesh, sizes: dict, vs: str):
    """``--vs AXIS``: the mesh with that axis symbolic, its size moved to the sizes (plans are chosen there,
    their costs stay functions of it), and its default range (one device to 64 times the size: the chip
    count grows along that axis). A dimension is returned as it is."""
    from dataclasses import replace as _replace

    from ..mesh import Mesh, parse_mesh
    m = mesh if isinstance(mesh, Mesh) else parse_mesh(mesh)
    if vs not in m:
        return mesh, sizes, None
    ax = m.axis(vs)
    size = sizes.get(vs, ax.size)
    if size is None:
        raise UsageError(f"--vs {vs}: give the mesh axis a size (--mesh {vs}=16,...), the size plans are chosen at")
    free = Mesh(tuple(_replace(a, size=None) if a.name == vs else a for a in m.axes))
    return free, {**sizes, vs: size}, (1.0, float(size) * 64)


def _regime(r: Regime, best: int, span) -> dict:
    """A regime as the contract has it: ``from`` and ``to`` as strings (the exact boundary where SymPy
    solved it, else its number; the range's ends where the regime is open), their numbers, and why each
    boundary is where it is."""
    def edge(b, end):
        if b is None:
            return str(span[end]), float(span[end]), None
        return (str(b.exact) if b.exact is not None else repr(b.value)), b.value, b.reason
    lo, hi = edge(r.start, 0), edge(r.end, 1)
    return {"from": lo[0], "to": hi[0], "best": best, "bound": r.bound, "from_value": lo[1], "to_value": hi[1],
            "from_reason": lo[2], "to_reason": hi[2]}


def _rounded(x: float) -> float:
    return float(f"{x:.9e}")


__all__ = ["search", "SearchResult", "Space", "Candidate", "Priced", "Regime", "Boundary", "OBJECTIVES"]
