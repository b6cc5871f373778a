"""Mixture-of-experts decode: the critical batch from the layer program's expert einsum.

Each routed expert sees ``M x I = B T k / E`` tokens (uniform routing; the layer program's ``M`` and ``I``),
so its matmul ``U1[M, I, E, F] = Xe[M, I, E, D] *_D W1[E, D, F]`` turns compute-bound at the same number
of tokens ``R`` a dense matmul does at ``B``, and the batch of sequences at which that happens is
``R_crit E / k``:

    >>> from symcost.hardware import hardware
    >>> from symcost.models.config import load_model_config
    >>> round(decode_critical_batch(load_model_config("deepseek-v3"), hardware("h100")))
    9447
"""
from __future__ import annotations

import re

import sympy as sp

from ..program import derive_program
from .config import ModelConfig
from .transformer import layer_program


def expert_program(cfg: ModelConfig, dtype: str = "bf16") -> str:
    """The first expert matmul of the layer program (with its weight's declaration)."""
    lines = layer_program(cfg, {}, dtype=dtype, moe=True).splitlines()
    (params,) = [l for l in lines if " W1" in l and l.startswith("param ")]
    w1 = re.search(r"\bW1(:\w+)?\[[^\]]*\]", params)
    return "\n".join(["param " + w1.group(0)] + [l for l in lines if l.startswith("U1[")])


def decode_critical_batch(cfg: ModelConfig, hw, weight_dtype: str = "bf16", compute_dtype: str | None = None,
                          seq: int = 1) -> float:
    """Sequences a decode step must batch (``seq`` new tokens each) for the routed experts' matmuls to be
    compute-bound: solve T_math = T_hbm (the expert weights streamed) for the tokens an expert sees,
    R = M x I, on the layer's expert einsum, then B = R E / (k T)."""
    if not cfg.is_moe:
        raise ValueError(f"{cfg.name} has no routed experts")
    plan = derive_program(expert_program(cfg, weight_dtype if weight_dtype != "bf16" else "bf16"))
    M, I, D, F, E = (sp.Symbol(n, positive=True, integer=True) for n in "MIDFE")
    R = sp.Symbol("R", positive=True)
    weights = sp.expand(plan.t_hbm).coeff(D * E * F) * D * E * F        # weight bytes dominate: R << D, F
    (r,) = sp.solve(sp.Eq(plan.t_math.xreplace({M: R, I: 1}), weights), R)
    dtype = compute_dtype or ("bf16" if weight_dtype in ("int8", "int4", "fp8") else weight_dtype)
    r = float(r.xreplace({sp.Symbol("C", positive=True): hw.flops_for(dtype),
                          sp.Symbol("W_hbm", positive=True): hw.hbm_bandwidth}))
    return r * cfg.E / (cfg.k * seq)


__all__ = ["decode_critical_batch", "expert_program"]
