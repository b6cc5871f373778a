"""A collective's time as a line: ``seconds = latency + bytes / bandwidth``, fitted to measured points.

The points run from latency-bound (a few kB) to bandwidth-bound (many MB), so their times span orders of
magnitude; an ordinary least-squares fit would be decided by the largest points alone. The fit minimises
the *relative* error of each point instead (weighted least squares, weights 1 / t), keeps the latency
non-negative, and reports as its residual the largest relative error of any point: the fitted line
reproduces every measured point within that fraction.

    >>> f = fit_line([1e3, 1e5, 1e7], [10.1e-6, 20e-6, 1.01e-3])     # 10 us + bytes / 10 GB/s
    >>> round(f.latency * 1e6, 2), round(f.bandwidth / 1e9, 2), f.residual < 1e-9
    (10.0, 10.0, True)
    >>> round(f.seconds(1e6) * 1e6, 1)
    110.0
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import UsageError


@dataclass(frozen=True)
class LineFit:
    """``seconds(bytes) = latency + bytes / bandwidth``; ``residual``: the largest relative error of the
    fitted line at any of the points it was fitted to; ``rms``: their root mean square."""

    latency: float
    bandwidth: float
    residual: float
    rms: float
    points: tuple[tuple[float, float], ...]

    def seconds(self, nbytes: float) -> float:
        return self.latency + nbytes / self.bandwidth

    def errors(self) -> list[float]:
        """The relative error of the line at each point: (fitted - measured) / measured."""
        return [(self.seconds(b) - t) / t for b, t in self.points]


def _solve(xs, ts, with_latency: bool) -> tuple[float, float]:
    """Weighted least squares of t = a + b x with weights 1 / t (a = 0 when not ``with_latency``)."""
    import numpy as np   # only when fitting
    w = 1.0 / np.asarray(ts)
    x = np.asarray(xs, dtype=float)
    cols = [w, w * x] if with_latency else [w * x]
    (coef, *_) = np.linalg.lstsq(np.stack(cols, axis=1), np.ones_like(w), rcond=None)
    return (float(coef[0]), float(coef[1])) if with_latency else (0.0, float(coef[0]))


def fit_line(nbytes, seconds) -> LineFit:
    """Fit ``latency + bytes / bandwidth`` to measured ``(bytes, seconds)`` points (two or more, bytes
    not all equal). A negative latency is clamped to zero and the slope refitted."""
    pts = [(float(b), float(t)) for b, t in zip(nbytes, seconds)]
    if len(pts) < 2 or len({b for b, _ in pts}) < 2:
        raise UsageError("a line needs measured times at two or more sizes")
    if any(not (math.isfinite(t) and t > 0) or b < 0 for b, t in pts):
        raise UsageError("measured times must be positive and sizes non-negative")
    xs, ts = [b for b, _ in pts], [t for _, t in pts]
    lat, slope = _solve(xs, ts, True)
    if lat < 0 or slope <= 0:
        lat, slope = (0.0, _solve(xs, ts, False)[1]) if lat < 0 else (lat, slope)
    if slope <= 0:   # the times do not grow with the size: all latency
        lat, slope = min(ts), 1e-30
    errs = [(lat + b * slope - t) / t for b, t in pts]
    return LineFit(lat, 1.0 / slope, max(abs(e) for e in errs), math.sqrt(sum(e * e for e in errs) / len(errs)),
                   tuple(pts))
