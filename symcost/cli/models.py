"""``symcost model``: a model's counts (parameters, KV cache, FLOPs), and the router of its modes: serving
(``--decode``, ``--prefill``, ``--frontier``: :mod:`symcost.cli.serve`, also ``symcost serve``) and training
(``--train``: :mod:`symcost.cli.train`, its search :mod:`symcost.cli.run_search`; also ``symcost train``,
:mod:`symcost.cli.training`)."""
from __future__ import annotations

import json
from pathlib import Path

from .. import dtypes
from ..errors import UsageError
from . import model_options, run_search, serve, train
from .options import read_program


def register(sub):
    m = sub.add_parser("model", help="transformer and inference cost models (Parts 4, 7, 8)")
    m.add_argument("--list", action="store_true", help="list the presets")
    model_options.add_arguments(m)
    m.set_defaults(handler=cmd_model)


def cmd_model(args) -> int:
    from ..models.config import load_model_config
    if getattr(args, "list", False):
        if args.name:
            raise UsageError(f"--list lists every preset: drop {args.name} (symcost model {args.name} shows that one)")
        return _list(args)
    model_options.checked(args)
    if not args.program:          # --program names what it leaves out itself
        model_options.unread(args)
    cfg = load_model_config(args.name)
    dtype = dtypes.canonical(args.dtype)
    if args.program:
        return _program(args, cfg, dtype)
    _check_modes(args)
    out = _counts(args, cfg, dtype)
    hw = None
    if serve.wanted(args) or args.train or args.hw:      # --hw alone: the chip's critical batch
        hw = model_options.need_hw(args)
        out.update(_hardware(args, cfg, hw, dtype))
    if serve.wanted(args):
        out.update(serve.answer(args, cfg, hw, dtype))
    if args.train:
        out.update(_train(args, cfg, hw, dtype))
    answers = [out[k] for k in ("decode", "prefill", "train") if k in out]
    answers += [out["train"]["strategy"]] if "strategy" in out.get("train", {}) else []
    if answers:
        out["fits"] = all(a["fits"] for a in answers)
    if args.json:
        print(json.dumps(out, indent=2, default=float))
    else:
        _print(args, cfg, hw, out, dtype)
    if any(a.get("complete") is False for a in answers):
        return 130      # a search stopped by Ctrl-C: the best it found so far is shown
    return 0 if out.get("fits", True) else 1


def _list(args) -> int:
    """The presets: names alone with --json (a list), else each with its shape and parameters, as
    ``symcost hardware`` lists chips."""
    from ..models.config import load_model_config, model_presets
    from ..models.transformer import param_counts
    if args.json:
        print(json.dumps(list(model_presets())))
        return 0
    for n in model_presets():
        cfg = load_model_config(n)
        p = param_counts(cfg)
        active = f", {_count(p['active'])} active" if p["active"] != p["total"] else ""
        moe = f", {cfg.E} experts ({cfg.k} a token)" if cfg.is_moe else ""
        print(f"{n:14s} {_count(p['total'])} parameters{active}: {cfg.L} layers of width {cfg.D}, "
              f"{cfg.N} heads ({cfg.K} key-value){moe}")
    return 0


def _count(n: float) -> str:
    """A parameter count as people write it: 8.03 B, 1.01 T."""
    return f"{n / 1e12:.3g} T" if n >= 1e12 else f"{n / 1e9:.3g} B"


def _check_modes(args) -> None:
    """Flags that only mean something together."""
    if args.search and not (args.train or args.decode or args.prefill):
        raise UsageError("--search chooses a training run (--train) or how to serve (--decode or --prefill)")
    if args.search and args.train and serve.wanted(args):
        raise UsageError("--search chooses one thing: a training run (--train) or how to serve (--decode or "
                         "--prefill)")
    if args.vs and not (args.train and args.search):
        raise UsageError("--vs chips compares the best training run on each chip budget: give --train --search")


def _counts(args, cfg, dtype: str) -> dict:
    from ..models.transformer import param_counts
    from ..models.counts import flops_per_token, kv_bytes_per_token
    params = param_counts(cfg)
    fpt = flops_per_token(cfg, seq=args.seq)
    return {"name": cfg.name, "config": cfg.as_dict(),
            "params": {k: float(params[k]) for k in ("total", "active", "mlp", "attention", "embedding")},
            "kv_bytes_per_token": float(kv_bytes_per_token(cfg, model_options.kv_dtype(args) or dtype)),
            "flops_per_token": {"train": fpt["train"], "inference": fpt["inference"]}, "dtype": dtype}


def _hardware(args, cfg, hw, dtype: str) -> dict:
    """The chip, and the batch above which decode matmuls are compute-bound on it."""
    from ..models.estimates import critical_batch
    if cfg.is_moe:   # each routed expert sees B k / E of the batch's tokens
        from ..models.moe import decode_critical_batch
        crit = decode_critical_batch(cfg, hw, dtype, args.compute_dtype)
    else:
        crit = critical_batch(hw, dtype, args.compute_dtype)
    return {"hardware": hw.name, "critical_batch": crit}


