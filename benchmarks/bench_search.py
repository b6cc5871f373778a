"""Search for `make bench`: the time to an answer on one core (the targets the search is held to), then
re-pricing planned candidates over a sweep, the regimes, every core, and the run search.

Times are CPU seconds of this process (``--jobs 1``: every candidate is planned here), which a shared
machine's load does not inflate; wall seconds beside them. A layer's search shows its top 10 as the command
line does, bounded (``top=10``: each statement's pieces planned once, candidates derived from the least
bound up), and the same search pricing every candidate (on three axes estimated from its first
candidates; ``SYMCOST_BENCH_WHOLE=1`` prices them all: about twenty minutes of CPU)."""
import os
import time

import symcost
from symcost.searching import search
from symcost.searching.price import curve

TEXT = open("examples/mlp.sc").read()
DIMS = "B=1048576,D=8192,F=32768"
CASES = []
#: the targets (seconds on one core) each time-to-answer row is held to
TARGETS = {"layer X=4,Y=2": 3.0, "layer X=4,Y=2,Z=2": 30.0, "mlp 16x16x16": 0.5, "exact layer X=4,Y=2": 60.0}


def _timed(fn):
    symcost.clear_caches()
    cpu, wall = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - cpu, time.perf_counter() - wall


def _answer(label: str, target: str, fn) -> tuple:
    r, cpu, wall = _timed(fn)
    derived = f"{r.priced:,} of {r.candidates:,} candidates derived" if r.bounded else f"{r.priced:,} candidates"
    return (f"{label}: {derived}, top 10 (target <= {TARGETS[target]:g} s)",
            f"{cpu:8.2f} s CPU ({wall:.2f} s wall)")


def _exact(layer: str) -> tuple:
    """``search --exact`` on the layer: the time to a proven answer (the gap it proved, the target 1 %)."""
    r, cpu, wall = _timed(lambda: search(layer, "X=4,Y=2", None, "h100", backward=True, exact=True))
    return (f"search --exact the LLaMA 3 8B layer on X=4,Y=2 (h100), forward + backward: gap {r.gap:.1e} "
            f"(target <= 1 % in {TARGETS['exact layer X=4,Y=2']:g} s)", f"{cpu:8.2f} s CPU ({wall:.2f} s wall)")


def _whole(text: str, mesh: str, hw: str) -> tuple:
    """The whole space searched on every core (``--jobs auto``): the CPU seconds of this process and of its
    workers together, what one core would spend (``SYMCOST_BENCH_WHOLE=1``; about 10 minutes on 2 cores)."""
    import resource

    def cpu() -> float:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    symcost.clear_caches()
    before, wall = cpu(), time.perf_counter()
    r = search(text, mesh, None, hw, backward=True, jobs="auto")
    r.as_dict(10)
    spent = cpu() - before
    return (f"search the LLaMA 3 8B layer on {mesh} ({hw}), forward + backward: {r.priced:,} candidates, whole, "
            f"top 10 (target <= {TARGETS['layer X=4,Y=2,Z=2']:g} s)",
            f"{spent:8.1f} s CPU ({time.perf_counter() - wall:.1f} s wall)")


def _estimated(text: str, mesh: str, hw: str, first: int = 200) -> tuple:
    """A space too large to price in a benchmark run: the first ``first`` candidates priced as the search
    prices them, the whole extrapolated (the search says the same estimate before it starts). It runs high:
    the LLaMA 3 8B layer's first 200 on X=4,Y=2,Z=2 cost about twice the whole space's average, measured
    whole (:func:`_whole`); candidates taken evenly over the space cost more still, sharing less."""
    from symcost import caching
    from symcost.searching import WIDER
    from symcost.searching.pool import priced_all
    from symcost.searching.space import Space
    space = Space.of(text, mesh, hw)
    cands = list(space.candidates())
    symcost.clear_caches()
    cpu = time.process_time()
    with caching.context(wider=WIDER):
        list(priced_all(space, cands[:first], options=dict(dims=dict(space.program.ranking), hw=hw, backward=True)))
    per = (time.process_time() - cpu) / first
    return (f"search the LLaMA 3 8B layer on {mesh} ({hw}), forward + backward: {len(cands):,} candidates "
            f"(target <= {TARGETS['layer X=4,Y=2,Z=2']:g} s; estimated from the first {first})",
            f"{per * len(cands):8.0f} s CPU ({per * 1e3:.1f} ms a candidate)")


