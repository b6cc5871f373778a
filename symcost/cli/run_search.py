"""``model --train --search`` (and ``symcost train NAME --search``): the run chosen for a model on at most
``--chips`` chips (:func:`symcost.models.runs.search_runs`), or with ``--vs chips`` the best run on every
power-of-two budget up to ``--chips``."""
from __future__ import annotations

import math

from ..errors import UsageError
from . import train
from .options import given

#: the parts of an iteration that compute; the rest is exposed communication, the bubble and sends
COMPUTE = ("forward", "backward", "recompute", "head", "optimizer")


def _sequences(args) -> int:
    """The iteration's sequences (the batch the search keeps; every other knob of a run it chooses)."""
    chosen = [f"--{k.replace('_', '-')}" for k in train.OPTIONS
              if k not in ("attention", "sequences") and given(args, k)
              and not (k == "schedule" and args.schedule == "zb-h1")]           # a count of 0 is given too
    if chosen:
        raise UsageError(f"--search chooses the run itself; drop {', '.join(chosen)}")
    if args.top < 1:
        raise UsageError(f"--top must be at least 1, not {args.top}")
    if args.max_cp is not None and args.max_cp < 1:
        raise UsageError(f"--max-cp must be at least 1, not {args.max_cp}")
    return train.sequences_of(args)


def _space(args) -> dict:
    """The search's bounds and workers as :func:`~symcost.models.runs.search_runs` takes them."""
    return dict(max_cp=args.max_cp or 1, attention=args.attention or "unfused", dp_overlap=bool(args.dp_overlap),
                zero_bubble=args.schedule == "zb-h1", jobs=args.jobs if args.jobs is not None else "auto")


def answer(args, cfg, hw) -> dict:
    """``train`` (the search's full answer) and ``search`` (DESIGN's summary) of ``model --json``."""
    from ..models.runs import search_runs
    sequences = _sequences(args)
    res = search_runs(cfg, hw, args.chips, sequences, args.seq, top=args.top, **_space(args))
    full = {**res.as_dict(), "fits": bool(res.rows)}
    if res.rows and not args.attention:
        full["with_flash"] = _with_flash(cfg, hw, res.rows[0], sequences, args)
    if args.vs == "chips" and res.complete:      # Ctrl-C stops the sweep too: what was found is shown
        full["vs_chips"], full["complete"] = _vs_chips(args, cfg, hw, sequences)
    return {"train": full, "search": contract(full)}


def _with_flash(cfg, hw, best, sequences: int, args) -> dict:
    """The best run again with flash attention, where the search took the default unfused kernel (Megatron
    2022's, whose scores cross HBM): what the kernel alone would change, the run's knobs kept."""
    from ..models.execution import Run
    run = Run(cfg, hw, **dict(best.config), sequences=sequences, seq=args.seq, attention="flash",
              dp_overlap=bool(args.dp_overlap))
    rep = run.report()
    return {"step_time": rep["iteration"]["iteration"], "mfu": rep["mfu"], "memory_bytes": run.memory()["total"]}


def _vs_chips(args, cfg, hw, sequences: int) -> tuple[list[dict], bool]:
    """The best run on each budget: the powers of two below ``--chips``, and ``--chips``; and whether every
    budget was searched to the end (Ctrl-C stops the sweep at the budget it stopped)."""
    from ..models.runs import search_runs
    budgets = sorted({2 ** i for i in range(int(math.log2(args.chips)) + 1)} | {args.chips})
    out = []
    for n in budgets:
        try:
            res = search_runs(cfg, hw, n, sequences, args.seq, top=1, **_space(args))
        except UsageError:      # no way to split this budget at all
            continue
        best = res.rows[0].as_dict() if res.rows else None
        out.append({"chips": n, "chips_used": best["chips_used"] if best else None,
                    "step_time": best["step_time"] if best else None, "mfu": best["mfu"] if best else None,
                    "config": best["config"] if best else None, "fits": best is not None})
        if not res.complete:
            return out, False
    return out, True


