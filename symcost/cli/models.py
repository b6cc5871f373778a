"""``symcost model``: transformer and inference cost models (book Parts 4, 7 and 8)."""
from __future__ import annotations

import json

from .. import dtypes
from ..errors import UsageError
from . import train
from .options import read_program


def register(sub):
    m = sub.add_parser("model", help="transformer and inference cost models (Parts 4, 7, 8)")
    m.add_argument("name", metavar="NAME|config.json", nargs="?",
                   help="a preset (see --list) or a HuggingFace config.json")
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
    m.add_argument("--batch", type=float, help="sequences (decode, prefill) or tokens per batch (train)")
    m.add_argument("--seq", type=int, default=8192, help="context length (default 8192)")
    m.add_argument("--tokens", type=float, help="training tokens (for the days of training)")
    m.add_argument("--mfu", type=float, help="model FLOPs utilisation, in (0, 1] (default: prefill from the "
                   "preset's efficiency data, else 0.4; training 0.4)")
    m.add_argument("--checkpoints-per-layer", type=int, metavar="K",
                   help="K saved tensors a layer (default 1; with the run knobs: K of [B, D], book Part 6)")
    m.add_argument("--latency", metavar="TIME",
                   help="with --decode --search: the longest decode step allowed; with --prefill --search: the longest "
                        "time to the first token (40ms, 0.04, 500us)")
    m.add_argument("--program", action="store_true",
                   help="print one layer as a program, nothing sharded, with a rank line of the model's sizes "
                        "(--batch sequences, default 1, of --seq tokens): what `symcost search` takes")
    m.add_argument("--json", action="store_true")
    train.add_arguments(m)
    m.set_defaults(handler=cmd_model)


def _seconds(text: str) -> float:
    """A duration as the user writes it: 40ms, 0.04, 0.04s, 500us."""
    import re
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(s|ms|us|µs)?\s*", text)
    if not m:
        raise UsageError(f"--latency {text!r}: write a duration such as 40ms, 0.04 or 500us")
    return float(m.group(1)) * {"s": 1.0, None: 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}[m.group(2)]


def _search_serving(args, cfg, hw, dtype, phase: str = "decode") -> dict:
    from ..models.serving_search import search_serving
    if args.batch or args.mesh:
        raise UsageError(f"--{phase} --search chooses the mesh and the batch itself; drop --batch and --mesh")
    if args.mfu is not None and phase == "prefill":
        raise UsageError("--prefill --search prices the derived layer program on each mesh; drop --mfu")
    if args.top < 1:
        raise UsageError(f"--top must be at least 1, not {args.top}")
    latency = _seconds(args.latency) if args.latency is not None else None
    res = search_serving(cfg, hw, args.chips, args.seq, latency=latency, top=args.top, dtype=dtype,
                         kv_dtype=dtypes.canonical(args.kv_dtype) if args.kv_dtype else None, phase=phase)
    res["fits"] = bool(res["runs"])
    return res


def _contract_serving(res: dict) -> dict:
    """The ``search`` object of ``model --decode/--prefill --search --json`` (DESIGN's keys; a step's MFU is
    its matmul time at the peak over its step)."""
    return {"candidates": res["searched"], "feasible": res["feasible"], "seconds": res["search_seconds"],
            "top": [{"mesh": r["mesh"], "batch": r["batch"], "step_time": r["step_time"],
                     "mfu": r["t_math"] / r["step_time"], "memory_bytes": r["memory_bytes"],
                     "compute_bound": r["bound"] == "math", "dominant": r["bound"]} for r in res["runs"]]}


