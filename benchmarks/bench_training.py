"""Training derivations for `make bench`: the FSDP+TP layer forward + backward, solve and optimize, the run
search."""
from symcost.optimize import optimize_plan
from symcost.program import derive_program

TEXT = open("derivations/fsdp_tp.sc").read()


def layer():
    return derive_program(TEXT, mesh="X,Y", backward=True)


def solve():
    return derive_program(open("derivations/fsdp.sc").read(), mesh="X", backward=True).solve("B")


def optimize():
    return optimize_plan(derive_program(TEXT, mesh="X:M_X,Y:M_Y"), ("X", "Y"), "N")


def run_search():
    """The run search of GPT-3 175B on 64 A100s, caches cleared: each distinct layer derived by the engine."""
    from symcost import caching
    from symcost.hardware import hardware
    from symcost.models.config import load_model_config
    from symcost.models.runs import search_runs
    caching.clear()
    return search_runs(load_model_config("gpt3-175b"), hardware("a100"), chips=64, sequences=64, seq=2048)


def layer_candidates():
    """``derive --backward`` of 200 candidates of the LLaMA 3 8B layer's search on h100 ``X=4,Y=2``, each
    from its text, as a user derives what a search shows (their ties weighed), caches cleared first."""
    import symcost
    from symcost.searching.space import Space
    from bench_search import _layer_text
    space = Space.of(_layer_text(), "X=4,Y=2", "h100")
    dims = ",".join(f"{k}={v}" for k, v in space.program.ranking.items())
    texts = [str(space.program_for(c)) for c in list(space.candidates())[:200]]
    symcost.clear_caches()
    for t in texts:
        symcost.derive(t, "X=4,Y=2", dims, "h100", backward=True)


CASES = [("model --train --search GPT-3 175B on 64 x a100 (3,450 runs), caches cleared", run_search, 1),
         ("derive --backward 200 LLaMA 3 8B layer candidates (h100 X=4,Y=2), caches cleared", layer_candidates, 1),
         ("warm FSDP+TP layer, forward + backward (symbolic)", layer, 10),
         ("warm solve: FSDP critical batch", solve, 10),
         ("warm optimize: FSDP+TP X_opt", optimize, 5)]
