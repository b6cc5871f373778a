"""``symcost serve NAME --decode|--prefill|--frontier ...`` (also ``symcost model NAME --decode ...``): how a
model serves on a slice, from the layer's derived plan on a mesh (:mod:`symcost.models.inference`), or the
mesh and batch chosen for it (``--search``: :mod:`symcost.models.serving_search`)."""
from __future__ import annotations

import math

from ..errors import UsageError
from . import model_options

MODES = ("decode", "prefill", "frontier")
#: what plain ``--prefill`` reports of the derived prefill step (``prefill.derived`` in the JSON)
DERIVED = ("step_time", "t_math", "t_hbm", "t_comms", "bound", "padded_batch", "padding")


def register(sub):
    s = sub.add_parser("serve", help="decode, prefill and the latency / throughput frontier of a model on a slice "
                                     "(= model NAME --decode|--prefill|--frontier)")
    model_options.add_arguments(s, name_required=True, command="serve")
    s.set_defaults(handler=cmd_serve)


def cmd_serve(args) -> int:
    from .models import cmd_model
    if not any(getattr(args, m) for m in MODES):
        raise UsageError("serve what: --decode (a generation step), --prefill (a prompt) or --frontier "
                         "(latency and throughput by batch)")
    if args.train:
        raise UsageError("`symcost serve` prices serving; a training run is `symcost train`")
    return cmd_model(args)


def wanted(args) -> bool:
    return any(getattr(args, m) for m in MODES)


def _server(args, cfg, hw, dtype):
    from ..models.inference import Serving
    mesh, sharding = _roles(args, cfg) if args.experts or args.context else (args.mesh, None)
    return Serving(cfg, hw, chips=args.chips, dtype=dtype, kv_dtype=args.kv_dtype, compute_dtype=args.compute_dtype,
                   mesh=mesh, sharding=sharding)


def _roles(args, cfg) -> tuple:
    """The mesh (``--mesh``, or the default one) and its roles, with the routed experts split over the axes
    ``--experts`` names and the tokens over those ``--context`` names, each checked: a model with experts,
    axes of the mesh, experts their groups divide; tokens over axes that split neither the heads nor the
    experts (they split the tokens instead of the batch, F and the vocabulary)."""
    from dataclasses import replace

    from ..mesh import parse_mesh
    from ..models.inference import default_mesh, mesh_sharding
    mesh, sharding = (args.mesh, mesh_sharding(args.mesh)) if args.mesh else default_mesh(cfg, args.chips)
    sizes = {a.name: a.size or 1 for a in parse_mesh(mesh).axes}
    if args.experts:
        if not cfg.is_moe:
            raise UsageError(f"--experts {args.experts}: {cfg.name} has no experts to split")
        axes = _axes(args.experts, "--experts", mesh, sizes)
        groups = math.prod(sizes[a] for a in axes)
        if cfg.E % groups:
            raise UsageError(f"--experts {args.experts}: {groups} groups cannot split the {cfg.E} routed experts "
                             f"evenly")
        sharding = replace(sharding, experts=axes)
    if args.context:
        axes = _axes(args.context, "--context", mesh, sizes)
        taken = [a for a in axes if a in sharding.heads or a in sharding.experts]
        if taken:
            free = [a for a in sharding.kv_batch if a not in sharding.experts]
            raise UsageError(f"--context {args.context}: {', '.join(taken)} splits the "
                             f"{'heads' if taken[0] in sharding.heads else 'experts'}; name axes that split the "
                             f"batch alone (--mesh {mesh}{' --experts ' + args.experts if args.experts else ''}: "
                             f"{', '.join(free) or 'none'})")
        sharding = replace(sharding, context=axes, kv_batch=tuple(a for a in sharding.kv_batch if a not in axes),
                           model=tuple(a for a in sharding.model if a not in axes))
    return mesh, sharding


def _axes(text: str, flag: str, mesh: str, sizes: dict) -> tuple:
    """The axes ``flag`` names, each an axis of the mesh, once."""
    axes = _named(text)
    wrong = [a for a in axes if a not in sizes]
    if wrong or len(set(axes)) < len(axes) or not all(axes):
        raise UsageError(f"{flag} {text}: name axes of the mesh {mesh} once each"
                         + (f" ({', '.join(wrong)} is not one)" if wrong else ""))
    return axes


