"""The book's closed-form estimates around serving and training (Parts 4, 5, 7 and 8): training memory and
days, the fewest chips that hold a model, disaggregated serving's ratios, speculative decoding over two
derived decode steps (:class:`symcost.models.inference.Serving`), and the batch where a decode matmul turns
compute-bound (Part 7).

    >>> kv_evicted_per_step(batch=32, prefill=8192, generate=512)
    544.0
"""
from __future__ import annotations

import math

import sympy as sp

from .. import dtypes
from ..errors import UsageError
from ..program import derive_program
from .config import ModelConfig
from .inference import Serving
from .transformer import param_counts
from .counts import checkpoint_bytes, flops_per_token, kv_bytes_per_token


def train_estimate(cfg: ModelConfig, hw, chips: int, batch_tokens: float, tokens: float | None, mfu: float,
                   seq: int = 0, checkpoints_per_layer: int = 1, param_dtype: str = "bf16") -> dict:
    """Training FLOPs, time (None without ``tokens``), memory and the fewest chips whose HBM holds it (book
    Parts 4 and 5); ``fits`` says whether ``chips`` are enough."""
    if not 0 < mfu <= 1:
        raise UsageError(f"the MFU is a fraction of the peak, in (0, 1], not {mfu:g}")
    fpt = flops_per_token(cfg, seq=seq)
    total = fpt["train"] * tokens if tokens else None
    p = param_counts(cfg)["total"]
    params_b = p * dtypes.nbytes(dtypes.canonical(param_dtype))
    opt_b = p * 8  # Adam's two fp32 moments
    act_b = checkpoint_bytes(cfg, batch_tokens, checkpoints_per_layer)
    mem = params_b + opt_b + act_b
    need = int(math.ceil(mem / hw.hbm_bytes))
    return {"flops_total": total, "seconds": total / (chips * hw.C * mfu) if total else None,
            "min_chips": need, "fits": chips >= need,
            "memory_bytes": {"params": params_b, "optimizer": opt_b, "activations": act_b, "total": mem}}


def min_topology(cfg: ModelConfig, hw, dtype: str, seq: int, kv_dtype: str | None = None) -> dict:
    """Fewest chips (a power of two) whose HBM holds the weights, the HBM left, and how many
    ``seq``-token KV caches fit in it (book Part 8's table)."""
    d = dtypes.canonical(dtype)
    pb = param_counts(cfg)["total"] * dtypes.nbytes(d)
    need = pb / hw.hbm_bytes
    chips = 1
    while chips < need:
        chips *= 2
    free = chips * hw.hbm_bytes - pb
    kv = kv_bytes_per_token(cfg, dtypes.canonical(kv_dtype) or d)
    return {"param_bytes": pb, "min_chips": need, "slice_chips": chips, "free_bytes": free,
            "kv_caches": free / (seq * kv)}


def kv_evicted_per_step(batch: int, prefill: int, generate: int) -> float:
    """KV tokens freed per decode step: each step finishes batch / generate sequences of prefill +
    generate tokens (book Part 8)."""
    return batch * (prefill + generate) / generate


def prefill_generate_ratio(prefill_seconds: float, step_seconds: float, batch: int, generate: int) -> float:
    """Prefill servers per generate server in disaggregated serving: the generate server finishes batch
    sequences every generate x step seconds; each needs a prefill (book Part 8)."""
    return prefill_seconds * batch / (step_seconds * generate)


def speculative_decode(target: Serving, drafter: Serving, batch: int, seq: int, draft: int,
                       acceptance: float) -> dict:
    """Speculative sampling (book Part 7): the drafter proposes ``draft`` tokens one step at a time, the
    target checks them in one step over ``draft + 1`` new tokens. With each draft token accepted with
    probability ``acceptance`` (independently), a round yields (1 - a^(k+1)) / (1 - a) tokens on average.
    Both step times come from the derived layer programs; in the memory-bound regime the check costs
    about one ordinary step, which is where the method wins."""
    if not 0 <= acceptance < 1 or draft < 1:
        raise UsageError("speculative decoding needs 0 <= acceptance < 1 and at least one draft token")
    t_draft = drafter.decode(batch, seq).step_time
    t_check = target.decode(batch, seq, new_tokens=draft + 1).step_time
    expected = (1 - acceptance ** (draft + 1)) / (1 - acceptance)
    round_time = draft * t_draft + t_check
    plain = target.decode(batch, seq).step_time
    return {"round_time": round_time, "tokens_per_round": expected, "check_step": t_check,
            "draft_step": t_draft, "tokens_per_s": batch * expected / round_time,
            "speedup": (expected / round_time) / (1 / plain)}




def critical_batch(hw, weight_dtype: str = "bf16", compute_dtype: str | None = None) -> float:
    """B_crit where a decode matmul turns compute-bound: solve T_math = T_hbm for B on the einsum
    ``Out[B, F] = In[B, D] *_D W[D, F]`` with its weight-streaming term (book Part 7: 240 on v5e in
    bf16, 120 with int8 weights and bf16 FLOPs, 240 int8 x int8)."""
    wd = dtypes.canonical(weight_dtype)
    cd = dtypes.canonical(compute_dtype) or ("bf16" if wd in ("int8", "int4", "fp8") else wd)
    act = cd if cd != "bf16" or wd == "bf16" else "bf16"
    plan = derive_program(f"Out:{act}[B, F] = In:{act}[B, D] *_D W:{wd}[D, F]")
    B, D, F = (sp.Symbol(n, positive=True, integer=True) for n in "BDF")
    weights = sp.expand(plan.t_hbm).coeff(D * F) * D * F     # the weight bytes dominate: B << D, F
    (b,) = sp.solve(sp.Eq(plan.t_math, weights), B)
    return float(b.xreplace({sp.Symbol("C", positive=True): hw.flops_for(cd),
                             sp.Symbol("W_hbm", positive=True): hw.hbm_bandwidth}))


def moe_critical_batch(cfg: ModelConfig, hw, weight_dtype: str = "bf16") -> float:
    """An MoE layer is compute-bound when each expert sees B_crit tokens: B > B_crit E / k."""
    return critical_batch(hw, weight_dtype) * cfg.E / cfg.k


__all__ = ["critical_batch", "kv_evicted_per_step", "min_topology", "moe_critical_batch", "prefill_generate_ratio",
           "speculative_decode", "train_estimate"]
