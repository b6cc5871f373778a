"""Search for `make bench`: candidates priced per second, by the engine (each candidate planned, its
closed-form totals made numbers) and by the shared closed forms (every priced candidate at many values of
a symbol, vectorised with NumPy)."""
import time

import symcost
from symcost.searching import search
from symcost.searching.price import curve

TEXT = open("examples/mlp.sc").read()
DIMS = "B=1048576,D=8192,F=32768"
CASES = []


def _rate(mesh, backward, jobs=1):
    symcost.clear_caches()
    t = time.perf_counter()
    r = search(TEXT, mesh, DIMS, "tpu-v5p", backward=backward, jobs=jobs)
    return r, r.priced / (time.perf_counter() - t)


def report():
    """Lines of (label, value) for the table."""
    rows = []
    for mesh, backward in (("X=4,Y=4", True), ("X=16,Y=16,Z=16", False), ("X=16,Y=16,Z=16", True)):
        r, rate = _rate(mesh, backward)
        what = "forward + backward" if backward else "forward"
        rows.append((f"search MLP {mesh} {what}: {r.priced} candidates planned by the engine",
                     f"{rate:8.1f} candidates/s"))
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
    rows.append(_layer())
    rows.extend(_every_core())
    rows.append(_runs())
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
    r.to_dict(10)
    rate = r.priced / (time.perf_counter() - t)
    text = _layer_text()
    symcost.clear_caches()
    t = time.perf_counter()
    lay = search(text, "X=8", None, "h100", backward=True, jobs="auto")
    lay.to_dict(10)
    return [(f"search MLP X=16,Y=16,Z=16 forward + backward on {n} cores (--jobs auto)", f"{rate:8.1f} candidates/s"),
            (f"search the LLaMA 3 8B layer on X=8 on {n} cores (--jobs auto)",
             f"{lay.priced / (time.perf_counter() - t):8.1f} candidates/s")]


def _layer_text():
    from symcost.models.config import load_model_config
    from symcost.models.transformer import open_layer
    return open_layer(load_model_config("llama3-8b"), batch=8, seq=4096)[0]


def _regimes():
    """``search --vs B`` on 16x16x16, forward + backward: the regimes of the priced candidates over B (the
    grid of every candidate's totals, the envelope, each boundary solved exactly), after pricing."""
    symcost.clear_caches()
    t = time.perf_counter()
    r = search(TEXT, "X=16,Y=16,Z=16", DIMS, "tpu-v5p", backward=True, vs="B")
    total = time.perf_counter() - t
    return (f"regimes over B of those {r.priced} candidates ({len(r.regimes)} regimes; after pricing, of "
            f"{total:.1f} s end to end)", f"{(total - r.seconds) * 1e3:8.0f} ms")


def _layer():
    """A whole transformer layer: LLaMA 3 8B's (attention with grouped queries, gated MLP; the program
    ``model`` builds, left unsharded) searched forward + backward on one 8-GPU node. Its einsums have many
    equally fast forward plans, each weighed with its backward pass."""
    text = _layer_text()
    symcost.clear_caches()
    t = time.perf_counter()
    r = search(text, "X=8", None, "h100", backward=True)
    dt = time.perf_counter() - t
    return (f"search a LLaMA 3 8B layer on X=8 (h100), forward + backward: {r.priced} candidates",
            f"{r.priced / dt:8.1f} candidates/s")


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
