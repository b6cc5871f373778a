"""``search``: every sharding of a program's open tensors, ranked, with the regimes over one symbol."""
from __future__ import annotations

import json

from ..errors import UsageError
from ..printers.text import fmt_bytes, fmt_seconds
from .options import common, number, read_program, refuse_unused_dims


def _sizes_named(text: str, args) -> None:
    """Every name --dims binds is a size of the program or of the mesh, as derive requires, checked before
    any candidate is priced."""
    if not args.dims:
        return
    from ..mesh import parse_mesh
    from ..notation import parse
    mesh = parse_mesh(args.mesh).size_names if args.mesh else frozenset()
    refuse_unused_dims(args.dims, parse(text).dims_named() | mesh)


def register(sub):
    s = sub.add_parser("search", help="every sharding of the parameters and open activations, priced and ranked")
    common(s)
    s.add_argument("--backward", action="store_true", help="price forward and backward (training)")
    s.add_argument("--no-overlap", action="store_true", help="sum compute and communication times")
    s.add_argument("--moves", default="auto", help="moves the engine may insert (as for derive)")
    s.add_argument("--efficiency", action="store_true",
                   help="price with the preset's achieved efficiency and its per-kernel floor, as derive --efficiency "
                        "does; default: the book's ideal machine")
    s.add_argument("--objective", choices=("time", "comms", "memory"), default="time",
                   help="rank by step time (default), communication time or memory per device")
    s.add_argument("--top", type=int, default=10,
                   help="how many candidates to show (default 10); a space of 1,000 candidates or more (of a program "
                        "of two statements or more) is bounded: its candidates bounded by their statements planned "
                        "alone, derived from the least bound up until these are proven the best; --exact shows the "
                        "plans it derives: the optimum it proves and the search's best")
    s.add_argument("--every", action="store_true",
                   help="price every candidate, however many (default: bound a space of 1,000 or more)")
    s.add_argument("--vs", help="a dimension, or a mesh axis (the chip count growing along it): the best "
                                "candidates over its range, with exact boundaries")
    s.add_argument("--range", dest="span", help="LO:HI for --vs (default: a dimension's --dims value / 1000 to "
                                                "x 1000; an axis's 1 to 64 x its size)")
    s.add_argument("--plot", help="with --vs: draw step time against it, one line per regime (.png, .svg, .pdf)")
    s.add_argument("--exact", action="store_true",
                   help="solve for the best plan with a proven lower bound (a MILP over each statement's plans; "
                        "needs scipy, the exact extra)")
    s.add_argument("--time-limit", type=number, default=None, metavar="SECONDS",
                   help="with --exact: seconds to spend closing the gap once the pieces are planned (default 120); "
                        "where they run out, the best plan found is shown with the gap still open")
    s.add_argument("--jobs", default="auto",
                   help="processes that price candidates (with --exact: that plan its pieces): a number, or auto "
                        "(default: every core, for 32 candidates or pieces or more); the ranking is the same")
    s.set_defaults(handler=cmd_search)


def _span(text):
    if text is None:
        return None
    try:
        lo, hi = (float(x) for x in text.split(":"))
    except ValueError:
        raise UsageError(f"--range {text!r}: write LO:HI, e.g. 1e4:1e8") from None
    return lo, hi


def cmd_search(args) -> int:
    from ..searching import search
    if args.top < 1:
        raise UsageError("--top must be at least 1")
    if args.plot and not args.vs:
        raise UsageError("--plot draws the regimes: give --vs too (e.g. --vs B)")
    if args.every and args.exact:
        raise UsageError("--exact solves for the best plan and --every prices every candidate: give one of them")
    if args.time_limit is not None and not args.exact:
        raise UsageError("--time-limit is the exact search's: give --exact too (the ordinary search runs until its "
                         "top is proven, or every candidate is priced)")
    if args.time_limit is not None and args.time_limit < 0:
        raise UsageError(f"--time-limit is the seconds the exact search may take to close its gap: a number >= 0, "
                         f"not {args.time_limit:g}")
    text = read_program(args.program)
    _sizes_named(text, args)
    result = search(text, args.mesh, args.dims, args.hw, backward=args.backward,
                    objective=args.objective, overlap=not args.no_overlap, moves=args.moves, vs=args.vs,
                    range=_span(args.span), jobs=args.jobs, exact=args.exact, efficiency=args.efficiency,
                    time_limit=args.time_limit, top=None if args.every or args.exact else args.top)
    if args.plot:
        from ..searching.plot import plot_regimes
        plot_regimes(result, args.plot)
    if args.json:
        print(json.dumps(result.as_dict(args.top), indent=2))
        return 0 if result.complete else 130
    print(render(result, args.top))
    if args.plot:
        print(f"wrote {args.plot}")
    return 0 if result.complete else 130


