"""``calibrate`` and ``measure``: symcost on the devices JAX sees (the ``jax`` extra)."""
from __future__ import annotations

import json
import os

from ..errors import UsageError
from ..printers.text import fmt_bytes, fmt_seconds
from .options import mesh_dims_hw, read_program, refuse_unread, refuse_unused_dims, writable, write_output


def register(sub):
    c = sub.add_parser("calibrate", help="microbenchmarks on the devices JAX sees -> a preset (--hw FILE)")
    c.add_argument("--out", required=True, help="the preset file to write (.toml)")
    c.add_argument("--quick", action="store_true", help="a short sweep (about 30 s)")
    c.add_argument("--name", help="the preset's name (default: the file's name)")
    c.add_argument("--base", help="the preset unmeasured figures come from (default: the device's own, when symcost "
                                  "has one; else the nearest chip, or nominal figures for a CPU; 'none': the latter)")
    c.add_argument("--peaks", choices=("measured", "datasheet"), default="measured",
                   help="the preset's peaks: the best measured figures (default; the engine prices with them), or "
                        "the base's datasheet with the measured fractions of it as its efficiency table")
    c.add_argument("--mesh", help="the mesh collectives are measured over, axis by axis (default: every device on X)")
    c.add_argument("--dtypes", help="matmul dtypes to sweep, e.g. bf16,fp8 (default: the backend's)")
    c.add_argument("--runs", type=int, help="timed runs per point (default 20, --quick 5; CPU 10)")
    c.add_argument("--model", help="also time the matmuls of this model's layers (e.g. llama3-8b)")
    c.add_argument("--tokens", default="1,2048", help="with --model: the rows of those matmuls (default 1,2048)")
    c.add_argument("--no-progress", action="store_true", help="no progress bar")
    c.add_argument("--json", action="store_true", help="the measurements as JSON on stdout")
    c.set_defaults(handler=cmd_calibrate)

    m = sub.add_parser("measure", help="run a plan (or a model's layer stack) on the devices against its prediction")
    m.add_argument("target", metavar="EXPR|FILE|MODEL", help="notation, a program file, or a model with --decode, "
                                                             "--prefill or --train")
    mesh_dims_hw(m)
    m.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    m.add_argument("--runs", type=int, default=20, help="timed runs (default 20; the median is reported)")
    m.add_argument("--no-steps", action="store_true", help="time the whole only, not each step alone")
    m.add_argument("--no-overlap", action="store_true", help="predict with every step in turn")
    m.add_argument("--efficiency", action="store_true",
                   help="predict at the preset's achieved figures (its efficiency table and per-kernel floor, as "
                        "derive --efficiency prices them), not at its peaks (a preset without them has only its peaks)")
    m.add_argument("--moves", help="moves the engine may insert (as for derive; default auto)")
    for mode in ("decode", "prefill", "train"):
        m.add_argument(f"--{mode}", action="store_true", help=f"(a model) a {mode} step of its layer stack")
    m.add_argument("--batch", type=int, help="(a model) sequences")
    m.add_argument("--seq", type=int, help="(a model) context length (default 4096)")
    m.add_argument("--chips", type=int, help="(a model) devices to run it on (default 1)")
    m.add_argument("--dtype", help="(a model) weights and KV cache dtype (default bf16)")
    m.add_argument("--kv-dtype", help="(a model) KV cache dtype (default: --dtype)")
    m.add_argument("--layers", type=int, help="(a model) measure its first N layers (default: all)")
    m.add_argument("--plot", metavar="FILE", help="a measured-vs-predicted chart over a sweep (with --vs)")
    m.add_argument("--vs", help="the swept size: a dimension (B) or, for a model, batch or seq")
    m.add_argument("--values", help="the values of the sweep, e.g. 256,512,1024 (default: halvings of the size)")
    m.set_defaults(handler=cmd_measure)


# ------------------------------------------------------------------------------------------- calibrate


