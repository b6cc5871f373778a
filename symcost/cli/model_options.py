"""The options ``model``, ``serve`` and ``train`` share (declared once), and reading them into a model."""
from __future__ import annotations

import argparse
import re

from .. import dtypes
from ..errors import UsageError
from . import train
from .options import number, refuse_unread


#: what each command's help leaves out (still parsed, so that a flag of the other command is refused with a
#: word on which command reads it): ``serve`` the training run's flags, ``train`` serving's, neither the
#: program ``model --program`` prints
HIDDEN = {
    "serve": {"train", "strategy", "tokens", "checkpoints_per_layer", "vs", "memory", "flops", "dp_overlap",
              "max_cp", "program", "elementwise", *train.OPTIONS},
    "train": {"train", "decode", "prefill", "frontier", "latency", "mfu", "kv_dtype", "program", "elementwise",
              "experts", "mask", "context"},
}
#: the help of a flag both read, as each command reads it
HELP = {
    "serve": {"batch": "sequences decoded together, or prefilled (default 1 for --prefill)",
              "mesh": "the mesh of the layer program, --chips devices in all (default: heads over Y, "
                                   "the rest over Z); its first axis splits the heads, the others the KV cache's batch",
              "search": "choose the mesh and the batch: the most tokens a second a chip within --latency (decode: "
                        "the step; prefill: the time to the first token)",
              "top": "how many (mesh, batch) pairs --search lists (default 5)",
              "jobs": "with --search: worker processes the layouts (a mesh and its sharding) are priced in, a "
                      "layout to a worker (a number; or auto, the default: every core where there are 4 layouts "
                      "or more); the answer is the same",
              "mfu": "with --prefill: model FLOPs utilisation, in (0, 1] (default: from the preset's efficiency "
                     "data, else 0.4)"},
    "train": {"batch": "tokens per iteration (or --sequences)",
              "mesh": "with --strategy: the mesh of the strategy program",
              "vs": "with --search: the best run on every power-of-two budget up to --chips",
              "search": "choose the run: every TP x PP x DP split of at most --chips (saying why when it leaves "
                        "some idle) with microbatch, interleave, ZeRO, recomputation and sequence parallelism, "
                        "ranked by iteration time among those that fit",
              "top": "how many runs --search lists (default 5)",
              "jobs": "with --search: worker processes the runs are priced in (a number; or auto, the default: "
                      "every core where the space has 64 layers or more to plan, as a mixture of experts' does)"},
}


def add_arguments(m, name_required: bool = False, command: str = "model") -> None:
    """A model's options: the counts, serving (decode, prefill, frontier), and training; ``command``'s help
    shows those it reads (:data:`HIDDEN`, :data:`HELP`)."""
    _add(m, name_required)
    if command == "train":
        for group in m._action_groups:
            if group.title == train.GROUP:
                group.title = "the run as launched (--search chooses these)"
    for action in m._actions:
        if action.dest in HIDDEN.get(command, ()):
            action.help = argparse.SUPPRESS
        elif action.dest in HELP.get(command, {}):
            action.help = HELP[command][action.dest]