def answer(args, cfg, hw, dtype) -> dict:
    """The serving entries of ``model --json``: ``decode``, ``prefill``, ``frontier`` and, with --search,
    ``search`` (DESIGN's summary)."""
    if args.search:
        return _search(args, cfg, hw, dtype)
    server = _server(args, cfg, hw, dtype)
    out = {}
    if args.decode and (args.batch or not args.frontier):
        if not args.batch:
            raise UsageError("--decode needs --batch (sequences), or --frontier for every batch that fits")
        out["decode"] = server.decode(int(args.batch), args.seq).as_dict()
    if args.prefill:
        batch = int(args.batch or 1)
        out["prefill"] = server.prefill(args.seq, args.mfu, causal=_causal(args), batch=batch).as_dict()
        # beside the book's estimate, the step as --prefill --search prices it: the layer program derived
        step = server.prefill_step(batch, args.seq, causal=_causal(args)).as_dict()
        out["prefill"]["derived"] = {k: step[k] for k in DERIVED}
    if args.frontier:
        out["frontier"] = [r.as_dict() for r in server.frontier(args.seq)]
    return out


def _search(args, cfg, hw, dtype) -> dict:
    from ..models.serving_search import search_serving
    if args.decode and args.prefill:
        raise UsageError("--search chooses one phase: --decode or --prefill, not both")
    phase = "prefill" if args.prefill else "decode"
    if args.batch or args.mesh or args.experts or args.context:
        raise UsageError(f"--{phase} --search chooses the mesh and the batch itself, the experts' and the tokens' "
                         f"axes too; drop --batch, --mesh, --experts and --context")
    if args.mfu is not None and phase == "prefill":
        raise UsageError("--prefill --search prices the derived layer program on each mesh; drop --mfu")
    if args.top < 1:
        raise UsageError(f"--top must be at least 1, not {args.top}")
    latency = model_options.seconds(args.latency) if args.latency is not None else None
    res = search_serving(cfg, hw, args.chips, args.seq, latency=latency, top=args.top, dtype=dtype,
                         kv_dtype=model_options.kv_dtype(args), phase=phase, causal=_causal(args), jobs=args.jobs)
    full = {**res.as_dict(), "fits": bool(res.rows)}
    top = [{"mesh": r.mesh, "experts_over": list(r.step.experts_over), "tokens_over": list(r.step.tokens_over),
            "batch": r.batch,
            "step_time": r.step.step_time, "mfu": r.step.t_math / r.step.step_time,
            "memory_bytes": r.step.memory_bytes, "chips_used": r.step.chips, "compute_bound": r.step.bound == "math",
            "dominant": r.step.bound} for r in res.rows]
    return {phase: full, "search": {"candidates": res.searched, "feasible": res.feasible, "seconds": res.seconds,
                                    "top": top}}


def _causal(args) -> bool:
    """Whether a prefill's attention is causal (``--mask``, causal by default)."""
    return args.mask != "full"


def _named(text: str | None) -> tuple:
    """The axes a flag (``--experts``, ``--context``) names (none without it)."""
    return tuple(a.strip() for a in text.split(",")) if text else ()


def _over(args) -> str:
    """The experts' axes, where ``--experts`` splits them over some (expert parallelism), and the tokens'
    where ``--context`` splits them (context parallelism)."""
    from ..models.transformer import experts_over, tokens_over
    return experts_over(_named(args.experts)) + tokens_over(_named(args.context))


def _mesh(axes: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in axes.items())


def _no_fit(what: str, need: float, have: float) -> str:
    from ..printers.text import fmt_bytes
    return (f"    DOES NOT FIT: {what} take {fmt_bytes(need)} a chip, a chip has {fmt_bytes(have)} of HBM "
            f"(any time above is what it would take if it fit, not an answer)")


def show(args, cfg, hw, out: dict) -> None:
    """The serving part of ``model``'s text."""
    if "search" in out and ("decode" in out or "prefill" in out):
        _show_search(out["decode" if "decode" in out else "prefill"], args, hw)
        return
    if "decode" in out:
        _show_decode(out["decode"], args, cfg, hw)
    if "prefill" in out:
        _show_prefill(out["prefill"], args, hw)
    if "frontier" in out:
        _show_frontier(out["frontier"], args, hw)