def _base(arg, peaks, info):
    from ..device import preset
    from ..hardware import hardware
    name = None if arg and arg.lower() == "none" else arg or preset.match_preset(info)
    base = hardware(name) if name else preset.provisional(info)
    if peaks == "datasheet" and name is None:
        raise UsageError(f"--peaks datasheet keeps a datasheet's peaks, and symcost has none for {info.kind}: name "
                         f"one with --base (e.g. --base h100), or keep the measured peaks")
    return base, peaks == "measured"


def cmd_calibrate(args) -> int:
    from ..device import calibrate, preset, runtime
    if not args.out.endswith(".toml"):
        raise UsageError(f"--out {args.out}: a preset file ends in .toml")
    writable(args.out, "--out")
    if args.runs is not None and args.runs < 1:
        raise UsageError("--runs must be at least 1")
    info = runtime.device_info()
    base, measured = _base(args.base, args.peaks, info)
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()] if args.dtypes else None
    try:
        tokens = tuple(int(t) for t in args.tokens.split(",") if t.strip())
    except ValueError:
        raise UsageError(f"--tokens {args.tokens}: give whole numbers, e.g. 1,2048") from None
    if not tokens or min(tokens) < 1:
        raise UsageError(f"--tokens {args.tokens}: give positive whole numbers, e.g. 1,2048")
    if args.model:
        from ..models.config import load_model_config
        load_model_config(args.model)            # an unknown model is refused before anything runs
    cal = calibrate.calibrate(quick=args.quick, mesh=args.mesh, base=base, dtypes=dtypes, runs=args.runs,
                              progress=not args.no_progress and not args.json, model=args.model, tokens=tokens)
    name = args.name or os.path.splitext(os.path.basename(args.out))[0]
    data = preset.build_preset(cal, name, measured)
    header = (f"written by symcost calibrate{' --quick' if args.quick else ''} on {info.describe()}, {cal.when}\n"
              f"every figure's source says whether it was measured, how, and from how many runs")
    text = preset.to_toml(data, header)
    if args.json:
        _write(args.out, text)
        print(json.dumps({**cal.as_dict(), "preset": args.out, "name": name,
                          "peaks": "measured" if measured else f"datasheet ({base.name})"}, indent=2))
        return 0
    _print_calibration(cal, data, base, measured)
    write_output(args.out, text)
    print(f"  (every figure: measured by symcost calibrate on {info.describe()}, {cal.when}, median of "
          f"{cal.sweep.runs} runs; unmeasured figures say where they come from)")
    return 0


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror}") from None


def _rate(x: float, unit: str) -> str:
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def calibrate_within() -> float:
    from ..device.calibrate import PEAK_WITHIN
    return PEAK_WITHIN