def render(result, top: int = 10) -> str:
    """The text a user reads: counts, the ranked candidates, the regimes."""
    hbm = f" {fmt_bytes(result.hbm_bytes)} of HBM" if result.hbm_bytes else " HBM"
    lines = [*_wrapped("program: ", str(result.space.program).splitlines(), " ; "),
             f"mesh: {mesh_line(result)}   objective: {result.objective}",
             *([] if result.complete else
               [f"stopped (Ctrl-C) after {result.priced:,} of {result.candidates:,} shardings: the best so far"]),
             *(_exact_lines(result, hbm) if result.bound is not None else
               _bounded_lines(result, hbm) if result.bounded else
               [f"priced {result.priced:,} shardings in {fmt_seconds(result.seconds)} "
                f"({result.assignments:,} assignments, symmetric duplicates collapsed); "
                f"{result.feasible:,} fit in{hbm} a device"])]
    for i, p in enumerate(result.ranked[:top], 1):
        lines.extend(_wrapped(f" {i:2d}. ", list(p.layouts.values()), ", ", f"   ({p.description})"))
        lines.append(f"     step {fmt_seconds(p.t_step)}  {p.bound}-bound  memory {fmt_bytes(p.memory_bytes or 0)}"
                     + ("" if p.fits else "  (does not fit)"))
    if result.vs:
        lo, hi = result.range
        lines.append(f"regimes over {result.vs} from {lo:.4g} to {hi:.4g} (each candidate's plan chosen at the "
                     f"--dims sizes; boundaries solved exactly):")
        for r in result.regimes:
            p = result.ranked[r.best]
            where = _interval(result.vs, r.start, r.end)
            lines.extend(_wrapped(f"  {where}: ", list(p.layouts.values()), ", ",
                                  f"  ({p.description}; {r.bound}-bound)"))
        edges = [r.end for r in result.regimes if r.end is not None]
        if edges:
            lines.append("  boundaries:")
            for b in edges:
                exact = f"{result.vs} = {b.exact}" if b.exact is not None else "(solved numerically)"
                lines.append(f"    {exact} = {b.value:.6g}   [{_why(b.reason)}]")
    return "\n".join(lines)


def _bounded_lines(result, hbm: str) -> list[str]:
    """What a bounded search did: how many it derived, and why the rest need not be."""
    refused = result.candidates - result.priced - result.bounded
    return [f"priced {result.priced:,} of {result.candidates:,} shardings"
            + (f" ({refused:,} others the engine refuses)" if refused else "") + ", from the least bound up, in "
            f"{fmt_seconds(result.seconds)} ({result.assignments:,} assignments, symmetric duplicates collapsed); "
            f"{result.feasible:,} fit in{hbm} a device",
            f"the other {result.bounded:,} rank below {'the best' if result.top == 1 else f'the best {result.top}'}: "
            f"by the bounds of its statements planned alone, each is slower, or as fast with more communication "
            f"(--every prices them all)"]


def _exact_lines(result, hbm: str) -> list[str]:
    """What ``--exact`` proved: the bound and the gap, and how the search's own best compares."""
    plans = "plan" if result.priced == 1 else "plans"
    lines = [f"priced every statement's pieces, derived {result.priced:,} {plans} in {fmt_seconds(result.seconds)}; "
             f"{result.feasible:,} fit in{hbm} a device",
             f"exact: no plan is faster than {fmt_seconds(result.bound)} (proven); the best is within "
             f"{result.gap:.2%} of it" + _unclosed(result)]
    sb, best = result.search_best, result.best
    if sb is not None and best is not None and sb.t_step > best.t_step * (1 + 1e-9):
        lines.append(f"the search's best (every statement sharded by the same roles) takes {fmt_seconds(sb.t_step)}, "
                     f"{sb.t_step / best.t_step - 1:.2%} slower than the best, written with its layouts pinned:")
        lines.extend("    " + line for line in result.program_of(best).splitlines())
    elif sb is not None:
        found = "the best found" if result.time_limit is not None or not result.complete else "the optimum"
        lines.append(f"the search's best (every statement sharded by the same roles) is {found}")
    return lines


def _unclosed(result) -> str:
    """Why the gap is still open, where it is."""
    if not result.complete:
        return " (stopped before the gap closed)"
    if result.time_limit is not None:
        return (f" (its {result.time_limit:g} s to close the gap ran out first: the best plan found, not "
                f"proven optimal; --time-limit gives it more)")
    return ""


def mesh_line(result) -> str:
    """Each axis with its size and link model as the mesh was laid on the preset: ``X=4 (nvlink)``,
    ``X=16 (ici, wrap)``, ``Y=4 (ici, 2 links, no wrap)``; an axis ``--vs`` varies says so."""
    parts = []
    for a, n in result.mesh_sizes.items():
        link = result.links[a]
        model = [link["kind"]] + ([f"{link['links']} links"] if link["links"] != 1 else [])
        if link["kind"] == "ici":
            model.append("wrap" if link["wrap"] else "no wrap")
        if a in result.planned_at:
            model.append("varied by --vs")
        parts.append(f"{a}={n} ({', '.join(model)})")
    return ", ".join(parts)


#: the width a line of items is wrapped at (the items a line holds; a line is never split inside one)
WIDTH = 100


def _wrapped(lead: str, items: list, sep: str, tail: str = "") -> list[str]:
    """``lead`` then the items joined by ``sep``, wrapped between items at :data:`WIDTH` characters with
    the continuation lines indented under the first item; ``tail`` ends the last line."""
    lines, line, held = [], lead, 0
    for k, item in enumerate(items):
        piece = item + (sep.rstrip() if k < len(items) - 1 else "")
        if held and len(line) + len(piece) > WIDTH:
            lines.append(line.rstrip())
            line, held = " " * len(lead), 0
        line, held = line + piece + " ", held + 1
    return lines + [line.rstrip() + tail]


def _interval(sym, start, end) -> str:
    if start is None and end is None:
        return f"every {sym}"
    if start is None:
        return f"{sym} < {end.value:.4g}"
    if end is None:
        return f"{sym} >= {start.value:.4g}"
    return f"{start.value:.4g} <= {sym} < {end.value:.4g}"


def _why(reason: str) -> str:
    return {"time": "equal step times", "comms": "tied step times, equal communication",
            "memory": "memory = HBM"}.get(reason, f"turns {reason}")
