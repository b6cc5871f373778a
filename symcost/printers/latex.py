"""A derivation as a LaTeX document (or a fragment) or as Markdown: the program with its collectives in
the book's notation, a table of steps, the totals, the roofline condition and its critical values, and
the assumptions (hardware figures with their sources, the overlap policy).

    >>> import symcost
    >>> tex = symcost.derive("A[I, J_X] * B[J_X, K] -> C[I, K]", mesh="X=4").to_latex(fragment=True)
    >>> "\\\\textbf{AllReduce}_{X}" in tex
    True
    >>> layout_tex(symcost.Layout.of("W_in", "DF", [("data", "model"), ()], unreduced={"X"}))
    '\\\\mathrm{W\\\\_in}[D_{\\\\mathrm{data},\\\\mathrm{model}}, F]\\\\{U_{X}\\\\}'

Tensors are rendered from their layouts (never by re-reading rendered text).
"""
from __future__ import annotations

import sympy as sp

from .. import symbols
from .text import fmt_bytes, fmt_count, fmt_seconds

#: how the hardware symbols read in LaTeX (SymPy would set W_hbm's "bm" in bold)
SYMBOL_TEX = {symbols.hw(n): t for n, t in (("C", "C"), ("W_hbm", r"W_{\mathrm{hbm}}"), ("W_ici", r"W_{\mathrm{ici}}"),
                                            ("W_dcn", r"W_{\mathrm{dcn}}"), ("W_nvlink", r"W_{\mathrm{nvlink}}"),
                                            ("W_pcie", r"W_{\mathrm{pcie}}"), ("T_min", r"T_{\min}"))}


def tex(expr) -> str:
    """A SymPy expression in LaTeX, hardware symbols in their upright names."""
    expr = sp.sympify(expr)
    names = {s: SYMBOL_TEX.get(s, None) for s in expr.free_symbols}
    return sp.latex(expr, symbol_names={k: v for k, v in names.items() if v})


def escape(text: str) -> str:
    return (text.replace("\\", r"\textbackslash{}").replace("_", r"\_").replace("{", r"\{")
            .replace("}", r"\}").replace("#", r"\#").replace("%", r"\%").replace("&", r"\&")
            .replace("^", r"\^{}").replace("~", r"\~{}").replace("$", r"\$"))


def axes_tex(axes) -> str:
    return "{" + ",".join(a if len(a) == 1 else r"\mathrm{" + escape(a) + "}" for a in axes) + "}"


def layout_tex(layout, mesh=None) -> str:
    """``In[B_X, D_Y]{U_Z}`` as math: ``\\mathrm{In}[B_{X}, D_{Y}]\\{U_{Z}\\}``."""
    out = r"\mathrm{" + escape(layout.name) + "}"
    if layout.dtype != "bf16":
        out += r"{:}\mathrm{" + layout.dtype + "}"
    out += "[" + ", ".join(d + ("_" + axes_tex(a) if a else "") for d, a in zip(layout.dims, layout.axes)) + "]"
    if layout.unreduced:
        order = mesh.order(layout.unreduced) if mesh is not None else sorted(layout.unreduced)
        out += r"\{U_" + axes_tex(order) + r"\}"
    return out


def step_tex(step) -> str:
    """A step: ``\\textbf{AllGather}_{X}\\, A[...] \\rightarrow A[...]`` or an einsum's product."""
    op, mesh = step.op, step.mesh
    if step.is_einsum:
        return r" \cdot ".join(layout_tex(t, mesh) for t in op.inputs) + r" \rightarrow " + layout_tex(op.output, mesh)
    if step.is_elementwise:
        name = op.kind + ("'" if op.grad else "")
        sub = "_{" + op.reduce + "}" if op.reduce else ""
        return (r"\mathrm{" + name + "}" + sub + "(" + ", ".join(layout_tex(t, mesh) for t in op.inputs)
                + r") \rightarrow " + layout_tex(op.output, mesh))
    shift = (op.distance,) if op.distance not in (0, 1) else ()
    sub = "_" + axes_tex(tuple(step.axes) + tuple(str(k) for k in shift)) if step.axes else ""
    return (r"\textbf{" + step.kind + "}" + sub + r"\," + layout_tex(op.before, mesh)
            + r" \rightarrow " + layout_tex(op.after, mesh))