def _add(m, name_required: bool) -> None:
    m.add_argument("name", metavar="NAME|config.json", nargs=None if name_required else "?",
                   help="a preset (see `symcost model --list`) or a HuggingFace config.json")
    m.add_argument("--dtype", default="bf16", help="weights and KV cache dtype (the book's 'int8 everything')")
    m.add_argument("--kv-dtype", help="KV cache dtype (default: --dtype)")
    m.add_argument("--compute-dtype", help="dtype the FLOPs run in (default: bf16, or int8 for int8 x int8)")
    m.add_argument("--hw", help="hardware preset")
    m.add_argument("--chips", type=int, default=1, help="chips in the slice")
    m.add_argument("--mesh", help="serving: the mesh of the layer program, --chips devices in all (default: heads "
                                  "over Y, the rest over Z); its first axis splits the heads, the others the KV "
                                  "cache's batch")
    m.add_argument("--experts", metavar="AXES",
                   help="serving an MoE model: the mesh axes its routed experts are split over (expert "
                        "parallelism, e.g. Y or Y,Z; default: none, each expert's F split over the mesh)")
    m.add_argument("--context", metavar="AXES",
                   help="serving: the mesh axes that split the tokens (context parallelism: a prompt's tokens and the "
                        "KV cache's; e.g. Z with --mesh Y=8,Z=2), not the batch")
    m.add_argument("--strategy", help="a training strategy program (derivations/*.sc) to check")
    m.add_argument("--train", action="store_true")
    m.add_argument("--decode", action="store_true", help="one generation step: --batch sequences at --seq context")
    m.add_argument("--prefill", action="store_true", help="a prompt of --seq tokens: the time to the first token")
    m.add_argument("--frontier", action="store_true", help="latency / throughput by batch size")
    m.add_argument("--mask", choices=("causal", "full"),
                   help="with --prefill: the attention's mask: causal (the default: each token attends to the ones "
                        "before it, and a flash-attention kernel skips the masked half of the scores) or full (each "
                        "to every token of the prompt)")
    m.add_argument("--batch", type=number, help="sequences (decode, prefill) or tokens per batch (train)")
    m.add_argument("--seq", type=int, default=8192, help="context length (default 8192)")
    m.add_argument("--tokens", type=number, help="training tokens (for the days of training)")
    m.add_argument("--mfu", type=number, help="with --prefill: model FLOPs utilisation, in (0, 1] (default: from "
                   "the preset's efficiency data, else 0.4); --train derives it from the layer's plan")
    m.add_argument("--checkpoints-per-layer", type=int, metavar="K",
                   help="K saved tensors a layer (default 1; with the run knobs: K of [B, D], book Part 6)")
    m.add_argument("--latency", metavar="TIME",
                   help="with --decode --search: the longest decode step allowed; with --prefill --search: the longest "
                        "time to the first token (40ms, 0.04, 500us)")
    m.add_argument("--program", action="store_true",
                   help="print one layer as a program, nothing sharded, with a rank line of the model's sizes "
                        "(--batch sequences, default 1, of --seq tokens): what `symcost search` takes")
    m.add_argument("--elementwise", action="store_true",
                   help="with --program: the layer with its norms, rotary embedding, activation and residual adds "
                        "(as serve prices them), not its matmuls alone")
    m.add_argument("--vs", choices=("chips",),
                   help="with --train --search: the best run on every power-of-two budget up to --chips")
    m.add_argument("--json", action="store_true")
    m.add_argument("--search", action="store_true",
                   help="with --train: choose the run (every TP x PP x DP split of at most --chips, saying why when it "
                        "leaves some idle, with microbatch, interleave, ZeRO, recomputation and sequence parallelism, "
                        "ranked by iteration time among those that fit); with --decode or --prefill: the mesh and "
                        "batch (the most tokens a second a chip within --latency)")
    m.add_argument("--top", type=int, default=5,
                   help="how many --search lists: runs with --train, (mesh, batch) pairs with --decode (default 5)")
    m.add_argument("--jobs", metavar="N",
                   help="with --search: worker processes the runs are priced in with --train (auto, the default: "
                        "every core where the space has 64 layers or more to plan, as a mixture of experts' does), the "
                        "layouts with --decode or --prefill (auto: where there are 4 or more); a number, or auto")
    train.add_arguments(m)


