"""``symcost model``: transformer and inference cost models (book Parts 4, 7 and 8)."""
from __future__ import annotations

import json

from .. import dtypes
from ..errors import UsageError
from .options import read_program


def register(sub):
    m = sub.add_parser("model", help="transformer and inference cost models (Parts 4, 7, 8)")
    m.add_argument("name", metavar="NAME|config.json", help="a preset (see --list) or a HuggingFace config.json")
    m.add_argument("--list", action="store_true", help="list the presets")
    m.add_argument("--dtype", default="bf16", help="weights and KV cache dtype (the book's 'int8 everything')")
    m.add_argument("--kv-dtype", help="KV cache dtype (default: --dtype)")
    m.add_argument("--compute-dtype", help="dtype the FLOPs run in (default: bf16, or int8 for int8 x int8)")
    m.add_argument("--hw", help="hardware preset")
    m.add_argument("--chips", type=int, default=1, help="chips in the slice")
    m.add_argument("--mesh", help="mesh for the layer program (default: heads over Y, the rest over Z)")
    m.add_argument("--strategy", help="a training strategy program (derivations/*.sc) to check")
    m.add_argument("--train", action="store_true")
    m.add_argument("--decode", action="store_true")
    m.add_argument("--prefill", action="store_true")
    m.add_argument("--frontier", action="store_true", help="latency / throughput by batch size")
    m.add_argument("--batch", type=float, help="sequences (decode) or tokens per batch (train)")
    m.add_argument("--seq", type=int, default=8192, help="context length (default 8192)")
    m.add_argument("--tokens", type=float, help="training tokens")
    m.add_argument("--mfu", type=float, default=0.4)
    m.add_argument("--checkpoints-per-layer", type=int, default=1)
    m.add_argument("--json", action="store_true")
    m.set_defaults(handler=cmd_model)


def _need_hw(args):
    if not args.hw:
        raise UsageError("this needs --hw (a hardware preset, e.g. tpu-v5e)")
    from ..hardware import hardware
    return hardware(args.hw)


