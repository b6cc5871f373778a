"""What a search found: :class:`SearchResult`, a frozen value with :meth:`~SearchResult.as_dict` (the
``search --json`` contract, ``symcost/schemas/search.json``)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..mesh import link_models
from .price import Priced
from .regimes import Regime
from .space import Space


@dataclass(frozen=True)
class SearchResult:
    """What a search found: how many candidates it priced, how many fit, all of them ranked (feasible
    first), and the regimes over ``vs`` when asked. ``complete`` is False when the search was stopped
    (Ctrl-C): ``ranked`` then holds the candidates priced until then. An exact search whose time ran out
    before its gap closed is complete, its ``gap`` still open: ``time_limit`` says so."""

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
    complete: bool = True
    sizes: dict = field(default_factory=dict, repr=False)  # the sizes every candidate was priced at
    bound: float | None = None          # search --exact: a proven lower bound on every plan's step time
    gap: float | None = None            # (best - bound) / best
    search_best: Priced | None = field(default=None, repr=False)   # --exact: the best of the search's space
    time_limit: float | None = None     # --exact: the seconds it had to close the gap, where they ran out first
                                        # (the gap still open)
    bounded: int = 0                    # candidates never derived: their bounds show them slower than the top
    top: int | None = None              # how many of the best a bounded search proved (None: every one priced)

    @property
    def mesh_sizes(self) -> dict:
        """``{axis: size}``, an axis ``--vs`` varies at the size its plans were chosen at."""
        return {a.name: a.size if a.size is not None else self.planned_at.get(a.name) for a in self.space.mesh.axes}

    @property
    def links(self) -> dict:
        """Each axis's link model (``{"X": {"kind", "wrap", "links"}}``), as the mesh was laid on the preset."""
        return link_models(self.space.mesh)

    @property
    def best(self) -> Priced | None:
        return self.ranked[0] if self.ranked and self.ranked[0].fits else None

    def program_of(self, p: Priced) -> str:
        """A candidate as notation, ready for ``derive`` (its axes written on the open tensors)."""
        return str(self.space.program_for(p.candidate))

    @property
    def dims(self) -> str:
        """The sizes the candidates were priced at, as ``--dims`` takes them: with a candidate's
        ``program``, ``derive --dims`` gives the numbers the search ranked by."""
        return ",".join(f"{k}={v}" for k, v in self.sizes.items() if k not in self.space.mesh)

    def as_dict(self, top: int = 10) -> dict:
        """The ``--json`` form: the first ``top`` ranked candidates (and every regime's best), each with
        its ``program``."""
        shown = list(range(min(top, len(self.ranked))))
        for r in self.regimes:
            if r.best not in shown:
                shown.append(r.best)
        index = {i: n for n, i in enumerate(shown)}
        ranked = [{"rank": i + 1, **self.ranked[i].as_dict(), "program": self.program_of(self.ranked[i])}
                  for i in shown]
        return {
            "program": str(self.space.program), "dims": self.dims, "mesh": self.mesh_sizes, "links": self.links,
            "candidates": self.candidates, "assignments": self.assignments, "priced": self.priced,
            "feasible": self.feasible, "seconds": self.seconds, "objective": self.objective,
            "complete": self.complete, "hbm_bytes": self.hbm_bytes, "bounded": self.bounded, "ranked": ranked,
            **(_exact_dict(self) if self.bound is not None else {}),
            **({"vs": self.vs, "range": list(self.range),
                "regimes": [_regime(r, index[r.best], self.range) for r in self.regimes]} if self.vs else {}),
        }


def _exact_dict(result: SearchResult) -> dict:
    """``bound`` and ``gap``, and the best of the search's space (every statement sharded by the same
    roles: what the ordinary search finds) with how much slower it is than the best found."""
    out = {"bound": result.bound, "gap": result.gap if result.best is not None else None,
           "time_limit": result.time_limit}
    sb, best = result.search_best, result.best
    if sb is not None and best is not None:
        out["search_best"] = {"t_step": sb.t_step, "slower_by": sb.t_step / best.t_step - 1,
                              "program": result.program_of(sb)}
    return out


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