def seconds(text: str) -> float:
    """A duration as the user writes it: 40ms, 0.04, 0.04s, 500us."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(s|ms|us|µs)?\s*", text)
    if not m:
        raise UsageError(f"--latency {text!r}: write a duration such as 40ms, 0.04 or 500us")
    return float(m.group(1)) * {"s": 1.0, None: 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}[m.group(2)]


def need_hw(args):
    if not args.hw:
        raise UsageError("this needs --hw (a hardware preset, e.g. tpu-v5e)")
    from ..hardware import hardware
    return hardware(args.hw)


def checked(args) -> None:
    """The checks every mode shares: a model named, numbers in range."""
    if args.name is None:
        raise UsageError("name a model: a preset (symcost model --list) or a HuggingFace config.json")
    if args.mfu is not None and not 0 < args.mfu <= 1:
        raise UsageError(f"--mfu is a fraction of the peak FLOP/s, in (0, 1], not {args.mfu:g}")
    if args.batch is not None and args.batch <= 0:
        raise UsageError(f"--batch must be positive, not {args.batch:g}")
    if args.chips < 1:
        raise UsageError(f"--chips must be positive, not {args.chips}")
    if args.seq < 1:
        raise UsageError(f"--seq must be positive, not {args.seq}")
    if args.tokens is not None and args.tokens <= 0:
        raise UsageError(f"--tokens must be positive, not {args.tokens:g}")
    if args.checkpoints_per_layer is not None and args.checkpoints_per_layer < 0:
        raise UsageError(f"--checkpoints-per-layer is a count of saved tensors, at least 0, not "
                         f"{args.checkpoints_per_layer}")


#: what one training run reads and the run search does not (the run's knobs, ``train.OPTIONS``, it
#: refuses itself, saying it chooses them)
_ONE_RUN = ("memory", "flops", "tokens", "strategy", "checkpoints_per_layer")

#: each flag only some modes read: ``(those modes, how to say so)``; a mode here is ``train``, ``run``
#: (--train without --search), ``decode``, ``prefill``, ``frontier``, ``program``, ``strategy`` (--train with
#: --strategy) or ``serve-search``
READ_BY = {
    "mesh": ({"decode", "prefill", "frontier", "strategy"},
             "--decode, --prefill and --frontier (the serving mesh), and --train with --strategy (its mesh)"),
    "batch": ({"train", "decode", "prefill", "program"}, "--train (tokens), --decode, --prefill and --program "
                                                         "(sequences)"),
    "mfu": ({"prefill", "train"}, "--prefill"),
    "mask": ({"prefill"}, "--prefill"),
    "latency": ({"serve-search"}, "--decode --search and --prefill --search"),
    "experts": ({"decode", "prefill", "frontier"}, "--decode, --prefill and --frontier (the serving mesh)"),
    "context": ({"decode", "prefill", "frontier"}, "--decode, --prefill and --frontier (the serving mesh)"),
    "elementwise": ({"program"}, "--program"),
    "max_cp": ({"run-search"}, "--train --search"),
    "jobs": ({"run-search", "serve-search"}, "--search (--train, --decode or --prefill)"),
    **{k: ({"train"}, "--train") for k in train.OPTIONS},
    **{k: ({"run"}, "--train without --search") for k in _ONE_RUN},
}


def modes(args) -> set:
    """What the command was asked for, in :data:`READ_BY`'s terms."""
    out = {m for m in ("train", "decode", "prefill", "frontier", "program") if getattr(args, m, False)}
    if args.train and not args.search:
        out.add("run")
        if args.strategy:
            out.add("strategy")
    if args.search and out & {"decode", "prefill"}:
        out.add("serve-search")
    if args.train and args.search:
        out.add("run-search")
    return out


def unread(args) -> None:
    """A flag that nothing the command was asked for reads is an error that says what reads it, not a flag
    silently dropped (``model NAME --mesh Y=8`` printed the model's counts and nothing on that mesh)."""
    asked = modes(args)
    doing = " ".join([f"--{m}" for m in ("train", "decode", "prefill", "frontier", "program") if m in asked]
                     + (["--search"] if args.search and asked else []))
    refuse_unread(args, READ_BY, lambda name: bool(READ_BY[name][0] & asked),
                  lambda flag, name: f"{flag} is read by {READ_BY[name][1]}" + (f", not by {doing}" if doing else "")
                  + f": drop {flag}" + ("" if doing else " or add one of them"))


def kv_dtype(args) -> str | None:
    return dtypes.canonical(args.kv_dtype) if args.kv_dtype else None


__all__ = ["READ_BY", "add_arguments", "checked", "kv_dtype", "modes", "need_hw", "seconds", "unread"]
