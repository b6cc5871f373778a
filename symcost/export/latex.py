"""A derivation as a LaTeX document (or a fragment): the program with its collectives in the book's
notation, a table of steps, the totals, the roofline condition and its critical values, and the
assumptions (hardware figures with their sources, the overlap policy).

    >>> import symcost
    >>> tex = symcost.derive("A[I, J_X] * B[J_X, K] -> C[I, K]", mesh="X=4").to_latex(fragment=True)
    >>> "\\\\textbf{AllReduce}_{X}" in tex
    True
"""
from __future__ import annotations

import re

import sympy as sp

from ..notation import format_axes


def _escape(text: str) -> str:
    return (text.replace("\\", r"\textbackslash{}").replace("_", r"\_").replace("{", r"\{")
            .replace("}", r"\}").replace("#", r"\#").replace("%", r"\%").replace("&", r"\&")
            .replace("^", r"\^{}").replace("~", r"\~{}").replace("$", r"\$"))


def _axes_tex(axes: str) -> str:
    if axes.startswith("{"):
        return "{" + axes[1:-1].replace(",", ",") + "}"
    return "{" + axes + "}"


def notation_tex(s: str) -> str:
    """``In[B_X, D_Y]{U_Z}`` -> ``\\mathrm{In}[B_{X}, D_{Y}]\\{U_{Z}\\}`` (math mode)."""
    def tensor(m):
        name, dtype, body, unred = m.group(1), m.group(2), m.group(3), m.group(4)
        dims = []
        for d in [x.strip() for x in body.split(",")] if body.strip() else []:
            base, _, ax = d.partition("_")
            dims.append(base + ("_" + _axes_tex(ax) if ax else ""))
        out = r"\mathrm{" + name.replace("_", r"\_") + "}"
        if dtype:
            out += r"{:}\mathrm{" + dtype + "}"
        out += "[" + ", ".join(dims) + "]"
        if unred:
            out += r"\{U_" + _axes_tex(unred) + r"\}"
        return out

    s = re.sub(r"([A-Za-z_][A-Za-z0-9_]*)(?::([a-z0-9]+))?\[([^\]]*)\](?:\{U_(\{[^}]*\}|[A-Za-z]+)\})?",
               tensor, s)
    return s.replace("->", r"\rightarrow").replace(" * ", r" \cdot ")


def step_tex(step) -> str:
    if step.kind == "Einsum":
        return notation_tex(f"{step.before} -> {step.after}")
    ax = format_axes(step.axes)[1:]
    return r"\textbf{" + step.kind + "}_{" + ax + r"}\," + notation_tex(f"{step.before} -> {step.after}")


def _num(plan, expr, unit):
    from ..report import fmt_bytes, fmt_count, fmt_seconds
    v = plan.evaluate(expr)
    if v is None:
        return ""
    return {"s": fmt_seconds, "B": fmt_bytes, "": fmt_count}[unit](v).replace("us", r"$\mu$s")


def _solve_section(plan) -> list[str]:
    from ..solve import bandwidth_comms, compute_bound_when, solve_plan
    names = [s.name for s in plan.t_math.free_symbols]
    symbol = "B" if "B" in names else None
    if symbol is None:
        return []
    out = [r"\subsection*{Roofline}",
           r"Throughput terms of the collectives: $T_{comms} = " + sp.latex(bandwidth_comms(plan)) + "$.",
           r"\begin{itemize}"]
    for c in solve_plan(plan, symbol):
        num = "" if c["numeric"] is None else f" $\\approx {c['numeric']:.4g}$"
        cond = c["condition"].replace("t_", "T_{").replace(" = ", "} = ") + "}"
        out.append(r"\item $" + cond.replace("T_{math}", r"T_{\mathrm{math}}") + r"$ at $" + symbol + " = "
                   + sp.latex(c["value"]) + "$" + num)
    try:
        cond = compute_bound_when(plan, symbol)
        out.append(r"\item compute-bound when $" + sp.latex(cond) + "$")
    except Exception:  # noqa: BLE001 - a condition SymPy cannot solve is left out, not fatal
        pass
    out.append(r"\end{itemize}")
    return out