def _show_serving(res: dict, args, hw) -> None:
    from ..printers.text import fmt_bytes, fmt_seconds
    prefill = res["phase"] == "prefill"
    target = (f", {'a first token in' if prefill else 'steps of'} at most {fmt_seconds(res['latency'])}"
              if res["latency"] else "")
    what = f"prefill of {args.seq}-token prompts" if prefill else f"decode, context {args.seq}"
    print(f"  serving search on {args.chips} x {hw.name}, {what}{target}: priced "
          f"{res['searched']} (mesh, batch) pairs over {len(res['meshes'])} meshes in "
          f"{fmt_seconds(res['search_seconds'])}; {res['feasible']} qualify")
    if not res["runs"]:
        print("    NONE QUALIFIES: more chips, a shorter context, a smaller --dtype"
              + (" or a longer --latency" if res["latency"] else ""))
        return
    for i, r in enumerate(res["runs"], 1):
        copies = f", KV cache x{r['kv_copies']}" if r["kv_copies"] > 1 else ""
        step = "first token" if prefill else "step"
        print(f"    {i}. mesh {r['mesh']}, batch {r['batch']}: {step} {fmt_seconds(r['step_time'])}, "
              f"{r['tokens_per_s_per_chip']:.0f} tokens/s per chip, {r['bound']}-bound, "
              f"{fmt_bytes(r['memory_bytes'])}{copies}")


def _need_hw(args):
    if not args.hw:
        raise UsageError("this needs --hw (a hardware preset, e.g. tpu-v5e)")
    from ..hardware import hardware
    return hardware(args.hw)


def cmd_model(args) -> int:
    from ..models.config import load_model_config, model_presets
    from ..models.inference import Serving, critical_batch, train_estimate
    from ..models.transformer import flops_per_token, kv_bytes_per_token, param_counts

    if args.list:
        if args.json:
            print(json.dumps(list(model_presets())))
            return 0
        for n in model_presets():
            print(n)
        return 0
    if args.name is None:
        raise UsageError("name a model: a preset (symcost model --list) or a HuggingFace config.json")
    if args.mfu is not None and not 0 < args.mfu <= 1:
        raise UsageError(f"--mfu is a fraction of the peak FLOP/s, in (0, 1], not {args.mfu:g}")
    if args.batch is not None and args.batch <= 0:
        raise UsageError(f"--batch must be positive, not {args.batch:g}")
    cfg = load_model_config(args.name)
    dtype = dtypes.canonical(args.dtype)
    if args.program:
        return _program(args, cfg, dtype)
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
        if cfg.is_moe:   # each routed expert sees B k / E of the batch's tokens
            from ..models.moe import decode_critical_batch
            out["critical_batch"] = decode_critical_batch(cfg, hw, dtype, args.compute_dtype)
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
    if args.decode and args.search:
        out["decode"] = _search_serving(args, cfg, hw, dtype)
        out["search"] = _contract_serving(out["decode"])
    elif args.decode:
        if not args.batch:
            raise UsageError("--decode needs --batch (sequences)")
        out["decode"] = serving.decode(int(args.batch), args.seq)
    if args.prefill and args.search:
        if args.decode:
            raise UsageError("--search chooses one phase: --decode or --prefill, not both")
        out["prefill"] = _search_serving(args, cfg, hw, dtype, "prefill")
        out["search"] = _contract_serving(out["prefill"])
    elif args.prefill:
        out["prefill"] = serving.prefill(args.seq, args.mfu, batch=int(args.batch or 1))
    if args.frontier:
        out["frontier"] = serving.frontier(args.seq)
    if args.train and args.search:
        out["train"] = train.search(args, cfg, hw)
        out["search"] = train.contract(out["train"])
    elif args.search and not (args.decode or args.prefill):
        raise UsageError("--search chooses a training run (--train) or how to serve (--decode or --prefill)")
    elif args.train and train.wanted(args):
        out["train"] = train.execute(args, cfg, hw)
    elif args.train:
        if not args.batch:
            raise UsageError("--train needs --batch (tokens per batch)")
        out["train"] = train_estimate(cfg, hw, args.chips, args.batch, args.tokens, args.mfu or 0.4,
                                      seq=args.seq,
                                      checkpoints_per_layer=args.checkpoints_per_layer or 1,
                                      param_dtype=dtype)
        if args.strategy:
            out["train"]["strategy"] = _strategy_check(args, cfg, hw)
    answers = [out[k] for k in ("decode", "prefill", "train") if k in out]
    answers += [out["train"]["strategy"]] if "strategy" in out.get("train", {}) else []
    if answers:
        out["fits"] = all(a["fits"] for a in answers)
    if args.json:
        print(json.dumps(out, indent=2, default=float))
        return 0 if out.get("fits", True) else 1
    _print(args, cfg, hw, out, params, kv, fpt, dtype)
    return 0 if out.get("fits", True) else 1


