"""The top of a large space, proven without pricing every candidate: each candidate bounded by its
statements planned alone, candidates derived from the least bound up.

A search that shows its best ``top`` need not derive a candidate that cannot be among them. The bounds are
the exact search's pieces (:mod:`.pieces`): each statement planned alone by the engine at a sharding the
candidates give its tensors, totalled into a resource vector (compute, HBM, each axis's links). A
candidate's step time is at least the largest of its pieces' summed resources, and its communication time
(the busiest axis's, which ranks equally fast candidates) at least the largest of their summed links. Some
of its statements' pieces, with the others at their least (:func:`.pieces.floor`: a statement's work
shared evenly by every device whatever its sharding, and on the links the floor its gradients have where
they have one, :mod:`.floors`, read off its layouts), bound it too, more loosely. So:

1. the pieces of the statements with the fewest shardings (a tenth of all the distinct pieces at most,
   :data:`FIRST`; a statement alike one of them, :mod:`.alike`, adds none) are planned first, in ``jobs``
   processes, and order every candidate by the bounds they give;
2. in that order, each candidate's other pieces are planned (each once, in this process; a statement at
   a time, first those bounded by their work alone, whose pieces add the most, then those with a floor on
   their links, the statements with the most pieces first within each, and no more once those planned rank
   it below the ``top`` found so far), and the candidate is derived whole by the engine, as the ordinary
   search derives it (:mod:`.price`), unless its whole bounds already rank it below that ``top``;
3. once ``top`` candidates fit in HBM and the next candidate's first bounds rank it below the slowest of
   them, every candidate left does too (their bounds are no less), whether it fits or not.

The ``top`` shown are the ordinary search's, in its order (a test holds them equal).

    >>> from symcost.searching.space import Space
    >>> sp = Space.of(open("examples/mlp3.sc").read(), "X=2,Y=2", "tpu-v5p")
    >>> opts = dict(dims=dict(sp.program.ranking), hw="tpu-v5p", backward=True)
    >>> b = Bounds(sp, opts)
    >>> len(b.ordered), b.first, b.planned                     # candidates, statements planned first, pieces
    (210, (3,), 86)
    >>> found = list(until_proven(b, 1, key=lambda p: p.t_step))
    >>> b.derived, b.planned, round(found[0][0].t_step * 1e6)  # derived, pieces planned by then, the best (us)
    (1, 168, 786)

The LLaMA 3 8B layer's 2,916 candidates on h100 ``X=4,Y=2`` take 4,375 pieces, of which 548 are read
first and 521 more as candidates come up, 772 of them planned (the others alike; 196 derived); on
``X=4,Y=2,Z=2`` its 80,190 candidates take 89,925, of which 7,931 and 2,607 are read, 7,894 planned (775
derived). It is
the default of ``symcost search`` (its ``--top``) for spaces of :data:`FROM` candidates or more, where the
objective is the step time under the book's overlap policy on the ideal machine (what the bounds bound);
``--every`` prices every candidate.
"""
from __future__ import annotations

import heapq
import time

import numpy as np

from .. import progress as bars
from ..errors import UsageError
from ..pricing import policy
from . import alike
from . import floors as fl
from . import pieces as pcs
from .keyed import Keyed
from .pool import workers
from .price import Priced, price, rounded
from .space import Space

#: the fewest candidates a search bounds (below, pricing them all costs less than planning their pieces)
FROM = 1000
#: the share of the distinct pieces planned before any candidate is ordered: the statements with the fewest
#: shardings, while theirs are at most this share of all (at least one statement, never all). Measured on
#: the LLaMA 3 8B layer's bounded searches on h100 (2026-11-27, one core): on X=4,Y=2 a tenth takes its
#: attention core and both MLP projections alike (323 pieces), where a fifth added its down projection
#: too (548; 2.65-2.95 s against 3.0-3.4 s); on X=4,Y=2,Z=2 both take the same five statements, without
#: the down projection the search took 85 s, not 56 s
FIRST = 0.1
#: pieces planned before the search says how long the first will take
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


def order(entry: tuple) -> tuple:
    """The order candidates are taken in, ``entry`` being ``(step-time bound, communication bound,
    candidate)``: the step-time bound as the ranking rounds a step time, then the communication bound (a
    search ranks equal step times by communication time)."""
    low, comms, _ = entry
    return rounded(low * (1 - ULPS)), comms


def beaten(entry: tuple, kth: Priced) -> bool:
    """Whether a candidate ranks after ``kth`` whatever its plan: its step time, as ranked, is above
    ``kth``'s, or equal to it with more communication (a plan's step time is at least the bound, its
    communication time -- the busiest axis's -- at least the busiest axis's sum of the pieces)."""
    t, comms = order(entry)
    return t > rounded(kth.t_step) or t == rounded(kth.t_step) and comms * (1 - ULPS) > kth.t_comms


