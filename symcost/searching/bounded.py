"""The top of a large space, proven without pricing every candidate: candidates taken from the least
bound up, each statement planned alone only where a candidate so taken needs it.

A search that shows its best ``top`` need not derive a candidate that cannot be among them. The bounds are
the exact search's pieces (:mod:`.pieces`): each statement planned alone by the engine at a sharding the
candidates give its tensors, totalled into a resource vector (compute, HBM, each axis's links). A
candidate's step time is at least the largest of its pieces' summed resources, and its communication time
(the busiest axis's, which ranks equally fast candidates) at least the largest of their summed links. A
statement not planned yet at a candidate's sharding stands at its least (:func:`.pieces.floor`: its work
shared evenly by every device whatever its sharding, and on the links the floor its gradients have where
they have one, :mod:`.floors`, read off its layouts), which bounds the candidate too, more loosely. So, a
best-first walk (:func:`until_proven`):

1. every candidate goes into a heap by its bounds from the pieces at hand (at first every statement at its
   least: one array sum a statement, :mod:`.keyed`);
2. the candidate with the least bounds is taken: where its bounds rose since it went in (pieces it shares
   were planned meanwhile), it goes back with them; where one of its statements' pieces is missing, that
   piece is planned (its statement's with the fewest pieces: a piece shared by the most candidates; a
   statement alike one planned, :mod:`.alike`, plans none) and it goes back; with every piece planned, it
   is derived whole by the engine, as the ordinary search derives it (:mod:`.price`);
3. once ``top`` candidates fit in HBM and the least bounds in the heap rank after the slowest of them,
   every candidate left does too (its bounds are no less), whether it fits or not.

A piece is planned only when a candidate that might still be among the best needs it. With several
processes (``jobs``), the pieces of the statements with the fewest (a tenth of all the distinct pieces at
most, :data:`FIRST`) are planned ahead on every core, the walk then finding them at hand.

The ``top`` shown are the ordinary search's, in its order (a test holds them equal).

    >>> from symcost.searching.space import Space
    >>> sp = Space.of(open("examples/mlp3.sc").read(), "X=2,Y=2", "tpu-v5p")
    >>> opts = dict(dims=dict(sp.program.ranking), hw="tpu-v5p", backward=True)
    >>> b = Bounds(sp, opts)
    >>> len(b.cands), b.first, b.planned                      # candidates, statements planned ahead, pieces
    (210, (), 0)
    >>> found = list(until_proven(b, 1, key=lambda p: p.t_step))
    >>> b.derived, b.planned, round(found[0][0].t_step * 1e6)  # derived, pieces planned by then, the best (us)
    (1, 156, 786)

The LLaMA 3 8B layer's 2,916 candidates on h100 ``X=4,Y=2`` take 4,375 pieces, of which the walk takes
596 (493 planned, the others alike) and derives 196 candidates; on ``X=4,Y=2,Z=2`` its 80,190 candidates
take 89,925, of which it takes 5,848 (4,541 planned; 775 derived), where planning the statements with the
fewest pieces ahead of the first candidate planned 7,894 of them. It is
the default of ``symcost search`` (its ``--top``) for spaces of :data:`FROM` candidates or more, where the
objective is the step time under the book's overlap policy on the ideal machine (what the bounds bound);
``--every`` prices every candidate.
"""
from __future__ import annotations

import heapq

import numpy as np

from .. import progress as bars
from ..errors import UsageError
from ..pricing import policy
from ..searches import Pace
from . import alike
from . import floors as fl
from . import pieces as pcs
from .keyed import Keyed
from .pool import workers
from .price import Priced, price, rounded
from .space import Space

#: the fewest candidates a search bounds (below, pricing them all costs less than planning their pieces)
FROM = 1000
#: the share of the distinct pieces planned ahead where several processes plan: the statements with the
#: fewest shardings, while theirs are at most this share of all (at least one statement, never all).
#: Measured when every bounded search planned them ahead of its first candidate, on the LLaMA 3 8B layer's
#: bounded searches on h100 (2026-11-27, one core): on X=4,Y=2 a tenth takes its
#: attention core and both MLP projections alike (323 pieces), where a fifth added its down projection
#: too (548; 2.65-2.95 s against 3.0-3.4 s); on X=4,Y=2,Z=2 both take the same five statements, without
#: the down projection the search took 85 s, not 56 s
FIRST = 0.1
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


def order(low: float, comms: float) -> tuple:
    """The order candidates are taken in from their bounds on the step time (``low``) and on the
    communication time: the step-time bound as the ranking rounds a step time, then the communication bound
    (a search ranks equal step times by communication time)."""
    return rounded(low * (1 - ULPS)), comms


