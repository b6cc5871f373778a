"""Mixture-of-experts layers in a training run: expert parallelism (``ep``) and what it costs.

An MoE model's first ``dense_layers`` layers have an ordinary MLP of width F; the others route each token
to ``k`` of ``E`` experts of width ``F_expert`` (plus the shared experts every token uses). A token's
MLP work is that of a dense MLP of width ``(k + shared) F_expert`` (uniform routing, as the book assumes);
the experts' weights, ``E`` of them, are split over the ``ep`` expert-parallel ranks (carved out of the
data-parallel replicas, as Megatron does), and every MoE layer moves its tokens to their experts and back
with two AllToAlls forward and two backward (each token's ``k`` copies of ``D`` values).

    >>> from symcost.models.config import load_model_config
    >>> ds = load_model_config("deepseek-v3")
    >>> active_width(ds), round(routed_params(ds) / 1e9, 1)
    (18432, 653.9)
"""
from __future__ import annotations

from ..errors import UsageError


def active_width(cfg) -> int:
    """The MLP width a token sees in an MoE layer: its k routed experts and the shared ones."""
    return (cfg.k + cfg.shared_experts) * (cfg.F_expert or cfg.F)


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


def dispatch_bytes(cfg, tokens: float) -> float:
    """Bytes one AllToAll moves for ``tokens`` tokens on a rank: each token's k copies of D bf16 values."""
    return 2 * tokens * cfg.k * cfg.D


def alltoalls(lay) -> float:
    """Seconds of an MoE layer's AllToAlls over the expert-parallel ranks of ``lay`` (a
    :class:`symcost.models.layer_cost.LayerCost`): tokens to their experts and back, forward and backward,
    and forward again with full recomputation; each priced by the collectives registry on an axis of
    ``ep`` devices laid out outside the ``tp`` ones."""
    if lay.ep == 1:
        return 0.0
    from .collective import collective_seconds
    tokens = lay.seq * lay.microbatch / (lay.cp * (lay.tp if lay.seq_parallel else 1))
    mesh = f"E={lay.ep}" + (f",I={lay.tp}" if lay.tp > 1 else "")
    one = collective_seconds(lay.hw, "AllToAll", dispatch_bytes(lay.cfg, tokens), lay.ep, mesh, "E")
    return one * (6 if lay.policy == "full" else 4)


__all__ = ["active_width", "moe_layers", "routed_params", "check", "dispatch_bytes", "alltoalls"]