def _assumptions(plan) -> list[str]:
    out = [r"\subsection*{Assumptions}", r"\begin{itemize}",
           r"\item Mesh: " + ", ".join(
               f"${a.name} = {a.size if a.size is not None else a.name}$ ({a.kind}"
               + (f", {a.links} links" if a.links != 1 else "")
               + ("" if a.kind != "ici" else (", ring" if a.ring else ", no wraparound")) + ")"
               for a in plan.mesh.axes),
           r"\item Overlap: " + ("each step takes the longest of $T_{math}$, $T_{hbm}$ and $T_{comms}$; "
                                 "collectives on different mesh axes run concurrently" if plan.overlap else
                                 "every step's time adds up (no overlap)"),
           r"\item Collectives: AllGather and ReduceScatter $V/W_{ici}$ per link on a bidirectional ring, "
           r"AllReduce $2V/W_{ici}$, AllToAll $V/(4W_{ici})$; latency $T_{min}$ per hop "
           r"(How to Scale Your Model, Part 3)."]
    hw = plan.hardware
    if hw is not None:
        out.append(r"\item Hardware " + _escape(hw.name) + ": " + _escape(hw.description))
        out.append(r"\begin{itemize}")
        for sym, v in hw.bindings(plan.compute_dtype).items():
            field = {"C": "flops", "W_hbm": "hbm_bandwidth", "W_ici": "ici_bandwidth", "W_dcn": "dcn_bandwidth",
                     "T_min": "t_min", "W_nvlink": "ici_one_way", "W_pcie": "pcie_bandwidth"}[sym]
            out.append(f"\\item ${sp.latex(sp.Symbol(sym))} = {v:.4g}$ -- {_escape(hw.source(field))}")
        out.append(r"\end{itemize}")
    out.append(r"\end{itemize}")
    return out


def plan_to_latex(plan, fragment: bool = False, math_only: bool = False) -> str:
    """The derivation of ``plan``; ``fragment`` drops the preamble; ``math_only`` gives one display
    (for notebooks)."""
    if math_only:
        rows = r" \\ ".join(step_tex(s) for s in plan.steps) or r"\text{no communication}"
        return r"$$\begin{array}{l}" + rows + r" \\ T_{step} = " + sp.latex(plan.t_step) + r"\end{array}$$"
    body = [r"\section*{Derivation}", r"\texttt{" + _escape(plan.expression).replace("\n", r"\\") + "}"]
    for phase in ("forward", "backward"):
        steps = [s for s in plan.steps if s.phase == phase]
        if not steps:
            continue
        body += [r"\subsection*{" + phase.capitalize() + " pass}", r"\begin{align*}"]
        body.append(r" \\ ".join(f"&({i})\\quad {step_tex(s)}" for i, s in enumerate(steps, 1)))
        body += [r"\end{align*}", r"\begin{center}\small", r"\begin{tabular}{rllll}", r"\toprule",
                 r"& step & bytes & FLOPs & time \\ \midrule"]
        for i, s in enumerate(steps, 1):
            label = s.kind + (format_axes(s.axes) if s.kind != "Einsum" else "")
            t = _num(plan, s.seconds, "s")
            body.append(f"{i} & {_escape(label)} & ${sp.latex(s.bytes)}$ & ${sp.latex(s.flops)}$ & "
                        f"{t or '$' + sp.latex(s.seconds) + '$'} \\\\")
        body += [r"\bottomrule", r"\end{tabular}", r"\end{center}"]
    body += [r"\subsection*{Totals}", r"\begin{align*}"]
    rows = []
    for k, label, unit in (("flops", r"\mathrm{FLOPs}", ""), ("t_math", r"T_{math}", "s"), ("t_hbm", r"T_{hbm}", "s"),
                           ("t_comms", r"T_{comms}", "s"), ("t_step", r"T_{step}", "s")):
        v = _num(plan, getattr(plan, k), unit)
        rows.append(f"{label} &= {sp.latex(getattr(plan, k))}" + (rf" && \text{{{v}}}" if v else ""))
    body.append(r" \\ ".join(rows))
    body.append(r"\end{align*}")
    body += _solve_section(plan)
    body += _assumptions(plan)
    text = "\n".join(body)
    if fragment:
        return text
    return ("\\documentclass[10pt]{article}\n\\usepackage{amsmath,amssymb,booktabs}\n"
            "\\usepackage[margin=1.8cm,landscape]{geometry}\n\\allowdisplaybreaks\n"
            "\\begin{document}\n" + text + "\n\\end{document}\n")


def plan_to_markdown(plan) -> str:
    """The derivation as Markdown (for READMEs and issues)."""
    from ..report import fmt_seconds
    lines = [f"**Derivation** of `{plan.expression}` on mesh `{plan.mesh}`"
             + (f", {plan.hardware.name}" if plan.hardware else ""), "",
             "| # | phase | step | bytes | FLOPs | time |", "|---|---|---|---|---|---|"]
    for i, s in enumerate(plan.steps, 1):
        t = plan.evaluate(s.seconds)
        lines.append(f"| {i} | {s.phase} | `{s.signature()}` | `{s.bytes}` | `{s.flops}` | "
                     + (fmt_seconds(t) if t is not None else f"`{s.seconds}`") + " |")
    lines += ["", "| total | expression | value |", "|---|---|---|"]
    num = plan.numeric()
    for k in ("flops", "t_math", "t_hbm", "t_comms", "t_step"):
        v = num.get(k)
        lines.append(f"| {k} | `{getattr(plan, k)}` | " + ("" if v is None else
                                                             (f"{v:.4g}" if k == "flops" else fmt_seconds(v))) + " |")
    return "\n".join(lines)
