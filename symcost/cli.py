"""The ``symcost`` command line (DESIGN section 3).

    symcost derive "A[I, J_X] * B[J, K] -> C[I, K]" --mesh X=4 --dims I=256,J=8192,K=8192 --hw tpu-v5e
    symcost check  "A[I_X, J_X]"
    symcost hardware tpu-v5p

Exit status: 0 success, 1 well-formed but invalid input (a sharding, a collective), 2 usage or notation
error. Errors are one sentence on stderr with the caret snippet; never a traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import sys


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors: exit 2, one line, no traceback
        self.print_usage(sys.stderr)
        sys.stderr.write(f"symcost: {message}\n")
        raise SystemExit(2)


def _common(p: argparse.ArgumentParser, program: bool = True):
    if program:
        p.add_argument("program", metavar="EXPR|FILE", help="notation, or a file of it")
    p.add_argument("--mesh", help="axes: X=4,Y=8; X (symbolic); X=16:2 (2 links); X=4:dcn; X=8:nvlink; X:M_X")
    p.add_argument("--dims", help="bindings: B=1024,D=8192")
    p.add_argument("--hw", help="hardware preset (see 'symcost hardware')")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")


def _read_program(arg: str) -> str:
    if "[" not in arg and os.path.exists(arg):
        try:
            with open(arg, encoding="utf-8") as f:
                return f.read()
        except OSError as e:
            from .errors import UsageError
            raise UsageError(f"cannot read {arg}: {e.strerror}") from None
    if os.path.isdir(arg):
        from .errors import UsageError
        raise UsageError(f"{arg} is a folder, not a program file")
    return arg


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="symcost", description="Symbolic cost derivation for sharded tensor programs "
                                            "(the notation of 'How to Scale Your Model').")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    c = sub.add_parser("check", help="is this sharding / program valid? why not?")
    _common(c)

    d = sub.add_parser("derive", help="the plan: steps with collectives, per-step and total costs")
    _common(d)
    _planning(d)
    d.add_argument("--objective", choices=("time", "comms"), default="time",
                   help="rank plans by step time (default) or by communication alone")

    s = sub.add_parser("solve", help="critical values (T_math = T_comms, T_math = T_hbm)")
    _common(s)
    s.add_argument("--for", dest="symbol", required=True, help="the symbol to solve for, e.g. B")
    _planning(s)

    o = sub.add_parser("optimize", help="optimal mesh split and its compute-bound condition")
    _common(o)
    o.add_argument("--chips", required=True, help="number of chips N (a number or a symbol)")
    o.add_argument("--vary", required=True, help="the two axes to split the chips over, e.g. X,Y")
    _planning(o)

    lx = sub.add_parser("latex", help="a standalone LaTeX derivation document")
    _common(lx)
    lx.add_argument("-o", "--output", help="write to this file (default: stdout)")
    lx.add_argument("--fragment", action="store_true", help="no preamble")
    lx.add_argument("--markdown", action="store_true", help="Markdown instead of LaTeX (for READMEs and issues)")
    _planning(lx)

    h = sub.add_parser("hardware", help="list presets / show one, with its sources")
    h.add_argument("name", nargs="?")
    h.add_argument("--json", action="store_true")

    _register_extra(sub)
    return p


def _planning(p):
    p.add_argument("--backward", action="store_true", help="also derive the backward pass")
    p.add_argument("--no-overlap", action="store_true", help="sum compute and communication times")
    p.add_argument("--params", help="the parameters (default: 'param' declarations, else inputs named W...)")
    p.add_argument("--reuse", choices=("none", "activations", "all"), default="activations",
                   help="forward gathers the backward pass may reuse (default: activations)")
    p.add_argument("--moves", default="auto",
                   help="moves the engine may insert: all, strategy (gathers, slices, reductions) or "
                        "auto (strategy for programs that declare parameters)")


def _register_extra(sub):
    """Commands that live in their own modules register here when present."""
    for mod in ("symcost.cli_model", "symcost.cli_docs"):
        try:
            m = __import__(mod, fromlist=["register"])
        except ImportError:
            continue
        m.register(sub, _common)


def _derive(args):
    from .program import derive_program
    text = _read_program(args.program)
    kw = dict(overlap=not getattr(args, "no_overlap", False), moves=getattr(args, "moves", "auto"))
    if getattr(args, "objective", None):
        kw["objective"] = args.objective
    if getattr(args, "backward", False):
        kw.update(backward=True, reuse=args.reuse, params=args.params)
    return derive_program(text, args.mesh, args.dims, args.hw, **kw)


def cmd_check(args) -> int:
    plan = _derive(args)
    if args.json:
        print(json.dumps({"valid": True, "expression": plan.expression,
                          "layouts": [l.render(plan.mesh) for l in plan.layouts],
                          "collectives": [s.signature() for s in plan.collectives]}, indent=2))
    else:
        print(f"valid: {plan.expression}")
        for lay in plan.layouts:
            print(f"  {lay.render(plan.mesh)}")
        if plan.collectives:
            print("needs: " + "; ".join(s.signature() for s in plan.collectives))
    return 0


def cmd_derive(args) -> int:
    plan = _derive(args)
    print(plan.to_json() if args.json else str(plan))
    return 0


def cmd_solve(args) -> int:
    import sympy as sp
    from .solve import bandwidth_comms, compute_bound_when, solve_plan
    plan = _derive(args)
    phases = [("all", plan)]
    if any(st.phase == "backward" for st in plan.steps):
        phases = [("forward", plan.phase("forward")), ("backward", plan.phase("backward")), ("all", plan)]
    report = []
    for name, p in phases:
        report.append((name, p, solve_plan(p, args.symbol), compute_bound_when(p, args.symbol)))
    if args.json:
        _, p, crit, cond = report[-1]
        out = {"symbol": args.symbol,
               "critical": [{"condition": c["condition"], "value": str(c["value"]), "numeric": c["numeric"]}
                            for c in crit],
               "compute_bound_when": str(cond)}
        if len(report) > 1:
            out["phases"] = {name: {"critical": [{"condition": c["condition"], "value": str(c["value"]),
                                                  "numeric": c["numeric"]} for c in cr],
                                    "compute_bound_when": str(co)} for name, _, cr, co in report}
        print(json.dumps(out, indent=2))
        return 0
    print(f"program: {args.program}" if os.path.exists(args.program) else f"expression: {plan.expression}")
    for name, p, crit, cond in report:
        print(f"[{name}]" if len(report) > 1 else "")
        print(f"  t_math  = {p.t_math}")
        print(f"  t_comms = {bandwidth_comms(p)}   (throughput terms)")
        print(f"  t_hbm   = {p.t_hbm}")
        if not crit:
            print(f"  no critical value of {args.symbol}")
        for c in crit:
            num = "" if c["numeric"] is None else f" = {c['numeric']:.6g}"
            if c["numeric"] is None:  # a per-device figure: the value over the mesh axes it grows with
                axes = [sp.Symbol(a.name, positive=True, integer=True) for a in p.mesh.axes
                        if a.size is None and sp.Symbol(a.name, positive=True, integer=True) in c["value"].free_symbols]
                if axes:
                    per = p.evaluate(c["value"] / sp.Mul(*axes))
                    if per is not None:
                        num = f"  ({per:.6g} per device along {','.join(str(a) for a in axes)})"
            print(f"  {c['condition']}:  {args.symbol} = {sp.sstr(c['value'])}{num}")
        print(f"  compute-bound when: {cond}")
    return 0


def cmd_optimize(args) -> int:
    from .optimize import optimize_plan
    plan = _derive(args)
    vary = tuple(v.strip() for v in args.vary.split(",") if v.strip())
    r = optimize_plan(plan, vary, args.chips)
    if args.json:
        print(json.dumps({"vary": r["vary"], "optimum": {k: str(v) for k, v in r["optimum"].items()},
                          "numeric": r["numeric"],
                          "chosen": ({k: r["chosen"][k] for k in vary} if r["chosen"] else None),
                          "t_comms": str(r["t_comms"]), "t_math": str(r["t_math"]),
                          "compute_bound_when": str(r["compute_bound_when"])}, indent=2))
        return 0
    for k, v in r["optimum"].items():
        num = "" if r["numeric"] is None else f" = {r['numeric'][k]:.4g}"
        print(f"{k}_opt = {v}{num}")
    print(f"t_comms at the optimum = {r['t_comms']}")
    print(f"t_math = {r['t_math']}")
    if r["chosen"]:
        c = r["chosen"]
        print(f"best integer split: " + ", ".join(f"{k}={c[k]}" for k in vary)
              + f" (t_comms = {c['t_comms']:.4g} s at the ranking figures where hardware is unbound)")
    print(f"compute-bound when: {r['compute_bound_when']}")
    return 0


def write_output(path: str, text: str) -> None:
    """Write a generated file; an unwritable path is a usage error, not a traceback."""
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        from .errors import UsageError
        raise UsageError(f"cannot write {path}: {e.strerror}") from None
    print(f"wrote {path}")


def cmd_latex(args) -> int:
    plan = _derive(args)
    tex = plan.to_markdown() if args.markdown else plan.to_latex(fragment=args.fragment)
    if args.output:
        write_output(args.output, tex)
    else:
        print(tex)
    return 0


def cmd_hardware(args) -> int:
    from .hardware import hardware, presets
    if args.name is None:
        if args.json:
            print(json.dumps([hardware(n).name for n in presets()]))
            return 0
        for n in presets():
            hw = hardware(n)
            print(f"{hw.name:10s} {hw.description}")
        return 0
    hw = hardware(args.name)
    if args.json:
        from dataclasses import asdict
        d = asdict(hw)
        d["flops"] = dict(hw.flops)
        d["sources"] = dict(hw.sources)
        print(json.dumps(d, indent=2))
    else:
        print(hw.show())
    return 0


COMMANDS = {"check": cmd_check, "derive": cmd_derive, "solve": cmd_solve, "optimize": cmd_optimize,
            "latex": cmd_latex, "hardware": cmd_hardware}


def main(argv=None) -> int:
    from .errors import SymcostError
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = COMMANDS.get(args.command) or getattr(args, "handler", None)
    try:
        return handler(args)
    except SymcostError as e:
        sys.stderr.write(f"symcost: {e}\n")
        return e.exit_code
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    except RecursionError:
        sys.stderr.write("symcost: the input is too deeply nested\n")
        return 2
    except Exception as e:  # a bug, not the user's fault: still no traceback unless asked for
        if os.environ.get("SYMCOST_DEBUG"):
            raise
        sys.stderr.write(f"symcost: internal error ({type(e).__name__}: {e}); "
                         f"set SYMCOST_DEBUG=1 for details\n")
        return 3


if __name__ == "__main__":
    sys.exit(main())