def contract(res: dict) -> dict:
    """The ``search`` object of ``model --train --search --json`` (DESIGN's keys): each run's knobs, the
    chips it uses, its iteration, MFU and memory, whether its compute outweighs its exposed communication
    and bubble, and the largest part of its iteration."""
    top = []
    for r in res["runs"]:
        parts = r["breakdown"]
        compute = sum(v for k, v in parts.items() if k in COMPUTE)
        top.append({**r["config"], "chips_used": r["chips_used"], "step_time": r["step_time"], "mfu": r["mfu"],
                    "memory_bytes": r["memory_bytes"], "compute_bound": compute >= sum(parts.values()) - compute,
                    "dominant": max(parts, key=parts.get)})
    return {"candidates": res["searched"], "feasible": res["feasible"], "seconds": res["search_seconds"],
            "top": top}


def show(res: dict, hw, cfg) -> None:
    from ..models.runs import describe
    from ..printers.text import fmt_bytes, fmt_seconds
    framework = "".join([f", {res.get('attention', 'unfused')} attention",
                         ", gradients reduced beside the last backward pass" if res.get("dp_overlap") else "",
                         ", ZB-H1 where a stage holds one chunk" if res.get("zero_bubble") else ""])
    print(f"  run search on at most {res['chips']:,} x {hw.name}, {res['sequences']:,} sequences of {res['seq']}"
          f"{framework}: "
          f"priced {res['searched']:,} runs in {fmt_seconds(res['search_seconds'])}; {res['feasible']:,} fit in "
          f"{fmt_bytes(hw.hbm_bytes)}")
    if res.get("complete") is False:
        print(f"    stopped (Ctrl-C) after {res['searched']:,} runs: the best so far")
    if not res["runs"]:
        print(f"    NONE FITS: {_why_none(res, hw, cfg)}")
    else:
        if res.get("budget"):
            print(f"    uses {res['budget']}")
        for i, r in enumerate(res["runs"], 1):
            why = (f"; +{r['loses_by']:.3g} s, mostly {r['mostly'].replace('_', ' ')}" if r["mostly"] else "")
            chips = f" on {r['chips_used']:,} chips" if r["chips_used"] != res["chips"] else ""
            print(f"    {i}. {describe(r['config'])}{chips}: {r['step_time']:.3g} s, MFU {r['mfu']:.1%}, "
                  f"{fmt_bytes(r['memory_bytes'])}{why}")
        flash = res.get("with_flash")
        if flash and flash["step_time"] < res["runs"][0]["step_time"]:
            print(f"    the first with --attention flash: {flash['step_time']:.3g} s, MFU {flash['mfu']:.1%}, "
                  f"{fmt_bytes(flash['memory_bytes'])} (the unfused kernel priced here, Megatron 2022's, writes the "
                  f"scores to HBM; --attention flash searches with flash's)")
    if "vs_chips" in res:
        _show_vs_chips(res["vs_chips"])


def _why_none(res: dict, hw, cfg) -> str:
    """What to change when no run fits: more chips when the state alone (weights, gradients, optimizer)
    does not fit however it is split, else what shrinks the activations."""
    from ..printers.text import fmt_bytes
    least = res.get("least_state")
    if least and least["state_bytes"] > hw.hbm_bytes:
        total = least["state_bytes"] * least["chips_used"]
        return (f"{cfg.name} does not fit on {res['chips']:,} chip{'s' if res['chips'] > 1 else ''}: its weights, "
                f"gradients and optimizer state alone take {fmt_bytes(least['state_bytes'])} a chip split as far as "
                f"they go ({least['config']}), a chip has {fmt_bytes(hw.hbm_bytes)}; at least "
                f"{math.ceil(total / hw.hbm_bytes):,} chips hold them")
    return ("the activations do not fit: more chips, fewer sequences a microbatch, or a shorter --seq")


def _show_vs_chips(rows: list) -> None:
    from ..models.runs import describe
    print("  the best run by chip budget:")
    print(f"  {'chips':>7} {'used':>7} {'iteration':>10} {'MFU':>6}  run")
    for r in rows:
        if not r["fits"]:
            print(f"  {r['chips']:>7,} {'-':>7} {'-':>10} {'-':>6}  none fits")
            continue
        print(f"  {r['chips']:>7,} {r['chips_used']:>7,} {r['step_time']:>9.3g}s {r['mfu']:>6.1%}  "
              f"{describe(r['config'])}")


__all__ = ["COMPUTE", "answer", "contract", "show"]
