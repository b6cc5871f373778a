"""``symcost model --train`` with the parallelism a run is launched with (--tp, --pp, --dp, --microbatch,
--interleave, --sequences, --recompute, --seq-parallel): the iteration as Megatron-style runs execute it
(:mod:`symcost.models.execution`)."""
from __future__ import annotations

from ..errors import UsageError

#: the options that ask for the execution model
OPTIONS = ("tp", "pp", "dp", "cp", "ep", "microbatch", "interleave", "sequences", "recompute", "seq_parallel", "schedule",
           "tp_overlap", "zero", "fsdp", "attention")
# --checkpoints-per-layer also applies to the run (K saved [B, D] tensors a layer, the rest recomputed)


def add_arguments(m) -> None:
    g = m.add_argument_group("a training run as launched (with --train)")
    g.add_argument("--tp", type=int, help="tensor-parallel degree (inside the NVLink domain where it fits)")
    g.add_argument("--pp", type=int, help="pipeline stages")
    g.add_argument("--dp", type=int, help="data-parallel replicas")
    g.add_argument("--cp", type=int, help="context parallelism: each sequence split over this many ranks, "
                   "keys and values passed round a ring (inside the NVLink domain with TP where they fit)")
    g.add_argument("--ep", type=int, help="expert parallelism (MoE models): the routed experts split over this "
                   "many of the data-parallel replicas, tokens sent to them and back with AllToAlls")
    g.add_argument("--microbatch", type=int, help="sequences per microbatch (default 1)")
    g.add_argument("--interleave", type=int, help="model chunks per pipeline stage (interleaved 1F1B)")
    g.add_argument("--sequences", type=int, help="sequences per iteration (instead of --batch tokens)")
    g.add_argument("--recompute", metavar="POLICY",
                   help="activation recomputation: none, selective (the attention core, as Megatron), full, or "
                        "a JAX policy: everything_saveable, nothing_saveable, dots_saveable, "
                        "dots_with_no_batch_dims_saveable")
    g.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="ZeRO stage over the data-parallel replicas")
    g.add_argument("--fsdp", action="store_true", help="fully sharded data parallelism (--zero 3)")
    g.add_argument("--seq-parallel", action="store_true", help="Megatron sequence parallelism over TP")
    g.add_argument("--schedule", choices=("gpipe", "1f1b", "interleaved"),
                   help="pipeline schedule (default: interleaved with --interleave > 1, else 1F1B)")
    g.add_argument("--tp-overlap", action="store_true", help="TP collectives overlapped with the matmuls")
    g.add_argument("--attention", choices=("unfused", "flash"),
                   help="the attention core: unfused (scores, softmax and dropout through HBM, as Megatron ran in "
                        "2022; the default) or flash (one fused kernel, as current stacks run)")
    g.add_argument("--search", action="store_true",
                   help="choose the run: every TP x PP x DP split of at most --chips (saying why when it leaves some "
                        "idle) with microbatch, interleave, ZeRO, recomputation and sequence parallelism, ranked by "
                        "iteration time among those that fit")
    g.add_argument("--max-cp", type=int, default=1, metavar="N",
                   help="with --search: also try context parallelism over 2, 4, ... up to N ranks (default 1: none)")
    g.add_argument("--top", type=int, default=5, help="how many --search lists: runs with --train, (mesh, batch) pairs with --decode (default 5)")


def wanted(args) -> bool:
    return any(getattr(args, k, None) not in (None, False) for k in OPTIONS)