def report():
    """Lines of (label, value) for the table."""
    layer = _layer_text()
    rows = [
        _answer("search the LLaMA 3 8B layer on X=4,Y=2 (h100), forward + backward, bounded", "layer X=4,Y=2",
                lambda: search(layer, "X=4,Y=2", None, "h100", backward=True, jobs=1, top=10)),
        _answer("the same, every candidate priced (--every)", "layer X=4,Y=2",
                lambda: search(layer, "X=4,Y=2", None, "h100", backward=True, jobs=1)),
        _answer("search the LLaMA 3 8B layer on X=4,Y=2,Z=2 (h100), forward + backward, bounded",
                "layer X=4,Y=2,Z=2", lambda: search(layer, "X=4,Y=2,Z=2", None, "h100", backward=True, jobs=1,
                                                    top=10)),
        _whole(layer, "X=4,Y=2,Z=2", "h100") if os.environ.get("SYMCOST_BENCH_WHOLE") else
        _estimated(layer, "X=4,Y=2,Z=2", "h100"),
        _answer("search MLP X=16,Y=16,Z=16 (tpu-v5p), forward + backward", "mlp 16x16x16",
                lambda: search(TEXT, "X=16,Y=16,Z=16", DIMS, "tpu-v5p", backward=True, jobs=1)),
        _exact(layer),
    ]
    symcost.clear_caches()
    r = search(TEXT, "X=16,Y=16,Z=16", DIMS, "tpu-v5p", backward=True, jobs=1)
    import numpy as np
    xs = np.geomspace(1e3, 1e9, 400)
    for p in r.ranked:                      # lambdify once (kept): what a first sweep pays
        curve(p.plan.t_step, p.plan.bindings(), "B", xs[:2])
    t = time.perf_counter()
    for p in r.ranked:
        curve(p.plan.t_step, p.plan.bindings(), "B", xs)
    dt = time.perf_counter() - t
    rows.append((f"re-pricing those {r.priced} closed forms at {len(xs)} values of B (vectorised)",
                 f"{r.priced * len(xs) / dt:8.0f} candidates/s"))
    rows.append(_regimes())
    rows.extend(_every_core())
    rows.append(_runs())
    rows.extend(_moe_runs())
    return rows


def _every_core():
    """The same searches with ``--jobs auto`` (a worker process a core), the top ten plans read after."""
    from symcost.searching.pool import cores
    n = cores()
    if n < 2:
        return []
    symcost.clear_caches()
    t = time.perf_counter()
    r = search(TEXT, "X=16,Y=16,Z=16", DIMS, "tpu-v5p", backward=True, jobs="auto")
    r.as_dict(10)
    rate = r.priced / (time.perf_counter() - t)
    text = _layer_text()
    symcost.clear_caches()
    t = time.perf_counter()
    lay = search(text, "X=8", None, "h100", backward=True, jobs="auto")
    lay.as_dict(10)
    return [(f"search MLP X=16,Y=16,Z=16 forward + backward on {n} cores (--jobs auto)", f"{rate:8.1f} candidates/s"),
            (f"search the LLaMA 3 8B layer on X=8 on {n} cores (--jobs auto)",
             f"{lay.priced / (time.perf_counter() - t):8.1f} candidates/s")]


def _layer_text():
    """``symcost model llama3-8b --program``: one layer, nothing sharded, its sizes in a rank statement."""
    from symcost.models.config import load_model_config
    from symcost.models.transformer import open_layer
    return open_layer(load_model_config("llama3-8b"), batch=1, seq=8192)[0]


def _regimes():
    """``search --vs B`` on 16x16x16, forward + backward: the regimes of the priced candidates over B (the
    grid of every candidate's totals, the envelope, each boundary solved exactly), after pricing."""
    symcost.clear_caches()
    t = time.perf_counter()
    r = search(TEXT, "X=16,Y=16,Z=16", DIMS, "tpu-v5p", backward=True, vs="B")
    total = time.perf_counter() - t
    return (f"regimes over B of those {r.priced} candidates ({len(r.regimes)} regimes; after pricing, of "
            f"{total:.1f} s end to end)", f"{(total - r.seconds) * 1e3:8.0f} ms")


def _moe_runs():
    """The run search of a mixture of experts (its layers' plans are most of the time), caches cleared, in
    one process and on every core (``jobs="auto"``): wall seconds."""
    from symcost.hardware import hardware
    from symcost.models.config import load_model_config
    from symcost.models.runs import search_runs
    from symcost.processes import cores
    cfg, hw = load_model_config("mixtral-8x7b"), hardware("h100")
    out = []
    for jobs in (1, "auto") if cores() > 1 else (1,):
        symcost.clear_caches()
        t = time.perf_counter()
        res = search_runs(cfg, hw, 64, 256, 4096, jobs=jobs)
        label = "one process" if jobs == 1 else f"{cores()} processes"
        out.append((f"run search Mixtral 8x7B on 64 x h100, 256 sequences of 4096: {res.searched:,} runs, {label}",
                    f"{time.perf_counter() - t:8.1f} s wall"))
    return out


def _runs():
    """``model --train --search``: runs priced by the execution model (those that do not fit are dropped
    after their memory, before their iteration is priced)."""
    from symcost.hardware import hardware
    from symcost.models.config import load_model_config
    from symcost.models.runs import search_runs
    cfg, hw = load_model_config("gpt3-175b"), hardware("a100")
    search_runs(cfg, hw, 8, 8, 2048)          # compiles the layer's expressions once
    t = time.perf_counter()
    res = search_runs(cfg, hw, 64, 64, 2048)
    dt = time.perf_counter() - t
    return (f"run search GPT-3 175B on 64 x a100: {res.searched:,} runs ({res.feasible} fit)",
            f"{res.searched / dt:8.0f} runs/s")
