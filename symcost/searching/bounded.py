"""The top of a large space, proven without pricing every candidate: each statement's pieces planned once,
each candidate bounded by them, candidates derived from the least bound up.

A search that shows its best ``top`` need not derive a candidate whose step time cannot be among them. The
bound is the exact search's (:mod:`.pieces`): each statement planned alone by the engine at each sharding
the candidates give its tensors, totalled into a resource vector (compute, HBM, each axis's links); a
candidate's step time is at least the largest of its pieces' summed resources. Candidates are then derived
whole by the engine, as the ordinary search derives them (:mod:`.price`), in the order of their bounds,
until ``top`` of them fit in HBM and the next bound is above the slowest of those: every candidate left is
slower than each of them, whether it fits or not. The ``top`` shown are the ordinary search's, in its order
(a test holds them equal).

    >>> from symcost.searching.space import Space
    >>> sp = Space.of(open("examples/mlp3.sc").read(), "X=2,Y=2", "tpu-v5p")
    >>> opts = dict(dims=dict(sp.program.ranking), hw="tpu-v5p", backward=True)
    >>> b = bounds(sp, opts)
    >>> len(b.ordered), b.pieces, round(b.ordered[0][0] * 1e6)          # candidates, pieces, least bound (us)
    (210, 312, 786)
    >>> found = list(until_proven(sp, b.ordered, 1, 1, opts, key=lambda p: p.t_step))
    >>> len(found), round(found[0][0].t_step * 1e6)                       # derived, the best (us)
    (1, 786)

A statement's pieces are those of the distinct splits its tensors take over the candidates (the LLaMA 3 8B
layer's 2,916 candidates on h100 ``X=4,Y=2`` take 4,375; on ``X=4,Y=4,Z=4`` the LLaMA 3 70B layer's 27,720
take 45,588), each a statement planned alone, a few milliseconds where a candidate whole takes tens on three
axes. It is the default of ``symcost search`` (its ``--top``) for spaces of :data:`FROM` candidates or more,
where the objective is the step time under the book's overlap policy on the ideal machine (what the bound
bounds); ``--every`` prices every candidate.
"""
from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass

from .. import progress as bars
from ..errors import UsageError
from ..pricing import policy
from . import pieces as pcs
from .pool import priced_all, workers
from .price import Priced, rounded
from .space import Space

#: the fewest candidates a search bounds (below, pricing them all costs less than planning their pieces)
FROM = 1000
#: pieces planned before the search says how long the rest will take
SAMPLE = 50
#: how far a bound is taken down before it is compared: the pieces' sums add the same step times as the
#: plan's totals in another order, so they may differ in their last bits
ULPS = 1e-12


def applies(space: Space, *, top, objective: str, vs, efficiency: bool, overlap) -> bool:
    """Whether a search with these options is bounded: a ``top`` asked, a space of :data:`FROM` candidates
    or more, the step time ranked under the book's overlap policy on the ideal machine, no ``vs`` sweep
    (which reads every candidate), and a program of einsums and elementwise work (the pieces) with two
    statements or more (one statement's pieces are its candidates whole)."""
    if top is None or space.size < FROM or objective != "time" or vs is not None or efficiency:
        return False
    if policy(overlap) != "program":
        return False
    try:
        return len(pcs.statements(space)) > 1
    except UsageError:
        return False


@dataclass(frozen=True)
class Bounds:
    """Every candidate with its bounds, ``(step time, communication time, candidate)``, in the order of
    :func:`order`; how many have none (a statement the engine refuses to plan alone at their layouts: such a
    candidate's bounds are 0, so it is derived, and refused there where the engine refuses the whole); how
    many pieces were planned."""

    ordered: tuple[tuple[float, float, object], ...]
    unbounded: int
    pieces: int


def order(entry: tuple) -> tuple:
    """The order candidates are derived in: their step-time bound as the ranking rounds a step time, then
    their communication bound (a search ranks equal step times by communication time)."""
    low, comms, _ = entry
    return rounded(low * (1 - ULPS)), comms


def beaten(entry: tuple, kth: Priced) -> bool:
    """Whether a candidate ranks after ``kth`` whatever its plan: its step time, as ranked, is above
    ``kth``'s, or equal to it with more communication (a plan's step time is at least the bound, its
    communication time -- the busiest axis's -- at least the busiest axis's sum of the pieces)."""
    t, comms = order(entry)
    return t > rounded(kth.t_step) or t == rounded(kth.t_step) and comms * (1 - ULPS) > kth.t_comms


def bounds(space: Space, options: dict, jobs=1) -> Bounds:
    """Each candidate's bound, from the pieces its statements take (planned in ``jobs`` processes)."""
    where = pcs.statements(space)
    subs = {at: pcs.alone(space, at) for at in where}
    cands = list(space.candidates())
    work, keyed = pcs.used(subs, cands)
    procs = workers(jobs, len(work))
    bars.say(f"search: {len(cands):,} candidates; their statements' {len(work):,} pieces ({len(where)} statements, "
             f"each at every sharding the candidates give it) to plan on {procs} process{'es' if procs > 1 else ''}, "
             f"then candidates derived from the least bound up")
    began, done = time.perf_counter(), [0]

    def tick():
        done[0] += 1
        bars.advance(1, "search: statements planned alone", total=len(work), unit=" pieces")
        if done[0] == SAMPLE and len(work) > 2 * SAMPLE:
            rate = SAMPLE / max(time.perf_counter() - began, 1e-9)
            bars.say(f"search: about {(len(work) - SAMPLE) / rate:,.0f} s more for the pieces, at {rate:,.0f} a second "
                     f"(the first {SAMPLE})")
    by_statement = pcs.all_pieces(space, subs, options, tick, jobs=jobs, work=work)
    vector = {(p.statement, p.splits): p.vector for ps in by_statement for p in ps}
    ordered, unbounded = [], 0
    for cand, ks in zip(cands, keyed):
        vs = [vector.get((at, k)) for at, k in zip(subs, ks)]
        if any(v is None for v in vs):   # a statement the engine refuses alone: no bound, derived first
            unbounded += 1
            ordered.append((0.0, 0.0, cand))
        else:
            sums = [sum(col) for col in zip(*vs)]
            ordered.append((max(sums), max(sums[2:], default=0.0), cand))
    ordered.sort(key=order)
    return Bounds(tuple(ordered), unbounded, len(work))


def until_proven(space: Space, ordered, top: int, jobs, options: dict, key):
    """The candidates of ``ordered`` (:attr:`Bounds.ordered`) priced by the engine, in that order, until
    ``top`` of them fit and the next ranks after the slowest of those by the ranking's ``key`` whatever its
    plan (:func:`beaten`; so does every one after it, their bounds being no less), each yielded as
    ``(priced,)``, or ``()`` where the engine refuses it."""
    best: list[Priced] = []       # the top fitting so far, by ``key``
    cands = [c for _, _, c in ordered]
    with closing(priced_all(space, cands, jobs=jobs, options=options)) as got:
        for entry in ordered:
            if len(best) >= top and beaten(entry, best[-1]):
                return
            p = next(got)
            if p is not None and p.fits:
                best = sorted(best + [p], key=key)[:top]
            yield () if p is None else (p,)