def _program(args, cfg, dtype: str) -> int:
    """``model NAME --program``: the layer program with every open tensor left for the search to shard, and
    its sizes as ranking sizes (``rank``), so ``symcost search`` needs no ``--dims``."""
    from ..models.transformer import open_layer
    if args.train or args.decode or args.prefill or args.frontier or args.search:
        raise UsageError("--program prints the layer for `symcost search`; drop --train, --decode, --prefill, "
                         "--frontier and --search")
    if args.mesh or args.strategy:
        raise UsageError("--program prints the layer with nothing sharded: `symcost search` chooses the sharding; "
                         "drop --mesh and --strategy")
    if args.batch is not None and args.batch != int(args.batch):
        raise UsageError(f"--program takes --batch in whole sequences, not {args.batch:g}")
    text, ranked = open_layer(cfg, batch=int(args.batch or 1), seq=args.seq, dtype=dtype,
                              kv_dtype=dtypes.canonical(args.kv_dtype) if args.kv_dtype else None)
    if args.json:
        print(json.dumps({"name": cfg.name, "program": text, "sizes": ranked}, indent=2))
    else:
        print(text, end="")
    return 0


def _no_fit(what: str, need: float, have: float) -> str:
    from ..printers.text import fmt_bytes
    return (f"    DOES NOT FIT: {what} take {fmt_bytes(need)}, the slice has {fmt_bytes(have)} of HBM "
            f"(any time above is what it would take if it fit, not an answer)")