def cmd_model(args) -> int:
    from ..models.config import load_model_config, model_presets
    from ..models.inference import Serving, critical_batch, train_estimate
    from ..models.transformer import flops_per_token, kv_bytes_per_token, param_counts
    from ..printers.text import fmt_bytes, fmt_seconds

    if args.list:
        for n in model_presets():
            print(n)
        return 0
    cfg = load_model_config(args.name)
    dtype = dtypes.canonical(args.dtype)
    params = param_counts(cfg)
    kv = kv_bytes_per_token(cfg, dtypes.canonical(args.kv_dtype) or dtype)
    fpt = flops_per_token(cfg, seq=args.seq)
    out = {"name": cfg.name, "config": cfg.as_dict(),
           "params": {k: float(params[k]) for k in ("total", "active", "mlp", "attention", "embedding")},
           "kv_bytes_per_token": float(kv),
           "flops_per_token": {"train": fpt["train"], "inference": fpt["inference"]},
           "dtype": dtype}
    hw = None
    if args.decode or args.prefill or args.frontier or args.train:
        hw = _need_hw(args)
        out["hardware"] = hw.name
        out["critical_batch"] = critical_batch(hw, dtype, args.compute_dtype)
    serving = None
    if args.decode or args.prefill or args.frontier:
        sharding = None
        if args.mesh:  # the first axis splits the heads, the rest the KV cache's batch; F over all
            from ..mesh import parse_mesh
            from ..models.transformer import Sharding
            names = parse_mesh(args.mesh).names
            sharding = Sharding(model=names, heads=names[:1], kv_batch=names[1:])
        serving = Serving(cfg, hw, chips=args.chips, dtype=dtype, kv_dtype=args.kv_dtype,
                          compute_dtype=args.compute_dtype, mesh=args.mesh, sharding=sharding)
    if args.decode:
        if not args.batch:
            raise UsageError("--decode needs --batch (sequences)")
        out["decode"] = serving.decode(int(args.batch), args.seq)
    if args.prefill:
        out["prefill"] = serving.prefill(args.seq, args.mfu)
    if args.frontier:
        out["frontier"] = serving.frontier(args.seq)
    if args.train:
        if not args.batch or not args.tokens:
            raise UsageError("--train needs --batch (tokens per batch) and --tokens (training tokens)")
        out["train"] = train_estimate(cfg, hw, args.chips, args.batch, args.tokens, args.mfu, seq=args.seq,
                                      checkpoints_per_layer=args.checkpoints_per_layer, param_dtype="bf16")
        if args.strategy:
            out["train"]["strategy"] = _strategy_check(args, cfg, hw)
    if args.json:
        print(json.dumps(out, indent=2, default=float))
        return 0
    print(f"{cfg.name}: L={cfg.L} D={cfg.D} F={cfg.F} N={cfg.N} K={cfg.K} H={cfg.H} V={cfg.V}"
          + (f" E={cfg.E} k={cfg.k}" if cfg.is_moe else ""))
    print(f"  parameters: {params['total']:.4g} total, {params['active']:.4g} active "
          f"(MLP {params['mlp']:.4g}, attention {params['attention']:.4g}, embeddings {params['embedding']:.4g})")
    print(f"  weights in {dtype}: {fmt_bytes(params['total'] * dtypes.nbytes(dtype))}")
    print(f"  KV cache per token: {kv:,} bytes")
    print(f"  FLOPs per token at {args.seq} context: {fpt['inference']:.4g} forward, {fpt['train']:.4g} training")
    if "critical_batch" in out:
        print(f"  decode matmuls compute-bound above B = {out['critical_batch']:.0f} on {hw.name}")
    if "decode" in out:
        d = out["decode"]
        print(f"  decode on {args.chips} x {hw.name}, batch {int(args.batch)}, context {args.seq}:")
        print(f"    step {fmt_seconds(d['step_time'])} (T_hbm {fmt_seconds(d['t_hbm'])}, T_math "
              f"{fmt_seconds(d['t_math'])}, T_comms {fmt_seconds(d['t_comms'])})")
        print(f"    {d['tokens_per_s']:.0f} tokens/s, {d['tokens_per_s_per_chip']:.0f} per chip; memory "
              f"{fmt_bytes(d['memory_bytes'])} of {fmt_bytes(args.chips * hw.hbm_bytes)}; largest batch "
              f"{d['max_batch']}")
    if "prefill" in out:
        print(f"  prefill of {args.seq} tokens at {args.mfu:.0%} MFU: {fmt_seconds(out['prefill']['seconds'])}")
    if "frontier" in out:
        print(f"  {'batch':>6} {'step':>10} {'tokens/s':>10} {'per chip':>9} {'memory':>9}")
        for r in out["frontier"]:
            print(f"  {r['batch']:>6} {fmt_seconds(r['step_time']):>10} {r['tokens_per_s']:>10.0f} "
                  f"{r['tokens_per_s_per_chip']:>9.1f} {fmt_bytes(r['memory_bytes']):>9}")
    if "train" in out:
        t = out["train"]
        print(f"  training {args.tokens:.3g} tokens: {t['flops_total']:.3g} FLOPs, "
              f"{t['seconds'] / 86400:.1f} days on {args.chips} chips at {args.mfu:.0%} MFU")
        mb = t["memory_bytes"]
        print(f"    memory: params {fmt_bytes(mb['params'])}, optimizer {fmt_bytes(mb['optimizer'])}, "
              f"activations {fmt_bytes(mb['activations'])}; at least {t['min_chips']} chips")
        if "strategy" in t:
            s = t["strategy"]
            mesh = ",".join(f"{k}={v}" for k, v in s["mesh"].items())
            print(f"    strategy {args.strategy} on {mesh}: per layer T_math {fmt_seconds(s['t_math'])}, T_comms "
                  f"{fmt_seconds(s['t_comms'])} -> {'compute' if s['compute_bound'] else 'communication'}-bound")
    return 0


def _strategy_check(args, cfg, hw):
    """Derive the strategy on the model's shapes: per-layer forward + backward times on the mesh."""
    from .. import symbols
    from ..api import derive
    from ..optimize import optimize_plan
    text = read_program(args.strategy)
    dims = {"B": int(args.batch), "D": cfg.D, "F": cfg.F}
    plan = derive(text, mesh=args.mesh, dims=dims, hw=hw, backward=True)
    free = [a.name for a in plan.mesh.axes if a.size is None]
    split = {}
    if len(free) == 1:      # all the chips on the strategy's one axis
        split = {free[0]: args.chips}
    elif len(free) == 2:    # the split that balances the two axes' traffic (X_opt), as an integer split
        r = optimize_plan(plan, tuple(free), args.chips)
        if not r["chosen"]:
            raise UsageError("could not choose a split of the chips; give --mesh X=...,Y=...")
        split = {k: r["chosen"][k] for k in free}
    elif free:
        raise UsageError("give the strategy's mesh axes sizes (--mesh X=...,Y=...,Z=...)")
    subs = {symbols.axis(k): v for k, v in split.items()}
    t_math = plan.evaluate(plan.t_math.xreplace(subs))
    t_comms = plan.evaluate(plan.t_comms_bw.xreplace(subs))
    if t_math is None or t_comms is None:
        raise UsageError("the strategy's costs keep unbound symbols; bind them with --mesh")
    return {"mesh": split or {a.name: a.size for a in plan.mesh.axes}, "t_math": t_math, "t_comms": t_comms,
            "compute_bound": t_math >= t_comms}
