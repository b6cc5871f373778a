"""``check``, ``derive``, ``solve``, ``optimize``, ``latex`` and ``hardware``."""
from __future__ import annotations

import json
import os

import sympy as sp

from ..errors import UsageError
from ..printers.text import fmt_seconds
from .options import common, derive_from, planning, write_output


def register(sub):
    c = sub.add_parser("check", help="is this sharding / program valid? why not?")
    common(c)
    c.add_argument("--strict", action="store_true",
                   help="also refuse a dimension that does not divide by its axes (by default it is padded)")
    c.set_defaults(handler=cmd_check)

    d = sub.add_parser("derive", help="the plan: steps with collectives, per-step and total costs")
    common(d)
    planning(d)
    d.add_argument("--objective", choices=("time", "comms"), default="time",
                   help="rank plans by step time (default) or by communication alone")
    d.set_defaults(handler=cmd_derive)

    s = sub.add_parser("solve", help="critical values (T_math = T_comms, T_math = T_hbm)")
    common(s)
    s.add_argument("--for", dest="symbol", required=True, help="the symbol to solve for, e.g. B")
    planning(s)
    s.set_defaults(handler=cmd_solve)

    o = sub.add_parser("optimize", help="optimal mesh split and its compute-bound condition")
    common(o)
    o.add_argument("--chips", required=True, help="number of chips N (a number or a symbol)")
    o.add_argument("--vary", required=True, help="the two axes to split the chips over, e.g. X,Y")
    planning(o)
    o.set_defaults(handler=cmd_optimize)

    lx = sub.add_parser("latex", help="a standalone LaTeX derivation document")
    common(lx)
    lx.add_argument("-o", "--output", help="write to this file (default: stdout)")
    lx.add_argument("--fragment", action="store_true", help="no preamble")
    lx.add_argument("--markdown", action="store_true", help="Markdown instead of LaTeX (for READMEs and issues)")
    planning(lx)
    lx.set_defaults(handler=cmd_latex)

    h = sub.add_parser("hardware", help="list presets / show one, with its sources")
    h.add_argument("name", nargs="?")
    h.add_argument("--json", action="store_true")
    h.set_defaults(handler=cmd_hardware)


def cmd_check(args) -> int:
    plan = derive_from(args, strict=args.strict)
    layouts = [l.render(plan.mesh) for l in plan.layouts]
    needs = [s.signature() for s in plan.collectives]
    if args.json:
        print(json.dumps({"valid": True, "expression": plan.expression, "layouts": layouts, "collectives": needs,
                          "padding": [p.as_dict() for p in plan.padding]}, indent=2))
        return 0
    print(f"valid: {plan.expression}")
    for p in plan.padding:
        print(f"  padding: {p}")
    for lay in layouts:
        print(f"  {lay}")
    if needs:
        print("needs: " + "; ".join(needs))
    return 0


def cmd_derive(args) -> int:
    plan = derive_from(args)
    print(plan.to_json() if args.json else str(plan))
    return 0


def _critical(crit) -> list[dict]:
    return [{"condition": c["condition"], "value": str(c["value"]), "numeric": c["numeric"],
             "per_device": c["per_device"]["value"] if c["per_device"] else None} for c in crit]


def _phase_report(p, symbol):
    from ..solve import bound_condition, compute_bound_when, never_balanced, solve_plan
    cond = compute_bound_when(p, symbol)
    bound = bound_condition(p, cond, symbol)
    return {"critical": solve_plan(p, symbol), "never": never_balanced(p, symbol), "cond": cond,
            "bound": None if bound == cond else bound}


def _phase_json(r) -> dict:
    return {"critical": _critical(r["critical"]), "never_balanced": r["never"], "compute_bound_when": str(r["cond"]),
            "compute_bound_when_numeric": None if r["bound"] is None else str(r["bound"])}


def _bound_words(b) -> str:
    if b is sp.true:
        return "always"
    if b is sp.false:
        return "never"
    return sp.sstr(b.evalf(6)) if hasattr(b, "evalf") else str(b)


def _not_bound(args, names, what: str) -> None:
    """A size the command solves for or chooses must stay free: ``--dims`` binding it is an error."""
    from ..binding import parse_dims
    bound = [n for n in names if n in parse_dims(args.dims)]
    if bound:
        raise UsageError(f"--dims binds {bound[0]}, {what}: drop {bound[0]} from --dims")


def cmd_solve(args) -> int:
    _not_bound(args, (args.symbol,), "the size --for solves for")
    plan = derive_from(args)
    phases = [("all", plan)]
    if any(st.phase == "backward" for st in plan.steps):
        phases = [("forward", plan.phase("forward")), ("backward", plan.phase("backward")), ("all", plan)]
    report = [(name, p, _phase_report(p, args.symbol)) for name, p in phases]
    if args.json:
        out = {"symbol": args.symbol, **_phase_json(report[-1][2])}
        if len(report) > 1:
            out["phases"] = {name: _phase_json(r) for name, _, r in report}
        print(json.dumps(out, indent=2))
        return 0
    print(f"program: {args.program}" if os.path.exists(args.program) else f"expression: {plan.expression}")
    for note in plan.notes:
        print(f"note: {note}")
    for pad in plan.padding:
        print(f"padding: {pad}")
    for name, p, r in report:
        print(f"[{name}]" if len(report) > 1 else "")
        print(f"  t_math  = {p.t_math}")
        print(f"  t_comms = {p.t_comms_bw}   (throughput terms)")
        print(f"  t_hbm   = {p.t_hbm}")
        if not r["critical"] and not r["never"]:
            print(f"  no critical value of {args.symbol}")
        for c in r["critical"]:
            num = f" = {c['numeric']:.6g}" if c["numeric"] is not None else ""
            per = c["per_device"]
            if per:
                num += (f"  ({per['value']:.6g} per device along {per['over']})" if c["numeric"] is None else
                        f"  ({per['value']:.6g} per device over {per['over']})")
            print(f"  {c['condition']}:  {args.symbol} = {sp.sstr(c['value'])}{num}")
        for n in r["never"]:
            why = (f"its root, {n['root']:.4g}, is not positive" if n["root"] is not None
                   else f"no value of {args.symbol} equates them")
            print(f"  {n['condition']}:  never balanced for positive {args.symbol} ({why})")
        print(f"  compute-bound when: {r['cond']}")
        if r["bound"] is not None:
            print(f"  with the numbers: {_bound_words(r['bound'])}")
    return 0


