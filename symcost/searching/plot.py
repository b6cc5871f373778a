"""The regimes drawn (matplotlib, the ``plot`` extra): step time against the swept symbol, one line per
candidate that is best somewhere, the envelope in black, each boundary a dotted line.

    symcost search examples/mlp.sc --backward --mesh X=16,Y=16,Z=16 --hw tpu-v5p \\
        --dims B=1048576,D=8192,F=32768 --vs B --plot regimes.png
"""
from __future__ import annotations

from ..errors import UsageError
from ..printers.figure import check_name, pyplot, save
from .price import curve


def plot_regimes(result, out: str, points: int = 200) -> str:
    """Write the figure of ``result`` (a search with ``vs``) to ``out`` (.png, .svg or .pdf)."""
    if not result.vs:
        raise UsageError("the regimes plot needs a search with --vs")
    check_name(out)
    plt = pyplot()
    import numpy as np
    lo, hi = result.range
    xs = np.geomspace(lo, hi, points)
    fig, ax = plt.subplots(figsize=(8, 5))
    shown = []
    for r in result.regimes:
        if r.best not in shown:
            shown.append(r.best)
    env = np.full_like(xs, np.inf)
    for i in shown:
        p = result.ranked[i]
        ys = curve(p.plan.t_step, p.plan.bindings(), result.vs, xs)
        env = np.minimum(env, ys)
        ax.plot(xs, ys, lw=1.5, label=f"#{i + 1} {p.description}")
    for r in result.regimes:
        if r.end is not None:
            ax.axvline(r.end.value, color="grey", ls=":", lw=1)
    ax.plot(xs, env, color="black", lw=0.8, ls="--", label="best (envelope)")
    best = result.ranked[0].plan
    ax.plot(xs, curve(best.t_math, best.bindings(), result.vs, xs), color="grey", lw=0.8, ls="-.",
            label="T_math on every chip (compute-bound floor)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(result.vs)
    ax.set_ylabel("step time (s)")
    ax.set_title(f"best sharding by {result.vs} on {result.space.mesh}")
    ax.legend(fontsize=8)
    return save(fig, out)
