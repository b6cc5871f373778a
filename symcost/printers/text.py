"""Plain text: a plan for the terminal, and the units every printer shows numbers in.

    >>> fmt_seconds(0.0178), fmt_bytes(1.14e11), fmt_count(6.71e7)
    ('17.8 ms', '114 GB', '6.71e+07')
"""
from __future__ import annotations

import sympy as sp


def fmt_seconds(x: float) -> str:
    if x == 0:
        return "0 s"
    for unit, scale in (("s", 1), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} s"


def fmt_bytes(x: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} B"


def fmt_count(x: float) -> str:
    return f"{x:.3g}"


def render_plan(plan) -> str:
    lines = [f"expression: {plan.expression}",
             f"mesh: {plan.mesh}" + (f"   hardware: {plan.hardware.name}" if plan.hardware else "")]
    lines += [f"note: {n}" for n in plan.notes] + [f"padding: {p}" for p in plan.padding] + [""]
    for i, s in enumerate(plan.steps, 1):
        lines.append(f"{i}. {s.signature()}")
        b = plan.evaluate(s.bytes)
        t = plan.evaluate(s.seconds)
        label = "bytes" if s.is_einsum else "V"
        nums = f"{label} = {s.bytes}"
        if b is not None and not s.bytes.is_number:
            nums += f" = {fmt_bytes(b)}"
        lines.append("   " + nums)
        if s.is_einsum:
            f = plan.evaluate(s.flops)
            lines.append(f"   flops = {s.flops}" + (f" = {fmt_count(f)}" if f is not None and not s.flops.is_number else ""))
        lines.append(f"   time = {s.seconds}" + (f" = {fmt_seconds(t)}" if t is not None else ""))
        if s.why:
            lines.append(f"   why: {s.why}")
    lines.append("")
    lines.append("totals" + ("" if plan.overlap else " (no overlap)") + ":")
    num = plan.numeric()
    for k in ("flops", "t_math", "t_hbm", "t_comms", "t_step"):
        expr = getattr(plan, k)
        v = num.get(k)
        shown = "" if v is None else " = " + (fmt_count(v) if k == "flops" else fmt_seconds(v))
        lines.append(f"  {k:8s} = {expr}{shown}")
    if plan.memory:
        lines.append("")
        lines.append("memory per device while training (parameters, bf16 gradients, Adam, saved activations):")
        for k, v in plan.memory:
            n = plan.evaluate(v)
            lines.append(f"  {k:11s} = {v}" + ("" if n is None else f" = {fmt_bytes(n)}"))
    if plan.alternatives:
        lines.append("")
        lines.append(f"alternatives considered ({len(plan.alternatives)}; --json lists their costs):")
        for a in plan.alternatives[:4]:
            v = plan.evaluate(a.t_step)
            lines.append(f"  - {a.summary}")
            detail = f"      moves {a.comm_bytes} bytes (sum of V)"
            if v is not None:
                detail += f"; t_step = {fmt_seconds(v)}"
            lines.append(detail)
            if a.wins_when:
                lines.append(f"      moves less data than the plan when {a.wins_when}")
    return "\n".join(lines)
