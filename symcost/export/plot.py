"""Plots (matplotlib, the ``plot`` extra): strategies' communication against compute by batch size (the
book's Part 5 figure), one plan's times over a size, the arithmetic-intensity roofline of a program's
einsums, and the latency-throughput frontier of a served model (Part 8).

    symcost plot derivations/ --vs B --hw tpu-v5p --chips 4096 -o strategies.png
    symcost plot derivations/fsdp.sc --vs B --mesh X=256 --hw tpu-v5p -o fsdp_plan.png
    symcost plot "In[B_X, D] *_D Win[D_X, F] *_F Wout[F, D_X] -> Out[B_X, D]" --vs B --dims D=8192,F=32768 \\
        --hw tpu-v5p -o fsdp.png
"""
from __future__ import annotations

import math
import os

import numpy as np

from ..errors import UsageError
from ..numeric import math_function
from ..printers.figure import pyplot, save


def strategy_programs(target: str) -> list[tuple[str, str]]:
    """(name, text) of the programs to compare: every ``.sc`` file of a folder, a file, or an expression."""
    if os.path.isdir(target):
        paths = sorted(os.path.join(target, f) for f in os.listdir(target) if f.endswith(".sc"))
    elif "[" not in target and os.path.exists(target):
        paths = [target]
    else:
        return [("program", target)]
    return [(os.path.splitext(os.path.basename(p))[0], open(p, encoding="utf-8").read()) for p in paths]