def _show_padding(d: dict, mesh: dict) -> None:
    """A model dimension the mesh does not divide (as train's text says it): its blocks are padded; for the
    key-value heads, the mesh that splits them evenly."""
    for p in d.get("padding", ()):
        print(f"    padding: {p['dim']} = {p['size']:,} over {p['devices']} ranks is padded to {p['padded']:,} "
              f"({(p['padded'] - p['size']) / p['padded']:.2%} of it padding: its work and blocks are priced so)")
        chips = math.prod(mesh.values())
        if p["dim"] == "K" and p["devices"] > p["size"] and chips % p["size"] == 0:
            print(f"      --mesh Y={p['size']},Z={chips // p['size']} splits the {p['size']} key-value heads one to a "
                  f"chip and the batch (or, with --context Z, the tokens) over the rest")


def _show_decode(d: dict, args, cfg, hw) -> None:
    from ..printers.text import fmt_bytes, fmt_seconds
    print(f"  decode on {args.chips} x {hw.name} (mesh {_mesh(d['mesh'])}{_over(args)}), batch {d['batch']}, "
          f"context {args.seq}:")
    if d["padded_batch"] > d["batch"]:
        print(f"    padding: batch {d['batch']} is priced as {d['padded_batch']}, a multiple of the devices the KV "
              f"cache's batch splits over (a server pads a ragged batch)")
    _show_padding(d, d["mesh"])
    print(f"    step {fmt_seconds(d['step_time'])} (T_hbm {fmt_seconds(d['t_hbm'])}, T_math "
          f"{fmt_seconds(d['t_math'])}, T_comms {fmt_seconds(d['t_comms'])}); a chip reads "
          f"{fmt_bytes(d['weight_bytes_read'])} of weights a step, as it holds them")
    if why := _beyond_the_terms(d, hw):
        print(why)
    if "experts_read" in d:
        print(f"    experts read a layer: {d['experts_read']:.3g} of {cfg.E + cfg.shared_experts} (a batch of B tokens "
              f"touches E(1 - (1 - k/E)^B) of the E = {cfg.E} routed experts, k = {cfg.k}"
              + (f", plus {cfg.shared_experts} shared" if cfg.shared_experts else "") + ")")
    if d.get("kv_copies", 1) > 1:
        print(f"    the KV cache is held {d['kv_copies']} times: one latent serves every head, so splitting "
              f"the heads copies it (--mesh Y=..,Z=.. splits the cache's batch over Z)")
    if d["fits"]:
        print(f"    {d['tokens_per_s']:.0f} tokens/s, {d['tokens_per_s_per_chip']:.0f} per chip; memory "
              f"{fmt_bytes(d['memory_bytes'])} a chip of {fmt_bytes(hw.hbm_bytes)}; largest batch {d['max_batch']}")
    else:
        print(_no_fit("the weights and KV caches", d["memory_bytes"], hw.hbm_bytes) + _what_fits(d, args, hw))


def _what_fits(d: dict, args, hw) -> str:
    """What would fit where a decode step does not: a smaller batch, else what stops even one sequence."""
    from ..printers.text import fmt_bytes
    if d["max_batch"]:
        return f"; the largest batch that fits is {d['max_batch']}"
    if d["weight_bytes_held"] > hw.hbm_bytes:
        return "; the weights alone do not fit: more chips or a smaller --dtype"
    return (f"; the weights take {fmt_bytes(d['weight_bytes_held'])} a chip, and one sequence's KV cache at "
            f"context {args.seq} does not fit beside them: a shorter --seq, more chips or a smaller --kv-dtype")


def _beyond_the_terms(d: dict, hw) -> str:
    """Why a step is longer than its largest term, where it is: its kernels run one after another, each at
    the larger of its own T_math and T_hbm (and the preset's per-kernel floor), and the step waits on the
    collectives between them."""
    from ..printers.text import fmt_seconds
    largest = max(d["t_hbm"], d["t_math"], d["t_comms"])
    if d["step_time"] <= 1.01 * largest:
        return ""
    floor = hw.efficiency.t_kernel
    each = "its own larger of T_math and T_hbm" + (f", plus a {floor * 1e6:.2g} us floor" if floor else "")
    waits = ", and it waits on the collectives between them" if d["step_time"] > 1.01 * d["t_kernels"] else ""
    return (f"    why longer than any term: its kernels run one after another ({fmt_seconds(d['t_kernels'])}, each at "
            f"{each}){waits}")


