"""``symcost trace FILE.py:FUNCTION``: a JAX function read into a program, printed, then derived.

    symcost trace examples/mlp_jax.py:mlp --args "x=bf16[64,256],w_in=bf16[256,1024],w_out=bf16[1024,256]" \\
        --specs "x=B_X,D;w_in=D,F_Y;w_out=F_Y,D" --mesh X=4,Y=2 --hw h100

Loading FILE.py runs it (it is the user's own program); the --args, --specs and --names strings are read by
a small parser (:mod:`symcost.jaxin.specs`), never evaluated.
"""
from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys

from ..errors import UsageError
from .options import json_flag, planning, write_output

DTYPES = {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16", "fp8": "float8_e4m3fn", "int8": "int8",
          "int4": "int4"}


def register(sub):
    t = sub.add_parser("trace", help="a JAX function read into a program (jax.make_jaxpr), then its plan")
    t.add_argument("target", metavar="FILE.py:FUNCTION", help="the Python file and the function in it")
    t.add_argument("--args", required=True, help='abstract arguments: "x=bf16[8,2048,4096],w=bf16[4096,14336]"')
    t.add_argument("--specs", default="", help='dimension names and layouts: "x=B_X,T,D;w=D,F_Y"')
    t.add_argument("--out-specs", default=None, help='the outputs\' layouts, in order: "B_X,T,D;..."')
    t.add_argument("--names", default="", help="names for dimensions the specs do not reach, by size: K=8,H=128")
    t.add_argument("--mesh", required=True, help="axes, every one sized: X=4,Y=2")
    t.add_argument("--hw", help="hardware preset (see 'symcost hardware')")
    t.add_argument("--matmuls-only", action="store_true",
                   help="leave elementwise work and reductions out (fused into the matmuls, as "
                        "'symcost model --program' writes a layer)")
    t.add_argument("--xla-check", action="store_true",
                   help="also compile the function with XLA's partitioner on the mesh and list its collectives and "
                        "FLOPs beside the plan's (needs the mesh's devices: on a CPU, XLA_FLAGS="
                        "--xla_force_host_platform_device_count=N)")
    t.add_argument("--to-notation", metavar="PATH", nargs="?", const="-",
                   help="print the program instead of its plan (with PATH: write it there, then derive)")
    json_flag(t)
    planning(t)
    t.add_argument("--objective", choices=("time", "comms"), default="time",
                   help="rank plans by step time (default) or by communication alone")
    t.set_defaults(handler=cmd_trace, reuse=None)


def load_function(target: str):
    path, sep, name = target.rpartition(":")
    if not sep or not path.endswith(".py") or not name.isidentifier():
        raise UsageError(f"{target!r}: write FILE.py:FUNCTION")
    if not os.path.isfile(path):
        raise UsageError(f"cannot read {path}: no such file")
    spec = importlib.util.spec_from_file_location(f"symcost_traced_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 -- the user's file failed: say so in one sentence
        raise UsageError(f"loading {path} raised {type(e).__name__}: {e}") from None
    finally:
        sys.path.pop(0)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UsageError(f"{path} has no function {name}")
    return fn


def traced_from(args):
    from ..jaxin import from_jax
    from ..jaxin.specs import parse_args, parse_names, parse_spec, parse_specs
    try:
        import jax
    except ImportError:
        raise UsageError("symcost trace needs JAX: pip install 'symcost[jax]'") from None
    given = parse_args(args.args)
    specs = parse_specs(args.specs) if args.specs.strip() else {}
    names = parse_names(args.names) if args.names.strip() else {}
    fn = load_function(args.target)
    takes = [p.name for p in inspect.signature(fn).parameters.values()
             if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    missing, extra = [n for n in takes if n not in given], [n for n in given if n not in takes]
    if missing or extra:
        raise UsageError(f"{args.target} takes {', '.join(takes)}; --args "
                         + (f"lacks {', '.join(missing)}" if missing
                            else f"names {', '.join(extra)}, which it does not take"))
    for n in specs:
        if n not in given:
            raise UsageError(f"--specs names {n}, which --args does not give")
    structs = [jax.ShapeDtypeStruct(given[n][1], DTYPES[given[n][0]]) for n in takes]
    in_specs = {n: ",".join(d + ("_{" + ",".join(a) + "}" if a else "") for d, a in specs[n]) for n in specs}
    out_specs = None
    if args.out_specs:
        out_specs = [",".join(d + ("_{" + ",".join(a) + "}" if a else "") for d, a in parse_spec(s, "--out-specs"))
                     for s in args.out_specs.split(";")]
    params = [p.strip() for p in args.params.split(",")] if args.params else None

    def trace(mesh):
        return from_jax(fn, *structs, mesh=mesh, in_specs=in_specs, out_specs=out_specs, names=names,
                        params=params, elementwise=not args.matmuls_only)
    return trace, fn, structs, [in_specs.get(n) for n in takes]


def cmd_trace(args) -> int:
    trace, fn, structs, specs = traced_from(args)
    traced = trace(args.mesh)
    if args.to_notation == "-":
        sys.stdout.write(traced.to_notation())
        return 0
    if args.to_notation:
        write_output(args.to_notation, traced.to_notation(), quiet=args.json)
    kw = {"overlap": not args.no_overlap, "moves": args.moves, "efficiency": args.efficiency,
          "objective": args.objective}
    if args.backward:
        kw.update(backward=True, params=args.params)
    if args.reuse is not None:
        kw["reuse"] = args.reuse
    plan = traced.derive(args.hw, **kw)
    xla = None
    if args.xla_check:
        from ..jaxin.truth import one_device, versus_xla
        xla = versus_xla(plan, trace(one_device(args.mesh)).derive(), fn, structs, args.mesh, specs)
    if args.json:
        out = json.loads(plan.to_json())
        out["program"] = traced.text
        out["dims"] = traced.dims
        out["reuse"] = traced.reuse
        if xla is not None:
            out["xla"] = xla
        print(json.dumps(out, indent=2))
        return 0
    print(f"traced {args.target}: dims {traced.dims_text()}" + (f", reuse {traced.reuse}" if traced.reuse else ""))
    print(str(plan))      # its first lines are the program read
    if xla is not None:
        print()
        print(f"XLA ({xla['jax']}), the forward pass on {args.mesh}:")
        print("  collectives: " + ("; ".join(f"{k} over {','.join(a)}" for k, a in xla["xla"]) or "none"))
        print("  the plan's:  " + ("; ".join(f"{k} over {','.join(a)}" for k, a in xla["symcost"]) or "none")
              + ("  (the same)" if xla["same"] else ""))
        if "# iteration" in traced.text:
            print("  (XLA lists a loop's collectives once and counts its body's FLOPs once; the program writes "
                  "every iteration)")
        print(f"  FLOPs on one device: XLA {xla['xla_flops']:.4g}, the program {xla['flops']:.4g} "
              f"({100 * (xla['flops'] / xla['xla_flops'] - 1):+.2f} %)" if xla["xla_flops"] else "")
    return 0