def execute(args, cfg, hw) -> dict:
    from ..models.execution import Run
    from ..models.recompute import RECOMPUTE
    if args.recompute is not None and args.recompute not in RECOMPUTE:
        raise UsageError(f"--recompute {args.recompute!r}: choose one of {', '.join(RECOMPUTE)}")
    if args.fsdp and args.zero not in (None, 3):
        raise UsageError(f"--fsdp is --zero 3; it contradicts --zero {args.zero}")
    tp, pp, dp, cp = args.tp or 1, args.pp or 1, args.dp, args.cp or 1
    if dp is None:
        dp = max(1, args.chips // (tp * pp * cp))
    if args.chips not in (1, tp * pp * dp * cp):
        raise UsageError(f"--chips {args.chips} is not --tp {tp} x --pp {pp} x --dp {dp}"
                         + (f" x --cp {cp}" if cp > 1 else "") + f" = {tp * pp * dp * cp}")
    if args.sequences is None and not args.batch:
        raise UsageError("--train needs --sequences (per iteration) or --batch (tokens per iteration)")
    sequences = args.sequences if args.sequences is not None else int(args.batch // args.seq)
    run = Run(cfg, hw, tp=tp, pp=pp, dp=dp, cp=cp, ep=args.ep or 1, sequences=sequences, microbatch=args.microbatch or 1, seq=args.seq,
              interleave=args.interleave or 1, recompute=args.recompute or "none", seq_parallel=args.seq_parallel,
              schedule=args.schedule, tp_overlap=args.tp_overlap, zero=3 if args.fsdp else (args.zero or 0),
              checkpoints=args.checkpoints_per_layer, attention=args.attention or "unfused")
    rep = run.report()
    it, fl, mem = rep["iteration"], rep["flops"], rep["memory"]
    tokens = sequences * args.seq
    lines = hw.efficiency.describe({})
    iterations = args.tokens / tokens if args.tokens else None
    return {
        "step_time": it["iteration"], "mfu": rep["mfu"], "hfu": rep["hfu"], "mfu_6n": rep["mfu_6n"],
        "model_flops_per_token": {"params_only": fl["6N"] / tokens, "with_attention": fl["model"] / tokens},
        "hardware_flops_per_token": fl["hardware"] / tokens,
        "memory_bytes": {"params": mem["weights"], "gradients": mem["gradients"], "optimizer": mem["optimizer"],
                         "activations": mem["activations"], "total": mem["total"]},
        "breakdown": {k: v for k, v in it.items() if k != "iteration"},
        "schedule": rep["schedule"],
        "config": {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "cp_link": run.cp_link, "ep": run.ep, "chips": run.chips, "microbatch": run.microbatch,
                   "sequences": sequences, "seq": args.seq, "recompute": run.recompute,
                   "seq_parallel": run.seq_parallel, "attention": run.attention, "checkpoints_per_layer": run.checkpoints, "tp_overlap": run.tp_overlap, "zero": run.zero,
                   "tp_link": run.tp_link, "pp_link": run.pp_link, "dp_link": run.dp_link},
        "efficiency": "; ".join([lines[0].strip()] + [x.strip() for x in lines[1:]]),
        "efficiency_source": dict(hw.sources).get("efficiency", ""),
        "flops_total": fl["model"] * iterations if iterations else None,
        "seconds": it["iteration"] * iterations if iterations else None,
        "min_chips": run.chips,
        "fits": mem["total"] <= hw.hbm_bytes,
    }


def show(rep: dict, hw) -> None:
    from ..printers.text import fmt_bytes
    it, p, fl, sch = rep["breakdown"], rep["config"], rep["model_flops_per_token"], rep["schedule"]
    print(f"  run on {p['chips']} x {hw.name}: TP {p['tp']} ({p['tp_link']}), PP {p['pp']} ({p['pp_link']}), "
          f"DP {p['dp']}" + (f" ({p['dp_link']}" + (f", ZeRO {p['zero']}" if p["zero"] else "") + ")" if p["dp"] > 1
                             else "") + (f", CP {p['cp']} ({p['cp_link']})" if p["cp"] > 1 else "")
          + (f", EP {p['ep']}" if p["ep"] > 1 else "")
          + f"; {p['sequences']} sequences of {p['seq']}, microbatch {p['microbatch']}, "
          f"{sch['schedule']} schedule ({sch['microbatches']} microbatch{'' if sch['microbatches'] == 1 else 'es'}, "
          f"interleave {sch['interleave']}); "
          f"recompute {p['recompute']}" + (", sequence parallel" if p["seq_parallel"] else "")
          + (", flash attention" if p["attention"] == "flash" else ""))
    parts = ", ".join(f"{k.replace('_', ' ')} {it[k]:.3g}" for k in
                      ("forward", "backward", "recompute", "tp_comms", "cp_comms", "ep_comms", "head", "bubble", "p2p", "dp_comms",
                       "optimizer") if it[k])
    print(f"    iteration {rep['step_time']:.3g} s ({parts})")
    if rep["seconds"] is not None:
        print(f"    training {rep['flops_total']:.3g} model FLOPs: {rep['seconds'] / 86400:.1f} days")
    print(f"    MFU {rep['mfu']:.1%} (model FLOPs {fl['with_attention']:.4g} a token: every matmul, attention and "
          f"logits; 6N alone {fl['params_only']:.4g} = {rep['mfu_6n']:.1%}), HFU {rep['hfu']:.1%} "
          f"(with recomputation)")
    m = rep["memory_bytes"]
    print(f"    memory per GPU (first stage): weights {fmt_bytes(m['params'])}, gradients "
          f"{fmt_bytes(m['gradients'])}, optimizer {fmt_bytes(m['optimizer'])}, activations "
          f"{fmt_bytes(m['activations'])} ({sch['in_flight_microbatches']:.3g} "
          f"microbatch{'' if sch['in_flight_microbatches'] == 1 else 'es'} in flight); "
          f"total {fmt_bytes(m['total'])} of {fmt_bytes(hw.hbm_bytes)}")
    if not rep["fits"]:
        print(f"    DOES NOT FIT: {fmt_bytes(m['total'])} per GPU, the GPU has {fmt_bytes(hw.hbm_bytes)} "
              f"(the time above is what it would take if it fit, not an answer)")
        print(f"    {_shrink(m, p)}")
    print(f"    {rep['efficiency']} (sources: symcost hardware {hw.name})")


def _shrink(m: dict, p: dict) -> str:
    """What would shrink the largest part of a run's memory, among the knobs it has not turned yet."""
    part = max(("activations", "optimizer", "gradients", "params"), key=lambda k: m[k])
    knobs = []
    if part == "activations":
        if p["recompute"] == "none":
            knobs += ["--recompute selective", "--recompute full"]
        elif p["recompute"] != "full":
            knobs.append("--recompute full")
        knobs += ["--seq-parallel"] if p["tp"] > 1 and not p["seq_parallel"] else []
        knobs += ["--attention flash"] if p["attention"] != "flash" else []
        knobs += ["a smaller --microbatch"] if p["microbatch"] > 1 else []
    else:
        stage = {"optimizer": 1, "gradients": 2, "params": 3}[part]     # the ZeRO stage that splits it
        knobs += [f"--zero {stage}"] if p["dp"] > 1 and p["zero"] < stage else []
    knobs.append("more --tp or --pp")
    return (f"the largest part is the {'weights' if part == 'params' else part}: " + ", ".join(knobs)
            + " would shrink it, or let --search choose a run that fits")
