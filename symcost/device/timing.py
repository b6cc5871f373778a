"""Timing a compiled function properly: warm-up, block until ready, median of N, spread reported.

:func:`time_call` takes a zero-argument ``call`` that launches the work once and returns something to
wait on, and a ``block`` that waits on it (``jax.block_until_ready``). Launches are asynchronous on
accelerators, so a single short call would mostly time the dispatch: each of the ``runs`` timed runs
launches the call ``inner`` times back to back and waits once, with ``inner`` chosen in the warm-up so that
a run lasts at least ``min_run`` seconds. A sample is the run's time over ``inner``.

    >>> import itertools, time
    >>> t = time_call(lambda: time.sleep(0.002), runs=5, warmup=1, min_run=0)
    >>> t.runs, t.inner, 0.002 <= t.median < 0.02
    (5, 1, True)

``spread`` is the interquartile range of the samples over their median (0.05: the middle half of the
runs lie within 5 % of one another).
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """Seconds per call: the median of ``runs`` samples, each the mean of ``inner`` back-to-back calls."""

    median: float
    runs: int
    spread: float
    inner: int
    samples: tuple[float, ...]

    @property
    def best(self) -> float:
        return min(self.samples)

    def as_dict(self) -> dict:
        return {"seconds": self.median, "runs": self.runs, "spread": self.spread, "inner": self.inner,
                "min": self.best, "max": max(self.samples)}

    def describe(self) -> str:
        inner = f" x {self.inner} calls" if self.inner > 1 else ""
        return f"median of {self.runs}{inner}, spread {self.spread:.1%}"


def spread(samples) -> float:
    """Interquartile range over the median (0 for fewer than two samples)."""
    s = sorted(samples)
    if len(s) < 2:
        return 0.0
    q = statistics.quantiles(s, n=4, method="inclusive")
    med = statistics.median(s)
    return (q[2] - q[0]) / med if med > 0 else 0.0


def _noop(_):
    return None


def time_call(call, *, block=_noop, runs: int = 10, warmup: int = 2, min_run: float = 1e-3,
              max_inner: int = 1000) -> Timing:
    """Time ``call()`` (see the module docstring). ``block(result)`` waits for the launched work."""
    if runs < 1:
        raise ValueError("runs must be at least 1")
    t0 = time.perf_counter()
    for _ in range(max(1, warmup)):
        block(call())
    first = (time.perf_counter() - t0) / max(1, warmup)
    inner = 1 if first <= 0 else max(1, min(max_inner, math.ceil(min_run / first)))
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        out = None
        for _ in range(inner):
            out = call()
        block(out)
        samples.append((time.perf_counter() - t) / inner)
    return Timing(statistics.median(samples), runs, spread(samples), inner, tuple(samples))
