"""A plan as LaTeX: the program with its collectives, a table of steps, the totals."""
from __future__ import annotations

import re

import sympy as sp


def notation_tex(s: str) -> str:
    """``In[B_X, D_Y]{U_Z}`` -> ``\\mathrm{In}[B_{X}, D_{Y}]\\{U_{Z}\\}`` (book style)."""
    s = s.replace("{U_", "\\{U_").replace("}", "\\}") if "{U_" in s else s
    s = re.sub(r"\b([A-Za-z0-9]+)_([A-Za-z]+)\b", r"\1_{\2}", s)
    s = s.replace("->", r"\rightarrow").replace(" * ", r" \cdot ")
    return s


def _tex_name(name: str) -> str:
    return r"\mathrm{" + name.replace("_", r"\_") + "}"


def step_tex(step) -> str:
    from ..notation import format_axes
    if step.kind == "Einsum":
        return notation_tex(f"{step.before} -> {step.after}")
    ax = format_axes(step.axes)[1:]
    return r"\textbf{" + step.kind + "}_{" + ax + "}\\," + notation_tex(f"{step.before} -> {step.after}")


def plan_to_latex(plan, fragment: bool = False, math_only: bool = False) -> str:
    if math_only:
        rows = r" \\ ".join(step_tex(s) for s in plan.steps)
        return r"$\begin{array}{l}" + rows + r" \\ T_{step} = " + sp.latex(plan.t_step) + r"\end{array}$"
    body = [r"\section*{Derivation: \texttt{" + plan.expression.replace("_", r"\_").replace("{", r"\{").replace("}", r"\}") + "}}",
            r"\begin{align*}"]
    body.append(r" \\ ".join(step_tex(s) for s in plan.steps) or r"\text{no steps}")
    body.append(r"\end{align*}")
    body.append(r"\begin{tabular}{llll}")
    body.append(r"step & bytes & FLOPs & time \\ \hline")
    for i, s in enumerate(plan.steps, 1):
        body.append(f"{i} {s.kind} & ${sp.latex(s.bytes)}$ & ${sp.latex(s.flops)}$ & ${sp.latex(s.seconds)}$ \\\\")
    body.append(r"\end{tabular}")
    body.append(r"\begin{align*}")
    body.append(r" \\ ".join(f"{k} &= {sp.latex(getattr(plan, k))}" for k in ("t_math", "t_hbm", "t_comms", "t_step")).replace("t_", "T_"))
    body.append(r"\end{align*}")
    text = "\n".join(body)
    if fragment:
        return text
    return ("\\documentclass{article}\n\\usepackage{amsmath,amssymb}\n\\usepackage[margin=2cm]{geometry}\n"
            "\\begin{document}\n" + text + "\n\\end{document}\n")