def _num(plan, expr, unit):
    v = plan.evaluate(expr)
    if v is None:
        return ""
    return {"s": fmt_seconds, "B": fmt_bytes, "": fmt_count}[unit](v).replace("us", r"$\mu$s")


def _solve_section(plan) -> list[str]:
    from ..solve import compute_bound_when, solve_plan
    if "B" not in {s.name for s in plan.t_math.free_symbols}:
        return []
    out = [r"\subsection*{Roofline}",
           r"Throughput terms of the collectives: $T_{comms} = " + tex(plan.t_comms_bw) + "$.", r"\begin{itemize}"]
    for c in solve_plan(plan, "B"):
        num = "" if c["numeric"] is None else f" $\\approx {c['numeric']:.4g}$"
        lhs, rhs = (r"T_{\mathrm{" + x.strip()[2:] + "}}" for x in c["condition"].split("="))
        out.append(rf"\item ${lhs} = {rhs}$ at $B = " + tex(c["value"]) + "$" + num)
    cond = compute_bound_when(plan, "B")
    out.append(r"\item compute-bound when $" + tex(cond) + "$")
    out.append(r"\end{itemize}")
    return out


_FIELD_OF = {"C": "flops", "W_hbm": "hbm_bandwidth", "W_ici": "ici_bandwidth", "W_dcn": "dcn_bandwidth",
             "T_min": "t_min", "W_nvlink": "ici_one_way", "W_pcie": "pcie_bandwidth"}


def _assumptions(plan) -> list[str]:
    def axis(a):
        kind = a.kind + (f", {a.links} links" if a.links != 1 else "")
        if a.kind == "ici":
            kind += ", ring" if a.ring else ", no wraparound"
        return f"${escape(a.name)} = {a.size if a.size is not None else escape(a.name)}$ ({kind})"
    out = [r"\subsection*{Assumptions}", r"\begin{itemize}",
           r"\item Mesh: " + ", ".join(axis(a) for a in plan.mesh.axes),
           r"\item Overlap: " + {"program": "each step takes the longest of $T_{math}$, $T_{hbm}$ and $T_{comms}$; "
                                            "collectives on different mesh axes run concurrently",
                                 "step": "each einsum takes the longer of its $T_{math}$ and $T_{hbm}$; collectives "
                                         "run beside them, concurrently by mesh axis",
                                 "none": "every step's time adds up (no overlap)"}[plan.policy],
           r"\item Collectives: AllGather and ReduceScatter $V/W_{ici}$ per link on a bidirectional ring, "
           r"AllReduce $2V/W_{ici}$, AllToAll $V/(4W_{ici})$; latency $T_{min}$ per hop "
           r"(How to Scale Your Model, Part 3)."]
    for p in plan.padding:
        out.append(r"\item Padding: " + escape(str(p)))
    for n in plan.notes:
        out.append(r"\item Placement: " + escape(n))
    hw = plan.hardware
    if hw is not None:
        out += [r"\item Hardware " + escape(hw.name) + ": " + escape(hw.description), r"\begin{itemize}"]
        for sym, v in hw.bindings(plan.compute_dtype).items():
            if sym in _FIELD_OF:
                out.append(f"\\item ${tex(symbols.hw(sym))} = {v:.4g}$ -- {escape(hw.source(_FIELD_OF[sym]))}")
        out.append(r"\end{itemize}")
    out.append(r"\end{itemize}")
    return out