def strategy_curves(programs, vs: str, hw, chips: int, points: int = 40, lo: float = 1e4, hi: float = 1e8,
                    dims=None, skipped: dict | None = None):
    """For each program (a path, or a (name, text) pair): T_comms and T_math (forward + backward, per
    layer, per chip) against ``vs``, each derived on ``chips`` chips of ``hw`` as ``derive`` places them
    (a full pod keeps its torus links). Programs over two axes take, at each point, the best integer
    split of the chips (as ``optimize`` chooses it). Programs that cannot be drawn go into ``skipped``."""
    from ..binding import parse_dims
    from ..errors import SymcostError
    from ..program import derive_program
    from .. import symbols
    skipped = {} if skipped is None else skipped
    xs = [lo * (hi / lo) ** (i / (points - 1)) for i in range(points)]
    given = {k: v for k, v in parse_dims(dims).items() if k != vs}
    sym_vs = symbols.dim(vs)
    curves = {}
    for item in programs:
        name, text = item if isinstance(item, tuple) else \
            (os.path.splitext(os.path.basename(item))[0], open(item, encoding="utf-8").read())
        try:
            probe = derive_program(text, backward=True, moves="strategy", alternatives=False)
        except UsageError as e:      # no parameters: nothing to train
            skipped[name] = f"drawn as a training strategy (forward and backward): {e}"
            continue
        axes = [a.name for a in probe.mesh.axes]
        if not axes:
            skipped[name] = "it shards nothing (no mesh axis to spread the chips over)"
            continue
        if len(axes) > 2 or any(a.kind != "ici" for a in probe.mesh.axes):
            skipped[name] = "it runs over more than two axes, or over DCN"
            continue
        sizes = {k: v for k, v in {**probe_ranking(text), **given}.items() if k != vs}
        if vs in axes:      # the x axis is a mesh axis: its size, the chips left to the other axis
            try:
                curves[name] = axis_curve(text, vs, axes, hw, chips, sizes)
            except UsageError as e:
                skipped[name] = str(e)
            continue
        splits = [{axes[0]: chips}] if len(axes) == 1 else \
            [{axes[0]: d, axes[1]: chips // d} for d in range(1, chips + 1) if chips % d == 0]
        per_split, why = [], None
        for split in splits:
            try:
                plan = derive_program(text, mesh=",".join(f"{a}={n}" for a, n in split.items()), hw=hw,
                                      dims=sizes, backward=True, moves="strategy", alternatives=False)
            except SymcostError as e:   # a split the hardware cannot hold
                why = str(e)
                continue
            comms, math_ = (e.xreplace(plan.bindings()) for e in (plan.t_comms_bw, plan.t_math))
            free = (comms.free_symbols | math_.free_symbols) - {sym_vs}
            if free:
                why = "unbound sizes " + ", ".join(sorted(str(f) for f in free)) + " (--dims or a rank statement)"
                break
            per_split.append((math_function(comms, (sym_vs,)), math_function(math_, (sym_vs,)),
                              sym_vs in math_.free_symbols))
        if not per_split or why and why.startswith("unbound"):
            skipped[name] = why or "no split of the chips fits the hardware"
            continue
        if not per_split[0][2]:
            skipped[name] = f"its compute does not depend on {vs}"
            continue
        t_c = [min(float(c(x)) for c, _, _ in per_split) for x in xs]
        t_m = [float(per_split[0][1](x)) for x in xs]
        curves[name] = (xs, t_c, t_m)
    if curves:  # one compute line: the programs that share the most common compute curve
        key = {n: tuple(round(v, 15) for v in c[2]) for n, c in curves.items()}
        common = max(set(key.values()), key=lambda k: sum(1 for v in key.values() if v == k))
        for n in [n for n, k in key.items() if k != common]:
            skipped[n] = "its compute differs from the other programs' (the figure has one compute line)"
            del curves[n]
    if not curves:
        raise UsageError("nothing to plot: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    return curves


def axis_curve(text: str, vs: str, axes: list, hw, chips: int, sizes: dict) -> tuple[list, list, list]:
    """T_comms and T_math against the size of the mesh axis ``vs`` (powers of two up to ``chips``; a second
    axis takes the chips left): the plan is derived once with the axes symbolic, so the matmul time's
    1/Y (T_math = 4BDF / (C Y) for tensor parallelism) is the derivation's, not a fixed point's."""
    from ..program import derive_program
    from .. import symbols
    plan = derive_program(text, mesh=",".join(axes), hw=hw, dims=sizes, backward=True, moves="strategy",
                          alternatives=False)     # its totals alone are drawn
    x = symbols.axis(vs)
    rest = {symbols.axis(a): chips / x for a in axes if a != vs}
    comms, math_ = (e.xreplace(plan.bindings()).xreplace(rest) for e in (plan.t_comms_bw, plan.t_math))
    free = (comms.free_symbols | math_.free_symbols) - {x}
    if free:
        raise UsageError("unbound sizes " + ", ".join(sorted(str(f) for f in free)) + " (--dims or a rank statement)")
    xs = [2 ** i for i in range(int(math.log2(chips)) + 1)]
    c, m = math_function(comms, (x,)), math_function(math_, (x,))
    return xs, [float(c(v)) for v in xs], [float(m(v)) for v in xs]


def probe_ranking(text: str) -> dict:
    from ..notation import parse
    return parse(text).ranking


AXIS_LABELS = {"B": "B (tokens in the batch)", "D": "D (model width)", "F": "F (MLP width)",
               "S": "S (sequence length)", "T": "T (tokens)"}


def plot_strategies(programs, out: str, vs: str = "B", hw=None, chips: int = 4096, dims=None) -> tuple[str, dict]:
    """The book's Part 5 figure: each program's communication against the matmul time. Returns the file
    written and the programs left out, with why."""
    plt = pyplot()
    if hw is None:
        raise UsageError("plotting strategies needs --hw")
    skipped: dict = {}
    curves = strategy_curves(programs, vs, hw, chips, dims=dims, skipped=skipped)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    math_line = None
    for name, (xs, t_c, t_m) in sorted(curves.items()):
        ax.loglog(xs, t_c, label=f"{name}: communication")
        math_line = (xs, t_m)
    ax.loglog(*math_line, "k--", label="compute (matmul FLOPs)")
    ax.set_xlabel(AXIS_LABELS.get(vs, vs))
    ax.set_ylabel("time per layer, forward + backward (s)")
    ax.set_title(f"Communication vs compute on {chips} x {hw.name}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, out), skipped


def plot_roofline(plan, out: str):
    """Each einsum's arithmetic intensity (FLOPs per byte) against the chip's roofline."""
    plt = pyplot()
    hw = plan.hardware
    if hw is None:
        raise UsageError("a roofline needs --hw")
    pts = []
    for s in plan.steps:
        if not s.is_einsum:
            continue
        f, b = plan.evaluate(s.flops), plan.evaluate(s.bytes)
        if f is None or b is None or b == 0:
            raise UsageError("bind every dimension (--dims) to plot a roofline")
        pts.append((f / b, min(hw.flops_for(plan.compute_dtype), f / b * hw.hbm_bandwidth), s.after))
    C, W = hw.flops_for(plan.compute_dtype), hw.hbm_bandwidth
    xs = [10 ** (i / 20) for i in range(-20, 101)]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.loglog(xs, [min(C, x * W) for x in xs], "k-", label=f"{hw.name} roofline")
    ax.axvline(C / W, color="gray", ls=":", label=f"critical intensity {C / W:.0f} FLOPs/byte")
    for x, y, label in pts:
        ax.loglog([x], [y], "o", label=label if len(label) < 40 else label[:37] + "...")
    ax.set_xlabel("arithmetic intensity (FLOPs / byte)")
    ax.set_ylabel("attainable FLOPs/s per chip")
    ax.set_title("Roofline of the program's einsums")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, out)


def plan_curves(plan, vs: str, points: int = 61):
    """``(xs, totals over xs, the size the plan was derived at or None)``: the plan's closed forms (its
    steps as derived, not a plan re-derived at each point) at sizes of ``vs`` three decades either side of
    the one it was derived at (1 to 1e8 where ``vs`` is unbound), every other size at its number."""
    names = {s.name for s in plan.t_step.free_symbols}
    if vs not in names:
        raise UsageError(f"{vs} does not appear in this plan's costs (they depend on "
                         f"{', '.join(sorted(names - {str(k) for k in plan.bindings()})) or 'no unbound size'})")
    at = dict(plan.sizes).get(vs)
    at = None if at is None else float(at)
    lo, hi = (max(1.0, at / 1e3), at * 1e3) if at is not None else (1.0, 1e8)
    xs = np.geomspace(lo, hi, points)
    t = plan.curves(vs, xs)
    if t is None:
        unbound = sorted(n for n in names - {str(k) for k in plan.bindings()} if n != vs)
        raise UsageError(f"bind {', '.join(unbound)} (--dims, or --hw for the chip's figures) to plot over {vs}")
    return xs, t, at


def crossings(xs, a, b) -> list[float]:
    """Where the curve ``a`` overtakes ``b`` or falls below it (between two points, interpolated on the
    log-log scale the figure draws)."""
    out = []
    for i in range(1, len(xs)):
        d0, d1 = a[i - 1] - b[i - 1], a[i] - b[i]
        if d0 == 0 or d0 * d1 >= 0 or min(a[i - 1], a[i], b[i - 1], b[i]) <= 0:
            continue
        l0, l1 = math.log(a[i - 1] / b[i - 1]), math.log(a[i] / b[i])
        f = l0 / (l0 - l1)
        out.append(math.exp(math.log(xs[i - 1]) + f * (math.log(xs[i]) - math.log(xs[i - 1]))))
    return out


def plot_plan(plan, vs: str, out: str) -> tuple[str, list[float]]:
    """One plan's T_math, T_hbm, T_comms and step time over ``vs`` (:func:`plan_curves`). Returns the file
    written and where T_comms and T_math cross."""
    plt = pyplot()
    xs, t, at = plan_curves(plan, vs)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for label, ys, style in (("T_math (compute)", t.t_math, "k--"), ("T_hbm (memory)", t.t_hbm, ":"),
                             ("T_comms (communication)", t.t_comms, "-"), ("step time", t.t_step, "-")):
        if float(np.max(ys)) > 0:
            ax.loglog(xs, ys, style, label=label, lw=2.5 if label == "step time" else 1.5,
                      alpha=0.45 if label == "step time" else 1.0)
    cross = crossings(xs, t.t_comms, t.t_math)
    for x in cross:
        ax.axvline(x, color="gray", ls=":", lw=1)
    if at is not None:
        ax.axvline(at, color="C3", ls="-.", lw=1, label=f"derived at {vs}={at:g}")
    ax.set_xlabel(AXIS_LABELS.get(vs, vs))
    ax.set_ylabel("time (s)")
    where = f" on {plan.hardware.name}" if plan.hardware is not None else ""
    mesh = ",".join(f"{a.name}={a.size}" for a in plan.mesh.axes)
    ax.set_title(f"The plan on {mesh or 'one device'}{where}, over {vs}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, out), cross


def plot_frontier(serving, seq: int, out: str):
    """Latency against throughput per chip, one point per batch size (book Part 8's Pareto plot)."""
    plt = pyplot()
    rows = [r for r in serving.frontier(seq) if r.fits]
    if not rows:
        from ..errors import DoesNotFit
        from ..printers.text import fmt_bytes
        raise DoesNotFit(f"{serving.cfg.name} does not fit on {serving.chips} x {serving.hw.name} at any batch: "
                         f"its weights alone take {fmt_bytes(serving.param_bytes)} of "
                         f"{fmt_bytes(serving.hbm_total)}; use more chips (--chips) or a smaller --dtype")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot([r.tokens_per_s_per_chip for r in rows], [r.step_time * 1e3 for r in rows], "o-",
            label=f"{serving.cfg.name}, {serving.dtype}, {serving.chips} x {serving.hw.name}")
    for r in rows:
        ax.annotate(str(r.batch), (r.tokens_per_s_per_chip, r.step_time * 1e3), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("throughput (tokens/s per chip)")
    ax.set_ylabel("decode step (ms)")
    ax.set_title(f"Latency vs throughput at {seq} tokens of context (labels: batch)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, out)


__all__ = ["plot_strategies", "plot_plan", "plan_curves", "plot_roofline", "plot_frontier", "strategy_curves",
           "strategy_programs"]
