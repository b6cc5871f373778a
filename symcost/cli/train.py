"""``symcost model --train``: one model of a training step whatever flags are given (the layer's engine
plan inside the run's pipeline, schedule, recomputation, DP / ZeRO traffic and optimizer:
:mod:`symcost.models.execution`). Knobs left unset take the defaults :data:`DEFAULTS` names, and the output
shows them."""
from __future__ import annotations

from .. import dtypes
from ..errors import UsageError

#: the run's knobs (what ``--search`` chooses itself)
OPTIONS = ("tp", "pp", "dp", "cp", "ep", "microbatch", "interleave", "sequences", "recompute", "seq_parallel",
           "schedule", "tp_overlap", "zero", "fsdp", "attention")
# --checkpoints-per-layer also applies to the run (K saved [B, D] tensors a layer, the rest recomputed)


#: what an unset knob of ``model --train`` means (shown in the output): every chip a data-parallel replica
DEFAULTS = {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "microbatch": 1, "interleave": 1, "recompute": "none",
            "zero": 0, "attention": "unfused", "memory": "saved", "flops": "attention", "optimizer": "adam"}


#: the title of the run's knobs in ``--help``
GROUP = "a training run as launched (with --train; --search chooses these)"


def add_arguments(m) -> None:
    g = m.add_argument_group(GROUP)
    g.add_argument("--memory", choices=("saved", "book"),
                   help="activation memory: saved (what the layer's plan keeps for its backward pass under "
                        "--recompute; the default) or book (--checkpoints-per-layer K [B, D] tensors a layer, book "
                        "Part 6, the rest recomputed)")
    g.add_argument("--flops", choices=("attention", "6n"),
                   help="the FLOPs MFU counts: attention (every matmul, attention and logits; the default) or 6n "
                        "(6 x parameters a token, book Part 6); both are in --json")
    g.add_argument("--dp-overlap", action="store_true",
                   help="reduce the gradients beside the last backward pass (default: after it, as Megatron 2022)")
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
    g.add_argument("--schedule", choices=("gpipe", "1f1b", "interleaved", "zb-h1"),
                   help="pipeline schedule (default: interleaved with --interleave > 1, else 1F1B; zb-h1: the "
                        "weights' gradients run in the bubble, Qi et al. 2024; with --search, zb-h1 alone: every "
                        "pipeline of one chunk a stage runs it)")
    g.add_argument("--tp-overlap", action="store_true", help="TP collectives overlapped with the matmuls")
    g.add_argument("--attention", choices=("unfused", "flash"),
                   help="the attention core: unfused (scores, softmax and dropout through HBM, as Megatron ran in "
                        "2022; the default) or flash (one fused kernel, as current stacks run)")
    g.add_argument("--max-cp", type=int, metavar="N",
                   help="with --search: also try context parallelism over 2, 4, ... up to N ranks (default 1: none)")


#: the knobs that count ranks, stages or sequences: each at least 1
COUNTS = ("tp", "pp", "dp", "cp", "ep", "microbatch", "interleave")


def _settings(args) -> dict:
    """Every knob of the run: what the user gave, else :data:`DEFAULTS`; DP fills the chips."""
    out = {k: getattr(args, k, None) for k in (*DEFAULTS, "dp")}
    for k in COUNTS:                  # before any of them divides the chips or the sequences
        if out.get(k) is not None and out[k] < 1:
            raise UsageError(f"--{k} must be at least 1, not {out[k]}")
    out = {k: (v if v is not None else DEFAULTS[k]) for k, v in out.items() if k in DEFAULTS}
    if args.fsdp and args.zero not in (None, 3):
        raise UsageError(f"--fsdp is --zero 3; it contradicts --zero {args.zero}")
    if args.fsdp:
        out["zero"] = 3
    if args.checkpoints_per_layer is not None and out["memory"] != "book":
        if args.memory == "saved":
            raise UsageError("--checkpoints-per-layer counts the book policy's checkpoints; --memory saved reads "
                             "what the plan keeps (use --recompute)")
        out["memory"] = "book"
    per = out["tp"] * out["pp"] * out["cp"]
    if args.dp is None:
        if args.chips % per:
            raise UsageError(f"--chips {args.chips} is not a multiple of --tp {out['tp']} x --pp {out['pp']}"
                             + (f" x --cp {out['cp']}" if out["cp"] > 1 else "") + f" = {per}")
        out["dp"] = args.chips // per
    else:
        out["dp"] = args.dp
    if per * out["dp"] != args.chips:
        raise UsageError(f"--chips {args.chips} is not --tp {out['tp']} x --pp {out['pp']} x --dp {out['dp']}"
                         + (f" x --cp {out['cp']}" if out["cp"] > 1 else "") + f" = {per * out['dp']}")
    return out


