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
    d.add_argument("--backward", action="store_true", help="also derive the backward pass")
    d.add_argument("--no-overlap", action="store_true", help="sum compute and communication times")
    d.add_argument("--objective", choices=("time", "comms"), default="time",
                   help="rank plans by step time (default) or by communication alone")

    s = sub.add_parser("solve", help="critical values (T_math = T_comms, T_math = T_hbm)")
    _common(s)
    s.add_argument("--for", dest="symbol", required=True, help="the symbol to solve for, e.g. B")
    s.add_argument("--backward", action="store_true", help="include the backward pass")
    s.add_argument("--no-overlap", action="store_true")

    lx = sub.add_parser("latex", help="a standalone LaTeX derivation document")
    _common(lx)
    lx.add_argument("-o", "--output", help="write to this file (default: stdout)")
    lx.add_argument("--fragment", action="store_true", help="no preamble")
    lx.add_argument("--backward", action="store_true")

    h = sub.add_parser("hardware", help="list presets / show one, with its sources")
    h.add_argument("name", nargs="?")
    h.add_argument("--json", action="store_true")

    _register_extra(sub)
    return p


def _register_extra(sub):
    """Commands that live in their own modules register here when present."""
    for mod in ("symcost.cli_train", "symcost.cli_model", "symcost.cli_docs"):
        try:
            m = __import__(mod, fromlist=["register"])
        except ImportError:
            continue
        m.register(sub, _common)


def _derive(args, backward=None):
    from . import api
    text = _read_program(args.program)
    kw = dict(overlap=not getattr(args, "no_overlap", False))
    if getattr(args, "objective", None):
        kw["objective"] = args.objective
    if backward if backward is not None else getattr(args, "backward", False):
        from .program import derive_program
        return derive_program(text, args.mesh, args.dims, args.hw, backward=True, **kw)
    return api.derive(text, args.mesh, args.dims, args.hw, **kw)


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
    from .solve import compute_bound_when, solve_plan
    plan = _derive(args)
    crit = solve_plan(plan, args.symbol)
    cond = compute_bound_when(plan, args.symbol)
    if args.json:
        print(json.dumps({"symbol": args.symbol,
                          "critical": [{"condition": c["condition"], "value": str(c["value"]),
                                        "numeric": c["numeric"]} for c in crit],
                          "compute_bound_when": str(cond)}, indent=2))
        return 0
    print(f"expression: {plan.expression}")
    print(f"  t_math  = {plan.t_math}")
    from .solve import bandwidth_comms
    print(f"  t_comms = {bandwidth_comms(plan)}   (throughput terms)")
    print(f"  t_hbm   = {plan.t_hbm}")
    if not crit:
        print(f"no critical value of {args.symbol}")
    for c in crit:
        num = "" if c["numeric"] is None else f" = {c['numeric']:.6g}"
        print(f"{c['condition']}:  {args.symbol} = {sp.sstr(c['value'])}{num}")
    print(f"compute-bound when: {cond}")
    return 0


def cmd_latex(args) -> int:
    plan = _derive(args)
    tex = plan.to_latex(fragment=args.fragment)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(tex)
        except OSError as e:
            from .errors import UsageError
            raise UsageError(f"cannot write {args.output}: {e.strerror}") from None
        print(f"wrote {args.output}")
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


COMMANDS = {"check": cmd_check, "derive": cmd_derive, "solve": cmd_solve, "latex": cmd_latex,
            "hardware": cmd_hardware}


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