def beaten(ranked: tuple, kth: Priced) -> bool:
    """Whether a candidate whose bounds are ``ranked`` (:func:`order`) ranks after ``kth`` whatever its plan:
    its step time, as ranked, is above ``kth``'s, or equal to it with more communication (a plan's step time
    is at least the bound, its communication time -- the busiest axis's -- at least the busiest axis's sum of
    the pieces)."""
    t, comms = ranked
    return t > rounded(kth.t_step) or t == rounded(kth.t_step) and comms * (1 - ULPS) > kth.t_comms


class Bounds:
    """A bounded search's state: each statement's pieces at hand (planned, or at their least until a
    candidate needs them), each candidate's bounds from them, and how many candidates were derived.
    ``options``: :func:`~.price.price`'s; ``cands``: the space's candidates, in its order (a list, or
    ``{candidate: its place}``), where the caller has listed them already. A candidate is named by its place
    (``i``, its row in the tables)."""

    def __init__(self, space: Space, options: dict, jobs=1, cands=None):
        self.space, self.options = space, options
        where = pcs.statements(space)
        self.subs = {at: pcs.alone(space, at) for at in where}
        index = cands if isinstance(cands, dict) else \
            {c: i for i, c in enumerate(space.candidates() if cands is None else cands)}
        self.cands = list(index)
        self.keyed = Keyed(self.subs, self.cands)
        work = self.keyed.work
        self.size = {at: len(ks) for at, ks in self.keyed.keys.items()}     # statement -> its pieces taken
        back = options.get("backward", False)
        self.exact, self.floors = pcs.exactly(space, self.subs, backward=back), {}
        self.forms = {at: alike.form(self.subs[at]) for at in where}
        self.alike: dict = {}            # what a piece depends on, names aside (alike.key) -> its vector
        self.derived = self.planned = 0
        # as the walk goes (:func:`until_proven`): the least bounds left (:func:`order`: the step time's, then
        # the communication's), and the slowest of the best found (None until there are as many as asked):
        # the top is proven when the first rank after the second (:func:`beaten`)
        self.least: tuple = (0.0, 0.0)
        self.kth: Priced | None = None
        # each statement at its least whatever its sharding (its work shared evenly), and where its gradients
        # have a floor on the links, that floor at each sharding the candidates give it
        least = {at: pcs.floor(self.subs[at], options, space.mesh) for at in where}
        linked = fl.floored(space, self.subs, backward=back)
        lower = self._lower([w for w in work if w[0] in linked], least, linked)
        self._at = list(self.subs)
        # a statement's keys, by number: the resource vector at hand (its piece once planned, None where the
        # engine refuses it; else its least) and whether it is planned
        self.hand = [[lower.get((at, k)) or least[at] for k in self.keyed.keys[at]] for at in self._at]
        self.done = [[False] * len(self.keyed.keys[at]) for at in self._at]
        # a candidate's missing pieces are planned the statement with the fewest pieces first
        self._refining = sorted(range(len(self._at)), key=lambda j: (self.size[self._at[j]], self._at[j]))
        self.first = self._ahead(work, jobs)

    def _ahead(self, work: list, jobs) -> tuple:
        """With several processes, the pieces of the statements with the fewest (:func:`_first`) planned
        ahead in them, every one the candidates take (those a walk from the least bound up plans most of);
        in one process, none. Returns the statements planned ahead."""
        if workers(jobs, len(work)) < 2:
            return ()
        ahead_of = {at: {self._alike(at, k) for k in ks} for at, ks in self.keyed.keys.items()}
        first = _first(ahead_of)
        ahead = [w for w in work if w[0] in first]
        procs = workers(jobs, len(ahead))
        if procs < 2:
            return ()
        distinct = len(set().union(*(ahead_of[at] for at in first)))
        bars.say(f"search: {len(ahead):,} of the {len(work):,} pieces the candidates take (statement"
                 f"{'s' if len(first) > 1 else ''} {', '.join(map(str, first))}"
                 f"{f'; {distinct:,} distinct but for their names' if distinct < len(ahead) else ''}) planned "
                 f"ahead on {procs} processes")
        pace = Pace("search", "pieces", len(ahead), what=" for them")

        def tick():
            bars.advance(1, "search: statements planned alone", total=len(ahead), unit=" pieces")
            pace()
        planned = pcs.all_pieces(self.space, {at: self.subs[at] for at in first}, self.options, tick, jobs=jobs,
                                 work=ahead, floors=self.floors)
        got = {(p.statement, p.splits): p.vector for ps in planned for p in ps}
        for at, _, k in ahead:
            self._keep(at, k, got.get((at, k)))
        return first

    def _keep(self, at: int, k: tuple, vector) -> None:
        j = self._at.index(at)
        n = self.keyed.number[at][k]
        self.hand[j][n], self.done[j][n] = vector, True
        self.alike.setdefault(self._alike(at, k), vector)
        self.planned += 1

    def order(self) -> list:
        """``(bounds in :func:`order`, candidate)`` of every candidate from the pieces at hand, as a heap
        (one array sum a statement)."""
        width = len(pcs.resources(self.space.mesh))
        rows = {at: (np.array([v or (0.0,) * width for v in vs], dtype=float).reshape(-1, width),
                     np.array([v is None for v in vs], dtype=bool)) for at, vs in zip(self._at, self.hand)}
        sums, missing = self.keyed.sums(rows)
        low = np.where(missing, 0.0, sums.max(axis=1)).tolist()
        comms = np.where(missing, 0.0, sums[:, 2:].max(axis=1) if width > 2 else 0.0).tolist()
        heap = [(order(a, b), i) for i, (a, b) in enumerate(zip(low, comms))]
        heapq.heapify(heap)
        return heap

    def bounds(self, i: int) -> tuple:
        """Candidate ``i``'s ``(step-time bound, communication bound)`` from the pieces at hand (its other
        statements at their least); 0 where a piece is refused (the candidate is derived, and refused there
        where the engine refuses the whole)."""
        vs = self.at_hand(i)
        if None in vs:
            return 0.0, 0.0
        return pcs.bounds_of(vs)

    def at_hand(self, i: int) -> list:
        """Candidate ``i``'s resource vector of each statement at hand: its piece where planned (None where
        the engine refuses it), else the statement's least."""
        return [hand[n] for hand, n in zip(self.hand, self.keyed.row(i))]

    def refine(self, i: int) -> bool:
        """Plan one of candidate ``i``'s missing pieces (that of its statement with the fewest pieces: the
        piece then bounds the most candidates), in this process; False where none is missing, or where one
        is refused (the candidate is derived)."""
        row = self.keyed.row(i)
        if any(hand[n] is None for hand, n in zip(self.hand, row)):
            return False
        for j in self._refining:
            if not self.done[j][row[j]]:
                at = self._at[j]
                k = self.keyed.keys[at][row[j]]
                same = self._alike(at, k)
                if same not in self.alike:     # a statement alike but for its names planned it already
                    self.alike[same] = pcs.vector_here(self.space, self.subs, at, self.cands[i], self.options,
                                                       self.exact[at], self.floors)
                self._keep(at, k, self.alike[same])
                return True
        return False

    def whole(self, i: int) -> tuple:
        """Candidate ``i``'s bounds over every statement's piece (each planned here where it is not yet)."""
        while self.refine(i):
            pass
        return self.bounds(i)

    def _alike(self, at: int, splits: tuple) -> tuple:
        return alike.key(self.forms[at], splits, self.exact[at])

    def _lower(self, work: list, least: dict, linked: dict) -> dict:
        """``{(statement, splits): its least}`` for the statements of ``work``, whose gradients have a floor
        on the links (``linked``: :func:`.floors.floored`, the exact pieces' statements included, whose
        floor bounds them until they are planned): their work at its least, and that floor, read off their
        layouts without planning them (one plan prices it)."""
        forward = {**self.options, "backward": False}
        plan = next((p for at, cand, _ in work if (p := pcs.planned_alone(self.subs[at], cand, forward)) is not None),
                    None)
        if plan is None:
            return {}
        pricing = fl.pricing(plan)
        floors = {at: fl.links_at(self.subs[at], *linked[at], *pricing) for at in {w[0] for w in work}}
        out = {}
        for at, _, k in work:
            links = floors[at](k)
            out[at, k] = least[at][:2] + tuple(a + b for a, b in zip(least[at][2:], links))
        return out


