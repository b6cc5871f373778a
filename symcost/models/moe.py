"""Mixture-of-experts decode: the critical batch from the layer program's expert einsum.

Each routed expert sees ``R = B T k / E`` tokens (uniform routing; the layer program's ``R``), so its matmul
``U1[E, R, F] = Xe[E, R, D] *_D W1[E, D, F]`` turns compute-bound at the same ``R`` a dense matmul does at
``B``, and the batch of sequences at which that happens is ``R_crit E / k``:

    >>> from symcost.hardware import hardware
    >>> from symcost.models.config import load_model_config
    >>> round(decode_critical_batch(load_model_config("deepseek-v3"), hardware("h100")))
    9447
"""
from __future__ import annotations

import sympy as sp

from ..program import derive_program
from .config import ModelConfig
from .transformer import layer_program


def expert_program(cfg: ModelConfig, dtype: str = "bf16") -> str:
    """The first expert matmul of the layer program (with its parameter declaration)."""
    lines = layer_program(cfg, {}, dtype=dtype, moe=True).splitlines()
    return "\n".join(l for l in lines if l.startswith("param W1") or l.startswith("U1["))


def decode_critical_batch(cfg: ModelConfig, hw, weight_dtype: str = "bf16", compute_dtype: str | None = None,
                          seq: int = 1) -> float:
    """Sequences a decode step must batch (``seq`` new tokens each) for the routed experts' matmuls to be
    compute-bound: solve T_math = T_hbm (the expert weights streamed) for R on the layer's expert einsum,
    then B = R E / (k T)."""
    if not cfg.is_moe:
        raise ValueError(f"{cfg.name} has no routed experts")
    plan = derive_program(expert_program(cfg, weight_dtype if weight_dtype != "bf16" else "bf16"))
    R, D, F, E = (sp.Symbol(n, positive=True, integer=True) for n in "RDFE")
    weights = sp.expand(plan.t_hbm).coeff(D * E * F) * D * E * F        # weight bytes dominate: R << D, F
    (r,) = sp.solve(sp.Eq(plan.t_math, weights), R)
    dtype = compute_dtype or ("bf16" if weight_dtype in ("int8", "int4", "fp8") else weight_dtype)
    r = float(r.xreplace({sp.Symbol("C", positive=True): hw.flops_for(dtype),
                          sp.Symbol("W_hbm", positive=True): hw.hbm_bandwidth}))
    return r * cfg.E / (cfg.k * seq)


__all__ = ["decode_critical_batch", "expert_program"]