class Bounds:
    """A bounded search's state: every candidate with its first bounds (``ordered``, by :func:`order`), the
    pieces planned so far, and how many candidates were derived. ``options``: :func:`~.price.price`'s;
    ``cands``: the space's candidates, in its order (a list, or ``{candidate: its place}``), where the caller
    has listed them already."""

    def __init__(self, space: Space, options: dict, jobs=1, cands=None):
        self.space, self.options = space, options
        where = pcs.statements(space)
        self.subs = {at: pcs.alone(space, at) for at in where}
        # candidate -> its row in the tables: its place in the space (a search's ``{candidate: place}`` as it is)
        self.index = cands if isinstance(cands, dict) else \
            {c: i for i, c in enumerate(space.candidates() if cands is None else cands)}
        cands = list(self.index)
        self.keyed = Keyed(self.subs, cands)
        work = self.keyed.work
        self.size = {at: len(ks) for at, ks in self.keyed.keys.items()}     # statement -> its pieces taken
        self.exact, self.floors = pcs.exactly(space, self.subs), {}
        self.vectors: dict = {}          # (statement, splits) -> resource vector (None: the engine refused it)
        self.forms = {at: alike.form(self.subs[at]) for at in where}
        alikes = {at: {self._alike(at, k) for k in ks} for at, ks in self.keyed.keys.items()}
        self.first = _first(alikes)
        self.alike: dict = {}            # what a piece depends on, names aside (alike.key) -> its vector
        self.derived = 0
        ahead = [w for w in work if w[0] in self.first]
        procs = workers(jobs, len(ahead))
        distinct = len(set().union(*(alikes[at] for at in self.first)))
        bars.say(f"search: {len(cands):,} candidates; {len(ahead):,} of their statements' {len(work):,} pieces "
                 f"(statement{'s' if len(self.first) > 1 else ''} {', '.join(map(str, self.first))} at every sharding "
                 f"the candidates give {'them' if len(self.first) > 1 else 'it'}"
                 f"{f'; {distinct:,} distinct but for their names' if distinct < len(ahead) else ''}) to plan on "
                 f"{procs} process{'es' if procs > 1 else ''}, then candidates derived from the least bound up")
        began, done = time.perf_counter(), [0]

        def tick():
            done[0] += 1
            bars.advance(1, "search: statements planned alone", total=len(ahead), unit=" pieces")
            if done[0] == SAMPLE and len(ahead) > 2 * SAMPLE:
                rate = SAMPLE / max(time.perf_counter() - began, 1e-9)
                bars.say(f"search: about {(distinct - SAMPLE) / rate:,.0f} s more for them, at {rate:,.0f} a second "
                         f"(the first {SAMPLE})")
        planned = pcs.all_pieces(space, {at: self.subs[at] for at in self.first}, options, tick, jobs=jobs,
                                 work=ahead, floors=self.floors)
        self.vectors.update({(at, k): None for at, _, k in ahead})
        self.vectors.update({(p.statement, p.splits): p.vector for ps in planned for p in ps})
        self.alike.update({self._alike(at, k): v for (at, k), v in self.vectors.items()})
        # each other statement at its least whatever its sharding (its work shared evenly), and where its
        # gradients have a floor on the links, that floor at each sharding the candidates give it
        self.least = {at: pcs.floor(self.subs[at], options, space.mesh) for at in where if at not in self.first}
        self.lower = self._lower([w for w in work if w[0] not in self.first and isinstance(self.exact[w[0]], tuple)])
        self.ordered = self._ordered(cands)

    def _ordered(self, cands: list) -> tuple:
        """Every candidate's first bounds (:meth:`_bounds` over the statements planned first, as arrays: one
        sum a statement), in :func:`order`."""
        width = len(pcs.resources(self.space.mesh))
        rows = {}
        for at, ks in self.keyed.keys.items():
            vs = [self._vector(at, k, self.first) for k in ks]
            rows[at] = (np.array([v or (0.0,) * width for v in vs], dtype=float).reshape(-1, width),
                        np.array([v is None for v in vs], dtype=bool))
        sums, missing = self.keyed.sums(rows)
        low = np.where(missing, 0.0, sums.max(axis=1)).tolist()
        comms = np.where(missing, 0.0, sums[:, 2:].max(axis=1) if width > 2 else 0.0).tolist()
        ranked = [rounded(x * (1 - ULPS)) for x in low]
        return tuple((low[i], comms[i], cands[i]) for i in np.lexsort((comms, ranked)).tolist())

    @property
    def planned(self) -> int:
        return len(self.vectors)

    def whole(self, entry: tuple, enough=None) -> tuple:
        """``entry`` with its bounds over every statement, the pieces it still needs planned here (the
        statements with the most pieces first). ``enough(bounds)``: where the bounds over the statements
        planned so far (the others at their least) already satisfy it, they are returned at once (a
        candidate they rank after the top needs no more of its pieces: its whole bounds are no less)."""
        cand = entry[2]
        splits = self.keys_of(cand)
        keys = tuple(zip(self.subs, splits))
        for at, k in sorted(keys, key=self._refining):
            if (at, k) in self.vectors:
                continue
            if enough is not None and enough(got := self._bounds(cand, tuple(a for a, j in keys
                                                                               if (a, j) in self.vectors), splits)):
                return got
            same = self._alike(at, k)
            if same not in self.alike:     # a statement alike but for its names planned it already
                self.alike[same] = pcs.vector_here(self.space, self.subs, at, cand, self.options, self.exact[at],
                                                   self.floors)
            self.vectors[at, k] = self.alike[same]
        return self._bounds(cand, tuple(self.subs), splits)

    def _refining(self, key: tuple) -> tuple:
        """The order a candidate's missing pieces are planned in: first the statements bounded by their work
        alone (no floor on their links: their pieces add the most), then those with a link floor; the
        statements with the most pieces first within each."""
        at = key[0]
        return isinstance(self.exact[at], tuple), -self.size[at], at

    def keys_of(self, cand) -> tuple:
        """A candidate's key of each statement (its splits there), in statement order."""
        return self.keyed.of(self.index[cand])

    def _alike(self, at: int, splits: tuple) -> tuple:
        return alike.key(self.forms[at], splits, self.exact[at])

    def _lower(self, work: list) -> dict:
        """``{(statement, splits): its least}`` for the statements of ``work`` (not planned first) whose
        gradients have a floor on the links (:mod:`.floors`): their work at its least, and that floor, read
        off their layouts without planning them (one plan prices it)."""
        forward = {**self.options, "backward": False}
        plan = next((p for at, cand, _ in work if (p := pcs.planned_alone(self.subs[at], cand, forward)) is not None),
                    None)
        if plan is None:
            return {}
        pricing = fl.pricing(plan)
        floors = {at: fl.links_at(self.subs[at], *self.exact[at], *pricing) for at in {w[0] for w in work}}
        out = {}
        for at, _, k in work:
            links = floors[at](k)
            out[at, k] = self.least[at][:2] + tuple(a + b for a, b in zip(self.least[at][2:], links))
        return out

    def _vector(self, at: int, k: tuple, statements) -> tuple | None:
        """Statement ``at``'s resources at key ``k``: its piece where it is among ``statements`` (None: the
        engine refused it), else its least (its links at their floor where it has one)."""
        return self.vectors[at, k] if at in statements else self.lower.get((at, k)) or self.least[at]

    def _bounds(self, cand, statements, splits=None) -> tuple:
        """``(step-time bound, communication bound, cand)`` from ``statements``' pieces and the other
        statements at their least (their links at their floor where they have one); 0 where a piece is
        missing (a statement the engine refuses alone: the candidate is derived, and refused there where the
        engine refuses the whole). ``splits``: the candidate's keys, where the caller has them."""
        vs = [self._vector(at, k, statements) for at, k in zip(self.subs, splits or self.keys_of(cand))]
        if any(v is None for v in vs):
            return 0.0, 0.0, cand
        return (*pcs.bounds_of(vs), cand)