def _first(keys: dict) -> tuple:
    """The statements whose pieces are planned ahead: those with the fewest, while the distinct pieces they
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
    """The candidates of ``bounds`` taken from the least bound up (a heap, each candidate once at first with
    its bounds from the pieces at hand): a candidate whose bounds rose since it was put in (pieces it shares
    were planned meanwhile) goes back with them; one with a piece missing has it planned
    (:meth:`Bounds.refine`) and goes back; one with every piece is derived, as the ordinary search derives it
    (:mod:`.price`), until ``top`` of them fit and the least bound left ranks after the slowest of those
    whatever its plan (:func:`beaten`; so does every candidate left: their bounds are no less). Yields
    ``(priced,)`` for each derived, ``()`` where the engine refuses it. ``key``: the ranking's."""
    best: list[Priced] = []       # the top fitting so far, by ``key``
    heap = bounds.order()
    while heap:
        ranked, i = heap[0]
        bounds.least = ranked
        if len(best) >= top and beaten(ranked, best[-1]):
            return                        # so is every one left
        now = order(*bounds.bounds(i))
        if now > ranked or bounds.refine(i):
            heapq.heapreplace(heap, (order(*bounds.bounds(i)), i))
            continue
        heapq.heappop(heap)
        bounds.derived += 1
        p = price(bounds.space, bounds.cands[i], **bounds.options)
        if p is not None and p.fits:
            best = sorted(best + [p], key=key)[:top]
            bounds.kth = best[-1] if len(best) >= top else None
        yield () if p is None else (p,)