def _print_calibration(cal, data, base, measured) -> None:
    from ..device.preset import datasheet_flops
    d = cal.device
    sheet = not base.name.endswith("-calibrated")
    print(f"device: {d.describe()}; " + (f"peaks: the best measured figures (the rest from the {base.name} preset)"
                                         if measured and sheet else f"compared with the {base.name} datasheet"
                                         if sheet else "no datasheet preset for it: its best figures are its peaks"))
    for dt, pts in cal.matmul.items():
        best = max(pts, key=lambda p: p.rate)
        eta = data["efficiency"]["matmul"][dt]["eta"]
        ds = datasheet_flops(base, dt)
        print(f"matmul {dt}: {_rate(best.rate, 'FLOP/s')} at {best.size}^3"
              + (f" ({best.rate / ds:.0%} of the datasheet's {_rate(ds, 'FLOP/s')})" if ds else "")
              + "; efficiency by size: " + ", ".join(f"{p.size}^3 {e:.2f}" for p, e in zip(pts, eta))
              + ("" if cal.peak_reached.get(dt) else
                 f"; the peak was not reached (the largest sizes differ by more than {calibrate_within():.0%})"))
    for w, m, k, n, smp in cal.shapes:
        print(f"  layer matmul {w} {m}x{k}x{n}: {_rate(smp.rate, 'FLOP/s')}, {fmt_seconds(smp.timing.median)}"
              f" ({_rate(2.0 * k * n / smp.timing.median, 'B/s')} of bf16 weights)")
    for what, why in cal.skipped.items():
        print(f"{what}: not measured ({why})")
    c, r = cal.copy, cal.read
    print(f"HBM copy {_rate(c.rate, 'B/s')}, read {_rate(r.rate, 'B/s')}"
          + (f" (the better {max(c.rate, r.rate) / base.hbm_bandwidth:.0%} of the datasheet's "
             f"{_rate(base.hbm_bandwidth, 'B/s')})" if sheet else "")
          + f", {fmt_bytes(c.size)} per device, every device at once")
    if cal.elementwise is not None:
        print(f"elementwise bf16: {_rate(cal.elementwise.rate, 'FLOP/s')}")
    if cal.kernel is not None:
        print(f"per-kernel floor: {fmt_seconds(cal.kernel.per_kernel)} ({cal.kernel.describe()})")
    for link, n in sorted({(x.link, x.devices) for x in cal.collectives}):
        fits = [x for x in cal.collectives if x.link == link and x.devices == n]
        table = data.get("efficiency", {}).get("collectives", {}).get(link, {})
        of = "of the fastest" if measured else f"of {base.name}'s model"
        print(f"collectives over {fits[0].axis} ({n} devices, {link}): a fit of latency + V / bandwidth")
        for x in fits:
            f = x.fit
            eta = table.get(x.kind, {}).get("eta")
            print(f"  {x.kind:14s} latency {fmt_seconds(f.latency):>9s}   bandwidth {_rate(f.bandwidth, 'B/s'):>10s}"
                  + (f"   x{eta:.2f} {of}" if eta is not None else "")
                  + f"   residual {f.residual:.0%} over {len(f.points)} sizes ({fmt_bytes(f.points[0][0])} to "
                  f"{fmt_bytes(f.points[-1][0])} of V)")


# --------------------------------------------------------------------------------------------- measure


def _hardware(args, info):
    from ..device import preset
    from ..hardware import hardware
    if args.hw:
        return hardware(args.hw)
    name = preset.match_preset(info)
    if name is None:
        raise UsageError("measure compares with a prediction: give --hw FILE (symcost calibrate --out FILE writes "
                         "one for this device) or a preset")
    return hardware(name)


#: what only a model's layer stack reads, and what only a program's plan reads
_MODEL_ONLY = ("batch", "seq", "chips", "dtype", "kv_dtype", "layers")
_PLAN_ONLY = ("mesh", "dims", "moves", "no_overlap")


def _read(args) -> None:
    """A flag the measurement asked for does not read is an error, not a flag dropped."""
    model = _is_model(args)
    what = ("a program's plan, not a model's layer stack" if model else
            "a model's layer stack (--decode, --prefill or --train), not a program's plan")
    refuse_unread(args, _PLAN_ONLY if model else _MODEL_ONLY, lambda name: False,
                  lambda flag, name: f"{flag} is read by {what}: drop {flag}")


def _is_model(args) -> bool:
    return args.decode or args.prefill or args.train


def cmd_measure(args) -> int:
    from ..device import runtime
    from ..device.measure import sweep, sweep_values
    if args.runs < 1:
        raise UsageError("--runs must be at least 1")
    if args.plot and not args.vs:
        raise UsageError("--plot draws a sweep: name the swept size with --vs (e.g. --vs B)")
    if args.values and not args.vs:
        raise UsageError("--values are the points of a sweep: name the swept size with --vs (e.g. --vs B)")
    if args.plot:
        writable(args.plot, "--plot")
    _read(args)
    info = runtime.device_info()
    hw = _hardware(args, info)
    run_at, base_sizes, title = (_model_runner if _is_model(args) else _plan_runner)(args, hw)
    result = run_at(None, not args.no_steps)
    out = result.as_dict()
    rows = None
    if args.vs:
        values = sweep_values(base_sizes, args.vs, [v for v in (args.values or "").split(",") if v.strip()])
        rows = sweep(lambda v: run_at(v, False), values)
        out["sweep"] = {"vs": args.vs, "points": rows}
        if args.plot:
            from ..device.chart import plot_sweep
            plot_sweep(rows, args.vs, title, args.plot)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    _print_measurement(result, hw)
    if rows:
        print(f"sweep over {args.vs}:")
        for r in rows:
            print(f"  {args.vs}={r['value']:<8} predicted {fmt_seconds(r['predicted']):>9s}   measured "
                  f"{fmt_seconds(r['measured']):>9s}   measured/predicted {r['ratio']:.2f}")
        if args.plot:
            print(f"wrote {args.plot}")
    return 0