def _first(keys: dict) -> tuple:
    """The statements whose pieces are planned first: those with the fewest, while the distinct pieces they
    plan (``keys``: each statement's :func:`.alike.key` s; a statement alike one chosen plans none) are at
    most :data:`FIRST` of all (at least one statement, never every one)."""
    chosen, have = [], set()
    total = len(set().union(*keys.values()))
    for at, ks in sorted(keys.items(), key=lambda x: (len(x[1]), x[0])):
        if chosen and (len(have | ks) > FIRST * total or len(chosen) == len(keys) - 1):
            break
        chosen.append(at)
        have |= ks
    return tuple(sorted(chosen))


def until_proven(bounds: Bounds, top: int, key):
    """The candidates of ``bounds`` derived in the order of their whole bounds (:meth:`Bounds.whole`), each
    made only once no candidate not yet looked at can have a lesser one (its first bound, no more than its
    whole one, is not less), until ``top`` of them fit and the next ranks after the slowest of those whatever
    its plan (:func:`beaten`; so does every one after it): ``(priced,)`` for each derived, ``()`` where the
    engine refuses it or where a candidate's whole bounds already rank it after them. ``key``: the
    ranking's."""
    best: list[Priced] = []       # the top fitting so far, by ``key``
    waiting: list = []            # (order of the whole bounds, place, whole entry)
    ordered, i = bounds.ordered, 0
    while True:
        while i < len(ordered) and (not waiting or order(ordered[i]) <= waiting[0][0]):
            entry, i = ordered[i], i + 1
            if len(best) >= top and beaten(entry, best[-1]):
                i = len(ordered)          # so is every one after it
                break
            whole = bounds.whole(entry, (lambda got, kth=best[-1]: beaten(got, kth)) if len(best) >= top else None)
            if len(best) >= top and beaten(whole, best[-1]):
                yield ()
                continue
            heapq.heappush(waiting, (order(whole), i, whole))
        if not waiting:
            return
        _, _, whole = heapq.heappop(waiting)
        if len(best) >= top and beaten(whole, best[-1]):
            return                        # so is every one waiting, and every one not looked at
        bounds.derived += 1
        p = price(bounds.space, whole[2], **bounds.options)
        if p is not None and p.fits:
            best = sorted(best + [p], key=key)[:top]
        yield () if p is None else (p,)
