"""What a model counts, read off its unsharded layer programs (:mod:`.transformer`): the bytes a token adds
to the KV cache, the FLOPs of a forward pass, the bytes of a layer's checkpoints.

    >>> from symcost.models.config import load_model_config
    >>> kv_bytes_per_token(load_model_config("llama3-70b"))
    327680
"""
from __future__ import annotations

import sympy as sp

from .. import caching, dtypes
from ..errors import UsageError
from ..layout import global_bytes
from ..program import derive_program
from .config import ModelConfig
from .transformer import (CHECKPOINT_ORDER, cache_entries, context_einsums, head_program, layer_program,
                          sizes)


@caching.memoize(maxsize=64)
def kv_bytes_per_token(cfg: ModelConfig, kv_dtype: str = "bf16") -> int:
    """The bytes a token adds to the KV cache, read off the layer program: 2 L K H for ordinary attention,
    L (kv_lora + rope_dim) for latent attention."""
    plan = derive_program(layer_program(cfg, {}, kv_dtype=kv_dtype, moe=False), mesh="X=1", moves="none")
    lay = {l.name: l for l in plan.layouts}
    dims = sizes(cfg, batch=1, seq=1, experts_moe=False)
    per_layer = sum(sp.sympify(global_bytes(lay[n], dims)) for n in cache_entries(cfg))
    return int(cfg.L * per_layer)


def forward_flops(cfg: ModelConfig, *, batch=1, seq=1, context=None, causal: bool = False,
                  attention: bool = True) -> float:
    """FLOPs of a forward pass over ``batch x seq`` new tokens attending to ``context`` keys (default:
    themselves), from the einsums of the unsharded programs. ``causal`` halves the attention FLOPs."""
    out = 0.0
    dims = sizes(cfg, batch=batch, seq=seq, context=context)
    kinds = [(False, cfg.dense_layers if cfg.is_moe else cfg.L)]
    if cfg.is_moe:
        kinds.append((True, cfg.L - cfg.dense_layers))
    for moe, count in kinds:
        if not count:
            continue
        plan = derive_program(layer_program(cfg, {}, moe=moe), mesh="X=1", dims=sizes(cfg, batch=batch, seq=seq,
                      context=context, experts_moe=moe), moves="none")
        layer = 0.0
        # the tokens an expert sees exactly, B T k / E (the plan's sizes are whole numbers)
        exact = {sp.Symbol("M", positive=True, integer=True): batch,
                 sp.Symbol("I", positive=True, integer=True): sp.Rational(seq * cfg.k, cfg.E)} if moe else {}
        for s in plan.steps:
            if not s.is_einsum:
                continue
            f = plan.evaluate(sp.sympify(s.flops).xreplace(exact))
            if s.tensor in context_einsums(cfg):
                if not attention:
                    continue
                f *= 0.5 if causal else 1.0
            layer += f
        out += count * layer
    head = derive_program(head_program(cfg, {}), mesh="X=1", dims=dims, moves="none")
    out += sum(head.evaluate(s.flops) for s in head.steps if s.is_einsum)
    return out


def flops_per_token(cfg: ModelConfig, seq: int = 0, causal: bool = False) -> dict:
    """Forward (inference) and training FLOPs per token at context ``seq`` (training = 3 x forward: the
    backward pass is twice the forward, book Part 4)."""
    fwd = forward_flops(cfg, batch=1, seq=max(1, seq), causal=causal) / max(1, seq)
    return {"inference": fwd, "train": 3 * fwd}


def checkpoint_bytes(cfg: ModelConfig, tokens: float, k: int, dtype: str = "bf16") -> float:
    """Activation memory of k checkpoints a layer for ``tokens`` tokens (the first k of
    ``CHECKPOINT_ORDER``; book Part 4 / Part 5 Question 2)."""
    if k < 0 or k > len(CHECKPOINT_ORDER):
        raise UsageError(f"checkpoints per layer must be between 0 and {len(CHECKPOINT_ORDER)}, not {k}")
    plan = derive_program(layer_program(cfg, {}, moe=False), mesh="X=1", moves="none")
    lay = {l.name: l for l in plan.layouts}
    dims = sizes(cfg, batch=1, seq=1, experts_moe=False)
    per_token = sum(float(global_bytes(lay[n], dims)) for n in CHECKPOINT_ORDER[:k] if n in lay)
    return per_token * dtypes.nbytes(dtype) / 2 * tokens * cfg.L


__all__ = ["checkpoint_bytes", "flops_per_token", "forward_flops", "kv_bytes_per_token"]
