"""Measured against predicted over a sweep (``symcost measure ... --plot out.png --vs B``): the two times
by the swept size on log-log axes, the measured spread as error bars, and their ratio below.
matplotlib is the ``plot`` extra.
"""
from __future__ import annotations

from ..printers.figure import check_name, pyplot, save


def plot_sweep(rows, vs: str, title: str, out: str) -> str:
    """``rows``: dicts with ``value``, ``measured`` (seconds), ``spread`` and ``predicted`` (seconds)."""
    check_name(out)
    plt = pyplot()
    xs = [r["value"] for r in rows]
    meas = [r["measured"] for r in rows]
    pred = [r["predicted"] for r in rows]
    err = [r["measured"] * r["spread"] / 2 for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    top.errorbar(xs, meas, yerr=err, marker="o", capsize=3, label="measured (median; bars: interquartile range)")
    top.plot(xs, pred, marker="s", linestyle="--", label="predicted by symcost")
    top.set_xscale("log", base=2)
    top.set_yscale("log")
    top.set_ylabel("seconds")
    top.set_title(title, fontsize=9)
    top.grid(True, which="both", alpha=0.3)
    top.legend(fontsize=8)
    bottom.plot(xs, [m / p for m, p in zip(meas, pred)], marker="o", color="C2")
    bottom.axhline(1.0, color="grey", linewidth=0.8)
    bottom.set_xlabel(vs)
    bottom.set_ylabel("measured / predicted")
    bottom.grid(True, alpha=0.3)
    return save(fig, out)
