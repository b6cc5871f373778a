"""Model derivations for `make bench`: LLaMA 3-70B decode sharded over 8 v5e, a 256-point frontier, the
serving search on 8 H100s, and the run search on a budget of 8,960 v5p chips (which uses 8,192 of them)."""
import symcost
from symcost.models.config import load_model_config
from symcost.models.inference import Serving

CFG = load_model_config("llama3-70b")
V5E = symcost.hardware("tpu-v5e")


def decode():
    return Serving(CFG, V5E, chips=8, dtype="int8").decode(32, 8192)


def frontier():
    """256 batches priced with one plan (``plan_at``: the sweep's price); the command line's frontier derives
    each of its few batches at its own."""
    s = Serving(CFG, V5E, chips=8, dtype="int8")
    return s.frontier(8192, batches=list(range(1, 257)), plan_at=64)


def serving_search():
    from symcost.models.serving_search import search_serving
    return search_serving(CFG, symcost.hardware("h100"), 8, 4096)


def run_search_on_a_budget():
    from symcost.models.runs import search_runs
    return search_runs(CFG, symcost.hardware("tpu-v5p"), 8960, 1024, 4096)


CASES = [("warm 70B decode derivation (int8, 8 x v5e)", decode, 3),
         ("warm 256-point frontier sweep, one plan (70B, 8 x v5e)", frontier, 1),
         ("warm serving search (70B, 8 x h100, context 4096)", serving_search, 1),
         ("warm run search (70B, at most 8,960 x v5p, 1,024 sequences)", run_search_on_a_budget, 1)]