def sequences_of(args) -> int:
    """The sequences of one iteration: ``--sequences``, or ``--batch`` tokens in sequences of ``--seq``
    (both given, they must agree)."""
    if args.sequences is None and not args.batch:
        raise UsageError("--train needs --sequences (per iteration) or --batch (tokens per iteration)")
    if args.sequences is not None:
        if args.batch and args.batch != args.sequences * args.seq:
            raise UsageError(f"--batch {args.batch:g} tokens is not --sequences {args.sequences} of --seq {args.seq} "
                             f"({args.sequences * args.seq:,} tokens); give one of them")
        sequences = args.sequences
    elif args.batch < args.seq:
        raise UsageError(f"--batch {args.batch:g} tokens is less than one sequence of --seq {args.seq} (--batch counts "
                         f"tokens; --sequences {args.batch:g} gives {args.batch:g} sequences of {args.seq:,} tokens)")
    elif args.batch % args.seq:
        below = int(args.batch // args.seq) * args.seq
        raise UsageError(f"--batch {args.batch:g} tokens is not a whole number of sequences of --seq {args.seq}: "
                         f"{below:,} or {below + args.seq:,} tokens is")
    else:
        sequences = int(args.batch // args.seq)
    if sequences < 1:
        raise UsageError(f"--sequences must be at least 1, not {sequences}")
    return sequences


def execute(args, cfg, hw) -> dict:
    from ..models.execution import Run
    from ..models.layer_cost import RECOMPUTE
    if args.recompute is not None and args.recompute not in RECOMPUTE:
        raise UsageError(f"--recompute {args.recompute!r}: choose one of {', '.join(RECOMPUTE)}")
    if args.mfu is not None:
        raise UsageError("--train derives the step, and its MFU, from the layer's plan; drop --mfu")
    k = _settings(args)
    sequences = sequences_of(args)
    if sequences % (k["dp"] * k["microbatch"]):
        why = "" if args.dp is not None else (
            f"; --dp is the chips --tp x --pp x --cp leave ({k['dp']:,}): choose --tp, --pp and --chips so that "
            f"the replicas divide the sequences, or let --search choose (it may leave chips idle)")
        raise UsageError(f"{sequences} sequences do not split into microbatches of {k['microbatch']} on each of "
                         f"{k['dp']} data-parallel replicas ({sequences} / ({k['dp']} x {k['microbatch']}) = "
                         f"{sequences / (k['dp'] * k['microbatch']):g}){why}")
    checkpoints = (args.checkpoints_per_layer if args.checkpoints_per_layer is not None else 1) \
        if k["memory"] == "book" else None
    recompute = k["recompute"] if checkpoints is None or k["recompute"] != "none" else "full"
    run = Run(cfg, hw, tp=k["tp"], pp=k["pp"], dp=k["dp"], cp=k["cp"], ep=k["ep"], sequences=sequences,
              microbatch=k["microbatch"], seq=args.seq, interleave=k["interleave"], recompute=recompute,
              seq_parallel=args.seq_parallel, schedule=args.schedule, tp_overlap=args.tp_overlap, zero=k["zero"],
              checkpoints=checkpoints, attention=k["attention"], dp_overlap=args.dp_overlap,
              optimizer=k["optimizer"], dtype=dtypes.canonical(args.dtype) or "bf16")
    return report(run, args, k)


def report(run, args, k: dict) -> dict:
    """The ``train`` object of ``model --train --json`` (DESIGN.md section 3)."""
    from ..models.execution import STEP_BYTES
    hw = run.hw
    rep = run.report()
    it, fl, mem = rep["iteration"], rep["flops"], rep["memory"]
    tokens = run.sequences * run.seq
    lines = hw.efficiency.describe()
    iterations = args.tokens / tokens if args.tokens else None
    mfu = rep["mfu_6n"] if k["flops"] == "6n" else rep["mfu"]
    layer = run.layer_timings()
    plan = run.layer_cost.plan()
    return {
        "step_time": it["iteration"], "mfu": mfu, "mfu_attention": rep["mfu"], "mfu_6n": rep["mfu_6n"],
        "hfu": rep["hfu"], "flops_counted": k["flops"],
        "model_flops_per_token": {"params_only": fl["6N"] / tokens, "with_attention": fl["model"] / tokens},
        "hardware_flops_per_token": fl["hardware"] / tokens,
        "memory_policy": run.policy_name,
        "memory_bytes": {"params": mem["weights"], "gradients": mem["gradients"], "optimizer": mem["optimizer"],
                         "activations": mem["activations"], "total": mem["total"]},
        "optimizer": {"name": run.optimizer, "step_bytes_per_param": dict(STEP_BYTES)},
        "layer": {"forward": layer["forward"], "backward": layer["backward"], "recompute": layer["recompute"],
                  # the whole plan (its closed forms written out) where JSON is printed; the text shows its padding
                  "plan": plan.to_dict() if getattr(args, "json", True) else
                  {"padding": [p.as_dict() for p in plan.padding]}},
        "breakdown": {k2: v for k2, v in it.items() if k2 != "iteration"},
        "schedule": rep["schedule"],
        "config": {"tp": run.tp, "pp": run.pp, "dp": run.dp, "cp": run.cp, "cp_link": run.cp_link, "ep": run.ep,
                   "chips": run.chips, "microbatch": run.microbatch, "sequences": run.sequences, "seq": run.seq,
                   "interleave": run.interleave, "recompute": run.policy, "seq_parallel": run.seq_parallel,
                   "attention": run.attention, "checkpoints_per_layer": run.checkpoints,
                   "tp_overlap": run.tp_overlap, "zero": run.zero, "dp_overlap": run.dp_overlap,
                   "tp_link": run.tp_link, "pp_link": run.pp_link, "dp_link": run.dp_link},
        "defaulted": sorted(n for n in DEFAULTS if getattr(args, n, None) in (None, False))
        + (["dp"] if args.dp is None else []),
        "efficiency": "; ".join([lines[0].strip()] + [x.strip() for x in lines[1:]]),
        "efficiency_source": dict(hw.sources).get("efficiency", ""),
        "flops_total": fl["model"] * iterations if iterations else None,
        "seconds": it["iteration"] * iterations if iterations else None,
        "min_chips": run.chips,
        "fits": mem["total"] <= hw.hbm_bytes,
    }


def show(rep: dict, hw, experts: int = 0) -> None:
    """The text of a run (``experts``: the routed experts --ep may split, 0 for a dense model)."""
    from ..printers.text import fmt_bytes
    it, p, fl, sch = rep["breakdown"], rep["config"], rep["model_flops_per_token"], rep["schedule"]
    def par(name: str, n: int, link: str) -> str:      # a link is named where the axis has one
        return f"{name} {n}" + (f" ({link})" if n > 1 else "")
    mbs = f"{sch['microbatches']} microbatch{'' if sch['microbatches'] == 1 else 'es'}"
    print(f"  run on {p['chips']} x {hw.name}: {par('TP', p['tp'], p['tp_link'])}, {par('PP', p['pp'], p['pp_link'])}, "
          f"DP {p['dp']}" + (f" ({p['dp_link']}" + (f", ZeRO {p['zero']}" if p["zero"] else "") + ")" if p["dp"] > 1
                             else "") + (f", CP {p['cp']} ({p['cp_link']})" if p["cp"] > 1 else "")
          + (f", EP {p['ep']}" if p["ep"] > 1 else "")
          + f"; {p['sequences']} sequences of {p['seq']}, microbatch {p['microbatch']}, "
          + (f"{sch['schedule']} schedule ({mbs}, interleave {sch['interleave']}); " if p["pp"] > 1 else
             f"no pipeline ({mbs}); ")
          + f"recompute {p['recompute']}" + (", sequence parallel" if p["seq_parallel"] else "")
          + (", flash attention" if p["attention"] == "flash" else ""))
    parts = ", ".join(f"{k.replace('_', ' ')} {it[k]:.3g}" for k in
                      ("forward", "backward", "recompute", "tp_comms", "cp_comms", "ep_comms", "head", "bubble", "p2p",
                       "dp_comms", "optimizer") if it[k])
    print(f"    iteration {rep['step_time']:.3g} s ({parts})")
    lay = rep["layer"]
    print(f"    one layer, one microbatch (the engine's plan, communication as it runs): forward "
          f"{lay['forward'] * 1e3:.3g} ms, backward {lay['backward'] * 1e3:.3g} ms, recompute "
          f"{lay['recompute'] * 1e3:.3g} ms")
    padded = {(d["dim"], d["size"], d["padded"], d["devices"]) for d in lay["plan"].get("padding", ())}
    for dim, size, whole, n in sorted(padded):    # as derive's padding line says it, once a dimension
        print(f"    padding: {dim} = {size:,} over {n} ranks is padded to {whole:,} ({(whole - size) / whole:.2%} "
              f"of it padding)")
    if rep["defaulted"]:
        print("    defaults taken: " + ", ".join(_default_text(n, p) for n in rep["defaulted"]))
    if rep["seconds"] is not None:
        print(f"    training {rep['flops_total']:.3g} model FLOPs: {rep['seconds'] / 86400:.1f} days")
    if rep["flops_counted"] == "6n":
        print(f"    MFU {rep['mfu']:.1%} (6N FLOPs, {fl['params_only']:.4g} a token; with attention and logits "
              f"{fl['with_attention']:.4g} = {rep['mfu_attention']:.1%}), HFU {rep['hfu']:.1%} (with recomputation)")
    else:
        print(f"    MFU {rep['mfu']:.1%} (model FLOPs {fl['with_attention']:.4g} a token: every matmul, attention and "
              f"logits; 6N alone {fl['params_only']:.4g} = {rep['mfu_6n']:.1%}), HFU {rep['hfu']:.1%} "
              f"(with recomputation)")
    m = rep["memory_bytes"]
    dev = device_word(hw)
    policy = ("saved: what the layer's plan keeps for its backward pass" if rep["memory_policy"] == "saved"
              else f"book: {p['checkpoints_per_layer']} [B, D] checkpoint"
              f"{'' if p['checkpoints_per_layer'] == 1 else 's'} a layer")
    print(f"    activation memory policy {policy}; optimizer {rep['optimizer']['name']} (bf16 weights, fp32 "
          f"gradients, an fp32 master copy and two fp32 moments)" if rep["optimizer"]["name"] == "adam" else
          f"    activation memory policy {policy}; optimizer {rep['optimizer']['name']}")
    print(f"    memory per {dev} (first stage): weights {fmt_bytes(m['params'])}, gradients "
          f"{fmt_bytes(m['gradients'])}, optimizer {fmt_bytes(m['optimizer'])}, activations "
          f"{fmt_bytes(m['activations'])} ({sch['in_flight_microbatches']:.3g} "
          f"microbatch{'' if sch['in_flight_microbatches'] == 1 else 'es'} in flight); "
          f"total {fmt_bytes(m['total'])} of {fmt_bytes(hw.hbm_bytes)}")
    if not rep["fits"]:
        print(f"    DOES NOT FIT: {fmt_bytes(m['total'])} per {dev}, the {dev} has {fmt_bytes(hw.hbm_bytes)} "
              f"(the time above is what it would take if it fit, not an answer)")
        print(f"    {_shrink(m, p, sch['in_flight_microbatches'], experts)}")
    print(f"    {rep['efficiency']} (sources: symcost hardware {hw.name})")


def device_word(hw) -> str:
    """What a device of ``hw`` is called: a GPU, or a TPU's chip."""
    return "GPU" if getattr(hw, "family", "") == "gpu" or hw.nvlink_domain else "chip"


def _default_text(name: str, p: dict) -> str:
    value = {"memory": None, "flops": None}.get(name, p.get(name, DEFAULTS.get(name)))
    if name == "memory":
        return "--memory saved"
    if name == "flops":
        return "--flops attention"
    if name == "dp":
        return f"--dp {p['dp']} (the chips left)"
    if name == "optimizer":
        return "adam"
    return f"--{name.replace('_', '-')} {value}"


def _shrink(m: dict, p: dict, in_flight: float, experts: int = 0) -> str:
    """What would shrink the largest part of a run's memory, among the knobs it has not turned yet. The
    first stage holds its layers' activations for the microbatches in flight, as many as there are stages
    where there are that many microbatches (1F1B), else all of them: so more stages, or fewer sequences a
    replica, shrink them only where fewer microbatches than stages run, and a smaller microbatch only where
    the stages cap them (context parallelism splits each sequence, more TP each layer's work, and the book's
    checkpoints where sequence parallelism splits them too)."""
    part = max(("activations", "optimizer", "gradients", "params"), key=lambda k: m[k])
    knobs = []
    if part == "activations":
        if p.get("checkpoints_per_layer") is not None:          # the book's checkpoints
            knobs += ["fewer --checkpoints-per-layer"] if p["checkpoints_per_layer"] > 1 else []
        elif p["recompute"] == "none":
            knobs += ["--recompute selective", "--recompute full"]
        elif p["recompute"] != "full":
            knobs.append("--recompute full")
        knobs += ["--seq-parallel"] if p["tp"] > 1 and not p["seq_parallel"] else []
        if p.get("checkpoints_per_layer") is None and p["attention"] != "flash":
            knobs.append("--attention flash")
        knobs.append(("more --cp" if p["cp"] > 1 else "--cp N") + " (each sequence split over its ranks"
                     + ("; a microbatch is one sequence already)" if p["microbatch"] == 1 else ")"))
        if p["microbatch"] > 1 and in_flight >= p["pp"]:
            knobs.append("a smaller --microbatch (more microbatches of fewer sequences)")
        if in_flight < p["pp"]:
            knobs.append("more --pp stages (fewer layers a stage) or fewer --sequences a replica")
        # the book's [B, D] checkpoints are whole on every TP rank unless sequence parallelism splits them
        book_whole = p.get("checkpoints_per_layer") is not None and not p["seq_parallel"]
        knobs.append("more --tp with --seq-parallel" if book_whole else "more --tp")
    else:
        stage = {"optimizer": 1, "gradients": 2, "params": 3}[part]     # the ZeRO stage that splits it
        knobs += [f"--zero {stage}"] if p["dp"] > 1 and p["zero"] < stage else []
        knobs.append("more --tp, --pp or --ep (the routed experts split over its ranks)" if p["ep"] < experts
                     else "more --tp or --pp")
    return (f"the largest part is the {'weights' if part == 'params' else part}: " + ", ".join(knobs)
            + " would shrink it, or let --search choose a run that fits")
