"""Model derivations for `make bench`: LLaMA 3-70B decode sharded over 8 v5e, and a 256-point frontier."""
import symcost
from symcost.models.config import load_model_config
from symcost.models.inference import Serving

CFG = load_model_config("llama3-70b")
V5E = symcost.hardware("tpu-v5e")


def decode():
    return Serving(CFG, V5E, chips=8, dtype="int8").decode(32, 8192)


def frontier():
    s = Serving(CFG, V5E, chips=8, dtype="int8")
    return s.frontier(8192, batches=list(range(1, 257)))


CASES = [("warm 70B decode derivation (int8, 8 x v5e)", decode, 3),
         ("warm 256-point frontier sweep (70B, 8 x v5e)", frontier, 1)]