def _show_prefill(p: dict, args, hw) -> None:
    from ..printers.text import fmt_seconds
    print(f"  prefill of {p['batch']} x {args.seq} tokens ({p['mask']} attention) on {args.chips} x {hw.name} "
          f"(mesh {_mesh(p['mesh'])}{_over(args)}) at "
          f"{p['mfu']:.0%} MFU ({p['mfu_source']}): {fmt_seconds(p['seconds'])}; no faster than the weights stream "
          f"from HBM, {fmt_seconds(p['hbm_floor'])}")
    d = p["derived"]
    padded = f", {d['padded_batch']} prompts priced (padded)" if d["padded_batch"] > p["batch"] else ""
    print(f"    the layer program derived on the mesh, as --prefill --search prices it: first token "
          f"{fmt_seconds(d['step_time'])} (T_math {fmt_seconds(d['t_math'])}, T_hbm {fmt_seconds(d['t_hbm'])}, "
          f"T_comms {fmt_seconds(d['t_comms'])}; {d['bound']}-bound{padded})")
    _show_padding(d, p["mesh"])
    if not p["fits"]:
        print(_no_fit("the weights and KV caches", p["memory_bytes"], hw.hbm_bytes))


def _show_frontier(rows: list, args, hw) -> None:
    from ..printers.text import fmt_bytes, fmt_seconds
    mesh = f" (mesh {_mesh(rows[0]['mesh'])}{_over(args)})" if rows else ""
    print(f"  decode on {args.chips} x {hw.name}{mesh}, context {args.seq}, by batch (memory a chip):")
    print(f"  {'batch':>6} {'step':>10} {'tokens/s':>10} {'per chip':>9} {'memory':>9}")
    for r in rows:
        print(f"  {r['batch']:>6} {fmt_seconds(r['step_time']):>10} {r['tokens_per_s']:>10.0f} "
              f"{r['tokens_per_s_per_chip']:>9.1f} {fmt_bytes(r['memory_bytes']):>9}")


def _show_search(res: dict, args, hw) -> None:
    from ..models.transformer import experts_over, tokens_over
    from ..printers.text import fmt_bytes, fmt_seconds
    prefill = res["phase"] == "prefill"
    target = (f", {'a first token in' if prefill else 'steps of'} at most {fmt_seconds(res['latency'])}"
              if res["latency"] else "")
    what = (f"prefill of {args.seq}-token prompts ({res['mask']} attention)" if prefill
            else f"decode, context {args.seq}")
    print(f"  serving search on {args.chips} x {hw.name}, {what}{target}: priced "
          f"{res['searched']} (mesh, batch) pairs over {len(res['meshes'])} layouts in "
          f"{fmt_seconds(res['search_seconds'])}; {res['feasible']} qualify")
    if res.get("complete") is False:
        print(f"    stopped (Ctrl-C) after {res['searched']} (mesh, batch) pairs: the best so far")
    if not res["runs"]:
        print("    NONE QUALIFIES: more chips, a shorter context, a smaller --dtype"
              + (" or a longer --latency" if res["latency"] else ""))
        return
    for i, r in enumerate(res["runs"], 1):
        copies = f", KV cache x{r['kv_copies']}" if r["kv_copies"] > 1 else ""
        step = "first token" if prefill else "step"
        padded = f" (priced as {r['padded_batch']})" if r.get("padded_batch", 0) > r["batch"] else ""
        layout = r["mesh"] + experts_over(r.get("experts_over")) + tokens_over(r.get("tokens_over"))
        print(f"    {i}. mesh {layout}, batch {r['batch']}{padded}: {step} {fmt_seconds(r['step_time'])}, "
              f"{r['tokens_per_s_per_chip']:.0f} tokens/s per chip, {r['bound']}-bound, "
              f"{fmt_bytes(r['memory_bytes'])} a chip{copies}")


__all__ = ["MODES", "answer", "cmd_serve", "register", "show", "wanted"]