def _plan_runner(args, hw):
    from ..api import derive
    from ..binding import parse_dims
    from ..device.measure import measure_plan
    text = read_program(args.target)
    dims = parse_dims(args.dims)

    def run_at(value, steps):
        d = dict(dims) if value is None else {**dims, args.vs: value}
        plan = derive(text, args.mesh, d, hw, overlap=not args.no_overlap, moves=args.moves or "auto",
                      efficiency=args.efficiency)
        refuse_unused_dims(dims, plan.size_names)
        return measure_plan(plan, runs=args.runs, steps=steps)
    return run_at, dims, f"{text.strip()}  ({'mesh ' + args.mesh if args.mesh else 'one device'}, {hw.name})"


def _model_runner(args, hw):
    from ..device.stack import measure_model
    from ..models.config import load_model_config
    if sum(map(bool, (args.decode, args.prefill, args.train))) != 1:
        raise UsageError("measure a model with one of --decode, --prefill or --train")
    mode = "decode" if args.decode else "prefill" if args.prefill else "train"
    if args.batch is None and mode == "decode":
        raise UsageError("--decode needs --batch (sequences)")
    cfg = load_model_config(args.target)
    batch = args.batch or 1
    seq, chips, dtype = args.seq or 4096, args.chips or 1, args.dtype or "bf16"
    if args.vs and args.vs not in ("batch", "seq"):
        raise UsageError(f"--vs {args.vs}: a model's sweep is over batch or seq")

    def run_at(value, steps):
        b, s = batch, seq
        if value is not None:
            b, s = (value, s) if args.vs == "batch" else (b, value)
        return measure_model(cfg, hw, mode=mode, batch=b, seq=s, chips=chips, dtype=dtype,
                             kv_dtype=args.kv_dtype, layers=args.layers, runs=args.runs, steps=steps,
                             efficiency=args.efficiency)
    return run_at, {"batch": batch, "seq": seq}, f"{cfg.name} {mode} on {chips} device(s), {hw.name}"


def _print_measurement(m, hw) -> None:
    w = m.what
    if w["kind"] == "program":
        print(f"expression: {w['expression']}")
        print(f"mesh: {w['mesh'] or '(none: one device)'}   hardware: {hw.name}   device: {m.device.describe()}")
    else:
        print(f"model: {w['model']} {w['mode']}, batch {w['batch']}, context {w['seq']}, {w['layers']} of "
              f"{w['of_layers']} layers and the unembedding, random {w['dtype']} weights")
        print(f"mesh: {w['mesh']}   hardware: {hw.name}   device: {m.device.describe()}")
    t = m.timing
    at = "at the preset's achieved figures, " if m.achieved else ""
    print(f"predicted {fmt_seconds(m.predicted)} ({at}overlap: {m.policy}; every step in turn "
          f"{fmt_seconds(m.serial)})   "
          f"measured {fmt_seconds(t.median)} ({t.describe()}, jit, after warm-up)   "
          f"measured/predicted {m.ratio:.2f}")
    if m.steps:
        print("step by step (each alone, on its own inputs):")
        width = min(64, max(len(s.signature) for s in m.steps))
        for i, s in enumerate(m.steps, 1):
            ratio = (f"x{s.ratio:.2f}" if s.ratio is not None else
                     "(run as the identity)" if s.identity else "(predicted free)")
            print(f"  {i:2d}. {s.signature:{width}s}  predicted {fmt_seconds(s.predicted or 0):>9s}   measured "
                  f"{fmt_seconds(s.timing.median):>9s}   {ratio}")
        worst = m.worst
        if worst is not None:
            print(f"worst step: {worst.signature} (measured/predicted {worst.ratio:.2f})")