def plan_to_latex(plan, fragment: bool = False, math_only: bool = False) -> str:
    """The derivation of ``plan``; ``fragment`` drops the preamble; ``math_only`` gives one display
    (for notebooks)."""
    if math_only:
        display = r" \\ ".join(step_tex(s) for s in plan.steps) or r"\text{no communication}"
        return r"$$\begin{array}{l}" + display + r" \\ T_{step} = " + tex(plan.t_step) + r"\end{array}$$"
    body = [r"\section*{Derivation}", r"\texttt{" + escape(plan.expression).replace("\n", r"\\") + "}"]
    for phase in ("forward", "backward"):
        steps = [s for s in plan.steps if s.phase == phase]
        if not steps:
            continue
        body += [r"\subsection*{" + phase.capitalize() + " pass}", r"\begin{align*}",
                 r" \\ ".join(f"&({i})\\quad {step_tex(s)}" for i, s in enumerate(steps, 1)),
                 r"\end{align*}", r"\begin{center}\small", r"\begin{tabular}{rllll}", r"\toprule",
                 r"& step & bytes & FLOPs & time \\ \midrule"]
        for i, s in enumerate(steps, 1):
            label = s.kind if s.is_einsum else s.label
            t = _num(plan, s.seconds, "s")
            seconds = t or "$" + tex(s.seconds) + "$"
            body.append(f"{i} & {escape(label)} & ${tex(s.bytes)}$ & ${tex(s.flops)}$ & {seconds} \\\\")
        body += [r"\bottomrule", r"\end{tabular}", r"\end{center}"]
    body += [r"\subsection*{Totals}", r"\begin{align*}"]
    rows = []
    for k, label, unit in (("flops", r"\mathrm{FLOPs}", ""), ("t_math", r"T_{math}", "s"), ("t_hbm", r"T_{hbm}", "s"),
                           ("t_comms", r"T_{comms}", "s"), ("t_step", r"T_{step}", "s")):
        v = _num(plan, getattr(plan, k), unit)
        rows.append(f"{label} &= {tex(getattr(plan, k))}" + (rf" && \text{{{v}}}" if v else ""))
    body += [r" \\ ".join(rows), r"\end{align*}"]
    body += _solve_section(plan) + _assumptions(plan)
    text = "\n".join(body)
    if fragment:
        return text
    return ("\\documentclass[10pt]{article}\n\\usepackage{amsmath,amssymb,booktabs}\n"
            "\\usepackage[margin=1.8cm,landscape]{geometry}\n\\allowdisplaybreaks\n"
            "\\begin{document}\n" + text + "\n\\end{document}\n")


def plan_to_markdown(plan) -> str:
    """The derivation as Markdown (for READMEs and issues)."""
    lines = [f"**Derivation** of `{plan.expression}` on mesh `{plan.mesh}`"
             + (f", {plan.hardware.name}" if plan.hardware else ""), "",
             "| # | phase | step | bytes | FLOPs | time |", "|---|---|---|---|---|---|"]
    for i, s in enumerate(plan.steps, 1):
        t = plan.evaluate(s.seconds)
        lines.append(f"| {i} | {s.phase} | `{s.signature()}` | `{s.bytes}` | `{s.flops}` | "
                     + (fmt_seconds(t) if t is not None else f"`{s.seconds}`") + " |")
    num = plan.numeric()
    totals = ("flops", "t_math", "t_hbm", "t_comms", "t_step")
    if not num:             # nothing evaluates: no column of blanks, but what would give the values
        unbound = sorted(s.name for s in plan.t_step.xreplace(plan.bindings()).free_symbols)
        return "\n".join(lines + ["", "| total | expression |", "|---|---|"]
                         + [f"| {k} | `{getattr(plan, k)}` |" for k in totals]
                         + ["", f"No values: {', '.join(unbound)} unbound (bind the sizes and the hardware: "
                                f"--dims and --hw, or dims= and hw=)."])
    lines += ["", "| total | expression | value |", "|---|---|---|"]
    for k in totals:
        v = num.get(k)
        shown = "" if v is None else (f"{v:.4g}" if k == "flops" else fmt_seconds(v))
        lines.append(f"| {k} | `{getattr(plan, k)}` | {shown} |")
    return "\n".join(lines)
