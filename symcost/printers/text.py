"""Plain text: a plan for the terminal, and the units every printer shows numbers in.

    >>> fmt_seconds(0.0178), fmt_bytes(1.14e11), fmt_count(6.71e7)
    ('17.8 ms', '114 GB', '6.71e+07')
"""
from __future__ import annotations

import sympy as sp

from ..env import RANKING_DEFAULTS


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
             f"mesh: {plan.mesh.spelled}" + (f"   hardware: {plan.hardware.name}" if plan.hardware else "")]
    lines += [f"note: {n}" for n in plan.notes] + [f"padding: {p}" for p in plan.padding]
    if plan.fits is False:
        lines.append(f"DOES NOT FIT: a device holds {fmt_bytes(plan.memory_bytes)} while training, "
                     f"{plan.hardware.name} has {fmt_bytes(plan.hardware.hbm_bytes)} of HBM; the times below "
                     f"describe a step that cannot run")
    lines.append("")
    for i, s in enumerate(plan.steps, 1):
        lines.append(f"{i}. {s.signature()}")
        b = plan.evaluate(s.bytes)
        t = plan.evaluate(s.seconds)
        label = "bytes" if s.is_compute else "V"
        nums = f"{label} = {s.bytes}"
        if b is not None and not s.bytes.is_number:
            nums += f" = {fmt_bytes(b)}"
        lines.append("   " + nums)
        if s.is_einsum:
            f = plan.evaluate(s.flops)
            lines.append(f"   flops = {s.flops}"
                         + (f" = {fmt_count(f)}" if f is not None and not s.flops.is_number else ""))
        elif s.is_elementwise:
            vf = sp.sympify(s.cost.vector_flops)
            f = plan.evaluate(vf)
            lines.append(f"   vector flops = {vf}"
                         + (f" = {fmt_count(f)}" if f is not None and not vf.is_number else ""))
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
        lines.append("memory per device while training (parameters; mixed-precision Adam: fp32 gradients, fp32 master "
                     "copy and moments; activations the plan saves):")
        for k, v in plan.memory:
            n = plan.evaluate(v)
            lines.append(f"  {k:11s} = {v}" + ("" if n is None else f" = {fmt_bytes(n)}"))
        if plan.fits is not None:
            lines.append(f"  {'fits' if plan.fits else 'DOES NOT FIT'} in {fmt_bytes(plan.hardware.hbm_bytes)} of "
                         f"HBM per {plan.hardware.name}")
    if plan.alternatives:
        lines += [""] + alternatives(plan)
    return "\n".join(lines)


SHOWN = 4


def alternatives(plan) -> list[str]:
    """The plans the rewriter weighed, cheapest first. They are plans of the forward pass: with a backward
    pass they are compared with the chosen forward pass, not with the whole step."""
    alts = plan.alternatives
    forward_only = any(s.phase == "backward" for s in plan.steps)
    shown = alts[:SHOWN]
    count = f"{len(alts)}" + (f"; the {len(shown)} cheapest shown" if len(shown) < len(alts) else "")
    out = [f"alternatives considered ({count}; --json lists their costs):"]
    if forward_only:
        fwd = plan.phase("forward")
        t = fwd.evaluate(fwd.t_step)
        out[0] = (f"alternatives for the forward pass ({count}; --json lists their costs), against the chosen "
                  f"forward pass" + (f" (t_step = {fmt_seconds(t)}):" if t is not None else ":"))
    groups: dict = {}          # statement (the plan's steps for it) -> its alternatives, cheapest first
    for a in alts:
        groups.setdefault(a.chosen, []).append(a)
    if len(groups) > 1:        # several statements: each one's cheapest other plan beside the plan's own
        out[0] = (f"alternatives considered ({len(alts)} for {len(groups)} statements; --json lists them all): "
                  f"each statement's plan, then the cheapest other plan weighed for it"
                  + (" (forward pass)" if forward_only else "") + ":")
        for group in groups.values():
            first = group[0]
            v = plan.evaluate(first.chosen_totals.t_step)
            out.append(f"  {first.statement}: {first.chosen_summary}"
                       + (f"; t_step = {fmt_seconds(v)}" if v is not None else "")
                       + f" ({len(group)} other{'s' if len(group) > 1 else ''})")
            out += _alternative_lines(plan, first)
        return out
    for a in shown:
        out += _alternative_lines(plan, a)
    return out


def _alternative_lines(plan, a) -> list[str]:
    v = plan.evaluate(a.t_step)
    out = [f"  - {a.summary}", f"      moves {a.comm_bytes} bytes (sum of V)"
           + (f"; t_step = {fmt_seconds(v)}" if v is not None else "")]
    if a.wins_when:
        when = "always" if a.wins_when == "always" else f"when {a.wins_when}"
        out.append(f"      its collectives take less time than the plan's {when}")
        if v is None and a.ranked is not None:    # why it lost, where the reader has no numbers
            out.append(_why_slower(plan, a))
    return out


def _why_slower(plan, a) -> str:
    """Why an alternative whose collectives may take less time lost, in numbers at the sizes the planner
    ranked it at (each unbound dimension's ranking size; TPU v5p's figures without a preset)."""
    r = a.ranked
    dims = {d for lay in plan.layouts for d in lay.dims} & {str(x) for x in a.t_step.free_symbols}
    ranked_at, bound = dict(a.ranker.sizes), dict(plan.sizes)
    at = [f"{d}={ranked_at.get(d, RANKING_DEFAULTS['dim'])}" for d in sorted(dims) if d not in bound]
    at += [] if plan.hardware is not None else ["TPU v5p's figures"]
    return (f"      yet it is slower at the sizes unbound ones are ranked at ({', '.join(at) or 'the defaults'}): "
            f"t_step {fmt_seconds(r['t_step'])} against the plan's {fmt_seconds(r['plan_t_step'])}, "
            f"most of the difference in {LOSES_ON[r['loses_on']]}")


#: what each term an alternative loses on is, in words
LOSES_ON = {"t_math": "compute (T_math)", "t_hbm": "HBM traffic (T_hbm)", "t_comms": "communication (T_comms)"}


def plan_to_html(plan) -> str:
    """A plan as a notebook shows it: its steps' signatures, bytes and seconds in a table, then T_step."""
    import html
    rows = "".join(f"<tr><td>{i}</td><td><code>{html.escape(s.signature())}</code></td>"
                   f"<td><code>{html.escape(str(s.bytes))}</code></td>"
                   f"<td><code>{html.escape(str(s.seconds))}</code></td></tr>"
                   for i, s in enumerate(plan.steps, 1))
    return (f"<p><b>{html.escape(plan.expression)}</b> on <code>{html.escape(str(plan.mesh))}</code></p>"
            f"<table><tr><th>#</th><th>step</th><th>bytes</th><th>time</th></tr>{rows}</table>"
            f"<p>T_step = <code>{html.escape(str(plan.t_step))}</code></p>")
