"""The one protocol of symcost's searches: space -> price -> filter -> rank.

The program search (:func:`symcost.searching.search`: the shardings of a program), the run search
(:func:`symcost.models.runs.search_runs`: how to launch a training run) and the serving search
(:func:`symcost.models.serving_search.search_serving`: a mesh and a batch to serve on) each describe their
four stages as :class:`Stages`; :func:`run` drives them the same way:

- before anything is priced, the person waiting is told how much there is to price (:meth:`Stages.count`);
- a bar (:mod:`symcost.progress`) advances as each item of the space is priced, and after the first
  :data:`SAMPLE` items (or :data:`SAMPLE_SECONDS`) a line says how long the rest will take (:class:`Pace`,
  which the searches' other long stages use too);
- Ctrl-C stops the pricing: what was priced until then is filtered and ranked, and :attr:`Found.complete`
  is False (each search's result carries it as ``complete``; the command line prints the best so far and
  exits 130);
- every value priced is kept (a search may read those its filter dropped: what the least state a chip
  holds is when no run fits), the ones that pass the filter ranked by the search's own order.

Each search's result is a frozen value with ``as_dict()`` (its ``--json``, checked against
``symcost/schemas/``) that carries the counts and ``complete``.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Squares:
    ...     name, unit = "squares search", "numbers"
    ...     def items(self): return list(range(10))
    ...     def count(self, n): return f"{n} numbers to square"
    ...     def price(self, items): return ((x * x,) for x in items)
    ...     def passes(self, p): return p % 2 == 0
    ...     def rank(self, kept): return sorted(kept, reverse=True)
    ...     def label(self, item): return ""
    >>> found = run(Squares())
    >>> found.ranked, found.done, found.size, found.complete
    ((64, 36, 16, 4, 0), 10, 10, True)
"""
from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generator, Iterable, Protocol, Sequence

from . import caching, progress

#: items priced (or seconds spent) after the first before a search says how long the rest will take
SAMPLE, SAMPLE_SECONDS = 50, 5.0


class Pace:
    """How long the rest of a long stage will take, said once (:func:`symcost.progress.say`): ``pace()`` as
    each item comes back; after :data:`SAMPLE` items since the first (or :data:`SAMPLE_SECONDS` since it, two
    items at least), the items left of ``total`` at the rate they came since the first. The wait for the first is
    left out: worker processes starting, the first item's cold caches, which the rest do not pay again (the
    LLaMA 3 70B layer's search on 64 v5p chips planned 4,856 pieces ahead on two processes in 17 s, where
    the rate of its first 50 counted from the start said 103 s). A stage of ``total`` items at most
    :data:`SAMPLE` + 1 says nothing. ``what``: said after "more" (" for them")."""

    def __init__(self, name: str, unit: str, total: int, what: str = ""):
        self.name, self.unit, self.total, self.what = name, unit, total, what
        self.done, self.first, self.said = 0, 0.0, total <= SAMPLE + 1

    def __call__(self) -> None:
        self.done += 1
        if self.said:
            return
        now = time.perf_counter()
        if self.done == 1:
            self.first = now
            return
        spent, since = now - self.first, self.done - 1
        if since >= SAMPLE or spent >= SAMPLE_SECONDS:
            self.said = True
            rate = since / max(spent, 1e-9)
            shown = f"{rate:,.0f}" if rate >= 10 else f"{rate:.2g}"      # a slow stage's rate with two digits
            progress.say(f"{self.name}: about {duration(max(self.total - self.done, 0) / rate)} more{self.what} at "
                         f"{shown} {self.unit} a second (the first {self.done:,})")


class Stages(Protocol):
    """A search's four stages, and how it speaks of its space (``name`` starts its lines: ``search``,
    ``run search``, ``serving search``; ``unit`` is what an item of its space is, in the plural). A search
    whose pricing stops once its best are proven (a bounded program search) sets ``estimate = False``: how
    many items it prices depends on what they price to, so no estimate of the rest is said."""

    name: str
    unit: str

    def items(self) -> Sequence:
        """The space: every item to price, in order (every question about the request answered before)."""

    def count(self, n: int) -> str:
        """The line that says how much there is to price, before anything is."""

    def price(self, items: Sequence) -> Iterable[tuple]:
        """For each item, in order, the values it prices to (none where the engine refuses it; several where
        an item is priced at several points, as a mesh at every batch). May be a generator: the driver
        stops reading it on Ctrl-C."""

    def passes(self, priced: Any) -> bool:
        """The filter (it fits in HBM, it meets the latency target)."""

    def rank(self, kept: list) -> list:
        """The values that pass, best first."""

    def label(self, item: Any) -> str:
        """What the bar shows after itself while ``item`` is priced ("" for nothing)."""


