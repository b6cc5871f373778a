"""Mixture-of-experts layers in a training run: expert parallelism (``ep``) and what it costs.

An MoE model's first ``dense_layers`` layers have an ordinary MLP of width F; the others route each token
to ``k`` of ``E`` experts of width ``F_expert`` (plus the shared experts every token uses), chosen by a
router that scores all ``E``. A token's MLP work is the router's, its ``k`` experts' and the shared
experts' (uniform routing, as the book assumes); the experts' weights, ``E`` of them, are split over
the ``ep`` expert-parallel ranks (carved out of the data-parallel replicas, as Megatron does): a mesh
axis of the layer's plan (:func:`symcost.models.expert_layer.moe_block`, the statements a serving layer
runs too), over which the plan moves each token's ``k`` copies of ``D`` values to their experts and back, two
AllToAlls forward and their transposes backward, priced by the collectives registry on that axis's links.

    >>> from symcost.models.config import load_model_config
    >>> ds = load_model_config("deepseek-v3")
    >>> round(routed_params(ds) / 1e9, 1)
    653.9
"""
from __future__ import annotations

from ..errors import UsageError


def moe_layers(cfg) -> int:
    return cfg.L - cfg.dense_layers if cfg.is_moe else 0


def routed_params(cfg) -> float:
    """Parameters of the routed experts, all layers (what expert parallelism splits), from the counts the
    layer program gives: the MLP parameters a token does not use are E - k of the E routed experts."""
    if not cfg.is_moe:
        return 0
    from .transformer import param_counts
    p = param_counts(cfg)
    return (p["mlp"] - p["mlp_active"]) * cfg.E // (cfg.E - cfg.k)


def check(cfg, ep: int, replicas: int) -> None:
    if ep < 1:
        raise UsageError(f"--ep must be at least 1, not {ep}")
    if ep == 1:
        return
    if not cfg.is_moe:
        raise UsageError(f"--ep {ep}: {cfg.name} has no experts to split")
    if cfg.E % ep:
        raise UsageError(f"--ep {ep} does not divide {cfg.name}'s {cfg.E} experts")
    if replicas % ep:
        raise UsageError(f"--ep {ep} must divide the data-parallel replicas (--dp x --cp = {replicas}): expert "
                         f"parallelism splits them")


__all__ = ["moe_layers", "routed_params", "check"]
