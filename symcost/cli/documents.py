"""``plot``, ``export-jax`` and ``xla-check``."""
from __future__ import annotations

import json
import os

from ..errors import UsageError
from .options import common, derive_from, mesh_dims_hw, planning, refuse_unread, writable, write_output


def register(sub):
    p = sub.add_parser("plot", help="communication vs compute by batch, rooflines, latency/throughput")
    p.add_argument("target", metavar="EXPR|FILE|FOLDER|MODEL")
    mesh_dims_hw(p)
    p.add_argument("--vs", help="the dimension on the x axis: draws communication against compute over it "
                                "(the book's Part 5 figure; default B for a folder or .sc file); with --mesh, "
                                "the plan derived on that mesh over it")
    p.add_argument("--chips", type=int, help="(strategies) the chips the mesh's axes share (default 4096); "
                                             "(frontier) the slice (default 8)")
    p.add_argument("--kind", choices=("auto", "strategies", "plan", "roofline", "frontier"), default="auto",
                   help="auto: a folder, or a program with --vs, is drawn as strategies (with --mesh: plan); a "
                        "program without --vs as a roofline; a model name as a frontier")
    p.add_argument("--backward", action="store_true", help="(plan) the plan with its backward pass")
    p.add_argument("--dtype", help="(frontier) weights and KV dtype (default bf16)")
    p.add_argument("--seq", type=int, help="(frontier) context length (default 8192)")
    p.add_argument("-o", "--output", required=True, help="a .png, .svg or .pdf file")
    p.set_defaults(handler=cmd_plot, params=None, reuse=None)

    j = sub.add_parser("export-jax", help="a runnable JAX shard_map program that performs the plan")
    common(j)
    planning(j)
    j.add_argument("-o", "--output", required=True, help="the .py file to write")
    j.set_defaults(handler=cmd_export_jax)

    x = sub.add_parser("xla-check", help="compile with XLA's partitioner and compare its collectives")
    common(x)
    x.set_defaults(handler=cmd_xla_check)


#: what each kind of plot reads: a flag given to a kind that does not read it is refused, not dropped
READS = {"strategies": ("vs", "chips", "dims", "hw"), "plan": ("vs", "mesh", "dims", "hw", "backward"),
         "roofline": ("mesh", "dims", "hw"),
         "frontier": ("hw", "chips", "dtype", "seq")}
DEFAULT_CHIPS = {"strategies": 4096, "frontier": 8}


def cmd_plot(args) -> int:
    from ..export import plot
    from ..hardware import hardware
    hw = hardware(args.hw) if args.hw else None
    kind = args.kind
    if kind == "auto":
        if os.path.isdir(args.target):
            kind = "strategies"
        elif args.target.endswith(".sc") or ("[" in args.target and args.vs):
            kind = "plan" if args.mesh and args.vs else "strategies"
        elif "[" in args.target:
            kind = "roofline"
        else:
            kind = "frontier"
    refuse_unread(args, ("mesh", "dims", "vs", "chips", "dtype", "seq", "backward"), lambda name: name in READS[kind],
                  lambda flag, name: f"{flag} is not read by a {kind} plot (it reads "
                                     f"{', '.join('--' + r for r in READS[kind])}): drop {flag}")
    writable(args.output, "-o")
    chips = args.chips if args.chips is not None else DEFAULT_CHIPS.get(kind)
    if kind == "strategies":
        out, skipped = plot.plot_strategies(plot.strategy_programs(args.target), args.output, args.vs or "B", hw,
                                            chips, dims=args.dims)
        for name, why in skipped.items():
            print(f"left out {name}: {why}")
    elif kind == "plan":
        if not args.vs:
            raise UsageError("a plan's plot needs --vs: the size on the x axis")
        args.program = args.target
        plan = derive_from(args)
        out, cross = plot.plot_plan(plan, args.vs, args.output)
        for x in cross:
            print(f"T_comms and T_math cross near {args.vs} = {x:.3g} (symcost solve --for {args.vs} gives it exactly)")
    elif kind == "roofline":
        args.program = args.target
        out = plot.plot_roofline(derive_from(args), args.output)
    else:
        from ..models.config import load_model_config
        from ..models.inference import Serving
        if hw is None:
            raise UsageError("a frontier needs --hw")
        out = plot.plot_frontier(Serving(load_model_config(args.target), hw, chips=chips, dtype=args.dtype or "bf16"),
                                 args.seq or 8192, args.output)
    print(f"wrote {out}")
    return 0


def cmd_export_jax(args) -> int:
    from ..export.jax import export_plan
    plan = derive_from(args)
    write_output(args.output, export_plan(plan), quiet=args.json)
    if args.json:
        print(json.dumps({"expression": plan.expression, "output": args.output,
                          "mesh": {a.name: a.size for a in plan.mesh.axes},
                          "collectives": [s.signature() for s in plan.collectives]}, indent=2))
    return 0


def cmd_xla_check(args) -> int:
    from ..export.lowering import concrete_sizes
    from ..export.xla_check import xla_check
    plan = derive_from(args, objective="comms")
    sizes = concrete_sizes(plan, "check with XLA")
    if set(sizes) - set(dict(plan.sizes)):   # plan at the sizes XLA compiles, not at the ranking defaults
        args.dims = ",".join(f"{k}={v}" for k, v in sizes.items())
        plan = derive_from(args, objective="comms")
    report = xla_check(plan)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"expression: {plan.expression}")
    print("XLA's SPMD partitioner inserted:")
    for c in report["xla"]["collectives"] or []:
        print(f"  {c['kind']:15s} over {','.join(c['axes']) or '?':6s} {c['bytes']:>12,} bytes -> "
              f"{c['link_bytes']:>12,} link bytes")
    if not report["xla"]["collectives"]:
        print("  (nothing)")
    print("symcost's plan:")
    for s in report["symcost"]["collectives"]:
        print(f"  {s['signature']}  -> {s['link_bytes']:,} link bytes")
    if not report["symcost"]["collectives"]:
        print("  (nothing)")
    print(f"ring model, bytes each device sends: XLA {report['xla']['link_bytes']:,}, "
          f"symcost {report['symcost']['link_bytes']:,}")
    return 0