def _train(args, cfg, hw, dtype: str) -> dict:
    """A training run: chosen (--search), or priced as launched, with stated defaults for the knobs left
    unset (one model whatever flags are given)."""
    if args.search:
        return run_search.answer(args, cfg, hw)
    t = train.execute(args, cfg, hw)
    if args.strategy:
        t["strategy"] = _strategy_check(args, cfg, hw)
    return {"train": t}


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
                              kv_dtype=dtypes.canonical(args.kv_dtype) if args.kv_dtype else None,
                              elementwise=args.elementwise)
    if args.json:
        print(json.dumps({"name": cfg.name, "program": text, "sizes": ranked}, indent=2))
    else:
        print(text, end="")
    return 0


def _print(args, cfg, hw, out: dict, dtype: str) -> None:
    _print_counts(args, cfg, hw, out, dtype)
    serve.show(args, cfg, hw, out)
    t = out.get("train")
    if t is None:
        return
    if "searched" in t:
        run_search.show(t, hw, cfg)
        return
    train.show(t, hw, experts=cfg.E if cfg.is_moe else 0)
    if "strategy" in t:
        _show_strategy(args, hw, t["strategy"])


def _print_counts(args, cfg, hw, out: dict, dtype: str) -> None:
    from ..printers.text import fmt_bytes
    params, fpt = out["params"], out["flops_per_token"]
    print(f"{cfg.name}: L={cfg.L} D={cfg.D} F={cfg.F} N={cfg.N} K={cfg.K} H={cfg.H} V={cfg.V}"
          + (f" E={cfg.E} k={cfg.k}" if cfg.is_moe else "")
          + (f" F_expert={cfg.F_expert}" if cfg.is_moe and cfg.F_expert not in (None, cfg.F) else "")
          + (f" shared={cfg.shared_experts}" if cfg.is_moe and cfg.shared_experts else "")
          + (f" dense_layers={cfg.dense_layers}" if cfg.is_moe and cfg.dense_layers else "")
          + (f"; latent attention: kv_lora={cfg.kv_lora} q_lora={cfg.q_lora} rope_dim={cfg.rope_dim}"
             if cfg.is_mla else ""))
    if cfg.notes and Path(cfg.source).is_file():    # what reading the user's config.json assumed (a preset's
        print(f"  read from {cfg.source}: {cfg.notes}")   # source is where its figures come from)
    print(f"  parameters: {params['total']:.4g} total, {params['active']:.4g} active "
          f"(MLP {params['mlp']:.4g}, attention {params['attention']:.4g}, embeddings {params['embedding']:.4g})")
    print(f"  weights in {dtype}: {fmt_bytes(params['total'] * dtypes.nbytes(dtype))}")
    print(f"  KV cache per token: {int(out['kv_bytes_per_token']):,} bytes")
    print(f"  FLOPs per token at {args.seq} context: {fpt['inference']:.4g} forward, {fpt['train']:.4g} training")
    if "critical_batch" in out:
        print(f"  decode matmuls compute-bound above B = {out['critical_batch']:.0f} on {hw.name}"
              + (f" (each routed expert sees B k / E = B x {cfg.k}/{cfg.E} tokens)" if cfg.is_moe else ""))


def _show_strategy(args, hw, s: dict) -> None:
    from ..printers.text import fmt_bytes, fmt_seconds
    mesh = ",".join(f"{k}={v}" for k, v in s["mesh"].items())
    dims = ", ".join(f"{k}={v:,}" for k, v in s["dims"].items())
    print(f"    strategy {args.strategy} on {mesh}: its program alone at {dims} (B the batch's tokens), with its "
          f"backward pass (the run above keeps its own TP, PP and DP): T_math "
          f"{fmt_seconds(s['t_math'])}, T_comms {fmt_seconds(s['t_comms'])}, step {fmt_seconds(s['t_step'])}"
          f" -> {'compute' if s['compute_bound'] else 'communication'}-bound")
    if s["memory_bytes"] is not None:
        acts = s.get("activation_bytes", 0.0)
        held = s["memory_bytes"] - acts
        names = ", ".join(s["params"]) or "none declared"
        print(f"    its memory per {train.device_word(hw)}: its parameters ({names}), their gradients and optimizer "
              f"state {fmt_bytes(held)}, the activations its backward pass keeps {fmt_bytes(acts)}; "
              f"total {fmt_bytes(s['memory_bytes'])}" + ("" if s["fits"] else f" -- DOES NOT FIT in "
                                                         f"{fmt_bytes(hw.hbm_bytes)}"))


def _strategy_check(args, cfg, hw):
    """Derive the strategy on the model's shapes: per-layer forward + backward times on the mesh."""
    from ..api import derive
    from ..notation import Declaration, parse
    from ..optimize import optimize_plan
    text = read_program(args.strategy)
    # the batch in tokens, however the run was given it (--batch, or --sequences of --seq)
    dims = {"B": train.sequences_of(args) * args.seq, "D": cfg.D, "F": cfg.F}
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
    acts = dict(plan.memory).get("activations")
    acts = plan.evaluate(acts) if acts is not None else 0.0
    params = [t.name for st in parse(text).statements if isinstance(st, Declaration) for t in st.tensors]
    used = {d for lay in plan.layouts for d in lay.dims}
    return {"mesh": {a.name: a.size for a in plan.mesh.axes}, "dims": {k: v for k, v in dims.items() if k in used},
            "params": params, "t_math": t_math, "t_comms": t_comms,
            "t_step": t_step, "compute_bound": t_math >= t_comms, "memory_bytes": plan.memory_bytes,
            "activation_bytes": acts or 0.0,
            "fits": plan.fits is not False}