@dataclass(frozen=True)
class Found:
    """What :func:`run` found: the space's ``items``, ``done`` of them priced (all unless stopped), every
    value priced (``priced``, in the space's order), those that passed the filter ranked (``ranked``; then,
    when asked, those that did not, ranked after them), how many passed, and the seconds it all took (the
    space made, priced, filtered and ranked)."""

    items: tuple
    done: int
    priced: tuple
    ranked: tuple
    passed: int
    complete: bool
    seconds: float

    @property
    def size(self) -> int:
        return len(self.items)

    @property
    def stopped(self) -> str | None:
        """The line that says the search was stopped, or None when it ran to the end."""
        return None if self.complete else f"stopped (Ctrl-C) after {self.done:,} of {self.size:,}: the best so far"


@caching.collector_paused()
def run(stages: Stages, *, keep_failed: bool = False) -> Found:
    """The search ``stages`` describe, driven: its space, each item priced (the count first, a bar, an
    estimate; Ctrl-C keeps what was priced), filtered and ranked. ``keep_failed``: the values that fail the
    filter are ranked after those that pass (a program search shows why nothing fits), not dropped."""
    start = time.perf_counter()
    items = stages.items()
    values, done, complete = _priced_until_stopped(stages, items)
    kept = [p for p in values if stages.passes(p)]
    ranked = stages.rank(kept)
    if keep_failed:
        ranked = ranked + stages.rank([p for p in values if not stages.passes(p)])
    return Found(tuple(items), done, tuple(values), tuple(ranked), len(kept), complete, time.perf_counter() - start)


def priced(stages: Stages, items: Sequence) -> Generator[tuple, None, None]:
    """Each item's priced values, in order, the bar advanced as each is done (a bar without an end where the
    search stops once its best are proven: how many it prices is not known before)."""
    n = len(items) if getattr(stages, "estimate", True) else None
    values = stages.price(items)
    try:
        for item, got in zip(items, values):
            progress.advance(1, f"pricing {stages.unit}", total=n, unit=f" {stages.unit}", label=stages.label(item))
            yield got
    finally:                # stopped early (Ctrl-C, an error): the pricing's workers stop now, not when collected
        close = getattr(values, "close", None)
        if close is not None:
            close()


def _priced_until_stopped(stages: Stages, items: Sequence) -> tuple[list, int, bool]:
    """The values priced, how many items gave them, and whether every item was priced."""
    n = len(items)
    progress.say(f"{stages.name}: {stages.count(n)}")
    out: list = []
    done, pace = 0, Pace(stages.name, stages.unit, n if getattr(stages, "estimate", True) else 0)
    values = priced(stages, items)
    try:
        with _ctrl_c() as stop:
            for got in values:
                out.extend(got)
                done += 1
                if stop.asked:        # Ctrl-C whose KeyboardInterrupt a finalizer dropped (see _ctrl_c)
                    raise KeyboardInterrupt
                pace()
    except KeyboardInterrupt:
        return out, done, False
    finally:
        values.close()
    return out, done, True


class _Stop:
    asked = False


@contextmanager
def _ctrl_c():
    """While the pricing runs, Ctrl-C raises KeyboardInterrupt as Python's own handler does and is also
    recorded (``.asked``), so that the pricing stops at the next item even where the KeyboardInterrupt was
    lost. Python runs a signal's handler between any two instructions of the main thread, finalizers
    included, and an exception a finalizer raises is printed and dropped: a Ctrl-C that lands while a
    generator expression left unfinished by ``next()`` or ``any()`` is freed (the engine frees thousands a
    candidate), or in a ``__del__``, never reaches the search. Off the main thread, or where the program
    installed a handler of its own, Python's handling is left as it is."""
    stop = _Stop()
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield stop
        return

    def handler(signum, frame):
        stop.asked = True
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, handler)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def duration(seconds: float) -> str:
    """A wait in the unit a person reads it in: seconds, minutes, hours."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


__all__ = ["Found", "Pace", "SAMPLE", "SAMPLE_SECONDS", "Stages", "duration", "priced", "run"]