def _print(args, cfg, hw, out, params, kv, fpt, dtype) -> None:
    from ..printers.text import fmt_bytes, fmt_seconds
    print(f"{cfg.name}: L={cfg.L} D={cfg.D} F={cfg.F} N={cfg.N} K={cfg.K} H={cfg.H} V={cfg.V}"
          + (f" E={cfg.E} k={cfg.k}" if cfg.is_moe else "")
          + (f"; latent attention: kv_lora={cfg.kv_lora} q_lora={cfg.q_lora} rope_dim={cfg.rope_dim}"
             if cfg.is_mla else ""))
    print(f"  parameters: {params['total']:.4g} total, {params['active']:.4g} active "
          f"(MLP {params['mlp']:.4g}, attention {params['attention']:.4g}, embeddings {params['embedding']:.4g})")
    print(f"  weights in {dtype}: {fmt_bytes(params['total'] * dtypes.nbytes(dtype))}")
    print(f"  KV cache per token: {kv:,} bytes")
    print(f"  FLOPs per token at {args.seq} context: {fpt['inference']:.4g} forward, {fpt['train']:.4g} training")
    if "critical_batch" in out:
        print(f"  decode matmuls compute-bound above B = {out['critical_batch']:.0f} on {hw.name}"
              + (f" (each routed expert sees B k / E = B x {cfg.k}/{cfg.E} tokens)" if cfg.is_moe else ""))
    have = args.chips * hw.hbm_bytes if hw else 0
    if "decode" in out and "searched" in out["decode"]:
        _show_serving(out["decode"], args, hw)
    elif "decode" in out:
        d = out["decode"]
        print(f"  decode on {args.chips} x {hw.name}, batch {int(args.batch)}, context {args.seq}:")
        print(f"    step {fmt_seconds(d['step_time'])} (T_hbm {fmt_seconds(d['t_hbm'])}, T_math "
              f"{fmt_seconds(d['t_math'])}, T_comms {fmt_seconds(d['t_comms'])})")
        if d.get("kv_copies", 1) > 1:
            print(f"    the KV cache is held {d['kv_copies']} times: one latent serves every head, so splitting "
                  f"the heads copies it (--mesh Y=..,Z=.. splits the cache's batch over Z)")
        if d["fits"]:
            print(f"    {d['tokens_per_s']:.0f} tokens/s, {d['tokens_per_s_per_chip']:.0f} per chip; memory "
                  f"{fmt_bytes(d['memory_bytes'])} of {fmt_bytes(have)}; largest batch {d['max_batch']}")
        else:
            print(_no_fit("the weights and KV caches", d["memory_bytes"], have)
                  + (f"; the largest batch that fits is {d['max_batch']}" if d["max_batch"] else
                     "; the weights alone do not fit: more chips or a smaller --dtype"))
    if "prefill" in out and "searched" in out["prefill"]:
        _show_serving(out["prefill"], args, hw)
    elif "prefill" in out:
        p = out["prefill"]
        print(f"  prefill of {p['batch']} x {args.seq} tokens at {p['mfu']:.0%} MFU ({p['mfu_source']}): "
              f"{fmt_seconds(p['seconds'])}; no faster than the weights stream from HBM, {fmt_seconds(p['hbm_floor'])}")
        if not p["fits"]:
            print(_no_fit("the weights and KV caches", p["memory_bytes"], have))
    if "frontier" in out:
        print(f"  {'batch':>6} {'step':>10} {'tokens/s':>10} {'per chip':>9} {'memory':>9}")
        for r in out["frontier"]:
            print(f"  {r['batch']:>6} {fmt_seconds(r['step_time']):>10} {r['tokens_per_s']:>10.0f} "
                  f"{r['tokens_per_s_per_chip']:>9.1f} {fmt_bytes(r['memory_bytes']):>9}")
    if "train" in out and "searched" in out["train"]:
        train.show_search(out["train"], hw)
    elif "train" in out and "step_time" in out["train"]:
        train.show(out["train"], hw)
    elif "train" in out:
        t = out["train"]
        if t["seconds"] is not None:
            print(f"  training {args.tokens:.3g} tokens: {t['flops_total']:.3g} FLOPs, "
                  f"{t['seconds'] / 86400:.1f} days on {args.chips} chips at {args.mfu or 0.4:.0%} MFU")
        else:
            print(f"  training on {args.chips} x {hw.name} (--tokens for the days it takes):")
        mb = t["memory_bytes"]
        print(f"    memory: params {fmt_bytes(mb['params'])} in {dtype}, optimizer {fmt_bytes(mb['optimizer'])}, "
              f"activations {fmt_bytes(mb['activations'])}; at least {t['min_chips']} chips")
        if not t["fits"]:
            print(_no_fit("the parameters, optimizer state and activations", mb["total"], have))
        if "strategy" in t:
            s = t["strategy"]
            mesh = ",".join(f"{k}={v}" for k, v in s["mesh"].items())
            print(f"    strategy {args.strategy} on {mesh} (derived with its backward pass, per layer): T_math "
                  f"{fmt_seconds(s['t_math'])}, T_comms {fmt_seconds(s['t_comms'])}, step {fmt_seconds(s['t_step'])}"
                  f" -> {'compute' if s['compute_bound'] else 'communication'}-bound")
            if s["memory_bytes"] is not None:
                print(f"    its memory per chip (one layer's parameters, gradients, optimizer): "
                      f"{fmt_bytes(s['memory_bytes'])}" + ("" if s["fits"] else f" -- DOES NOT FIT in "
                                                               f"{fmt_bytes(hw.hbm_bytes)}"))


def _strategy_check(args, cfg, hw):
    """Derive the strategy on the model's shapes: per-layer forward + backward times on the mesh."""
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
    if split:   # derived at that mesh, as derive --backward would: placement, latency floors and all
        mesh = ",".join(f"{a.name}={split.get(a.name, a.size)}" + (f":{a.links}" if a.links != 1 else "")
                        + (f":{a.kind}" if a.kind_written else "") for a in plan.mesh.axes)
        plan = derive(text, mesh=mesh, dims=dims, hw=hw, backward=True)
    t_math, t_comms, t_step = (plan.evaluate(e) for e in (plan.t_math, plan.t_comms, plan.t_step))
    if None in (t_math, t_comms, t_step):
        free = sorted({str(s) for e in (plan.t_math, plan.t_comms, plan.t_step)
                       for s in e.xreplace(plan.bindings()).free_symbols})
        raise UsageError(f"the strategy's costs keep unbound symbols ({', '.join(free)}); "
                         f"bind them with --mesh (axis sizes) or in the program (rank statements)")
    return {"mesh": {a.name: a.size for a in plan.mesh.axes}, "t_math": t_math, "t_comms": t_comms,
            "t_step": t_step, "compute_bound": t_math >= t_comms, "memory_bytes": plan.memory_bytes,
            "fits": plan.fits is not False}