def cmd_optimize(args) -> int:
    from ..optimize import optimize_plan
    chips_symbol = () if str(args.chips).strip().isdigit() else (str(args.chips).strip(),)
    vary = tuple(v.strip() for v in args.vary.split(",") if v.strip())
    if len(vary) == 2 and vary[0] == vary[1]:
        raise UsageError(f"--vary takes two different mesh axes, not {vary[0]} twice")
    _not_bound(args, vary, "a mesh axis --vary chooses")
    plan = derive_from(args, names=chips_symbol)
    def derive_at(sizes, kinds=None):
        kinds = kinds or {}

        def written(a):
            size = sizes.get(a.name, a.size)
            kind = kinds.get(a.name, a.kind if a.kind_written else None)
            return (a.name + (f"={size}" if size is not None else "") + (f":{a.links}" if a.links != 1 else "")
                    + (f":{kind}" if kind else ""))
        return derive_from(args, mesh=",".join(written(a) for a in plan.mesh.axes), names=chips_symbol)

    r = optimize_plan(plan, vary, args.chips, derive_at)
    chosen = r["chosen"]
    if args.json:
        print(json.dumps({"vary": r["vary"], "optimum": {k: str(v) for k, v in r["optimum"].items()},
                          "numeric": r["numeric"],
                          "chosen": ({k: chosen[k] for k in (*vary, "t_comms", "t_step")}
                                     | {"placed": [chosen["spelled"][k] for k in vary]} if chosen else None),
                          "t_comms": str(r["t_comms"]), "t_math": str(r["t_math"]), "placement": r["placement"],
                          "compute_bound_when": str(r["compute_bound_when"])}, indent=2))
        return 0
    for k, v in r["optimum"].items():
        num = "" if r["numeric"] is None else f" = {r['numeric'][k]:.4g}"
        print(f"{k}_opt = {v}{num}")
    print(f"t_comms at the optimum = {r['t_comms']}")
    if plan.hardware is not None and not chosen:
        print("  (closed form with " + ", ".join(f"{k} on {v}" for k, v in r["placement"].items())
              + f"; bind every size with --dims to derive the best integer split at its placement on "
              f"{plan.hardware.name})")
    if r["placed_again"]:
        print("  (closed form with " + ", ".join(f"{k} on {v}" for k, v in r["placement"].items())
              + f": the links {plan.hardware.name} gives the best integer split)")
    print(f"t_math = {r['t_math']}")
    if chosen:
        where = f"derived at that mesh on {plan.hardware.name}" if chosen["hardware_bound"] else \
            "derived at that mesh, at the ranking figures (no --hw)"
        print("best integer split: " + ", ".join(f"{k}={chosen[k]}" for k in vary)
              + f" (t_comms = {fmt_seconds(chosen['t_comms'])}, t_step = {fmt_seconds(chosen['t_step'])}; {where})")
        placed = [chosen["spelled"][k] for k in vary if chosen[k] > 1]
        if chosen["hardware_bound"] and any(chosen["links"][k] != 1 for k in vary if chosen[k] > 1):
            print(f"  placed as {', '.join(placed)} (--mesh syntax): the closed form above takes one link an axis, "
                  f"each split is derived on the links {plan.hardware.name} gives it")
    print(f"compute-bound when: {r['compute_bound_when']}")
    return 0


def cmd_latex(args) -> int:
    if args.markdown and args.fragment:
        raise UsageError("--fragment is the LaTeX body without its preamble; Markdown has none: drop one of them")
    plan = derive_from(args)
    fmt = "markdown" if args.markdown else "latex"
    tex = plan.to_markdown() if args.markdown else plan.to_latex(fragment=args.fragment)
    if args.output:
        write_output(args.output, tex, quiet=args.json)
    if args.json:
        print(json.dumps({"expression": plan.expression, "format": fmt, "fragment": bool(args.fragment),
                          "output": args.output, "text": tex}, indent=2))
    elif not args.output:
        print(tex)
    return 0


def cmd_hardware(args) -> int:
    from ..hardware import hardware, presets
    if args.name is None:
        if args.json:
            print(json.dumps([hardware(n).name for n in presets()]))
            return 0
        for n in presets():
            print(f"{hardware(n).name:10s} {hardware(n).description}")
        return 0
    hw = hardware(args.name)
    if args.json:
        from dataclasses import asdict
        d = asdict(hw)
        d["flops"], d["sources"] = dict(hw.flops), dict(hw.sources)
        print(json.dumps(d, indent=2))
    else:
        print(hw.show())
    return 0
