"""An MoE layer's MLP as a training run executes it: the statements of the layer program between the norm
and the residual add (tokens to their experts and back over the expert-parallel axes), and their sizes.

    >>> from symcost.models.config import load_model_config
    >>> _, lines = training_block(load_model_config("mixtral-8x7b"), ep_axes=("X",), tp_axes=("Y",), c="", o="_Y")
    >>> lines[2]
    'AllToAll_X(Xr[M_X, I_Y, E, D]) -> Xe[M, I_Y, E_X, D]'
"""
from __future__ import annotations

from ..notation import format_axes


def training_block(cfg, *, ep_axes: tuple, tp_axes: tuple, c: str, o: str, w: str = "") -> tuple[str, list[str]]:
    """The MLP of an MoE layer as a training run executes it, after the norm ``Rn[B, T{o}, D]``: each
    token copied to its ``J = k`` experts (the permutation, a product with the router's weights ``Gk``),
    viewed as ``M x I`` tokens for each of the ``E`` experts, sent to the experts' ranks by an AllToAll over
    the expert-parallel axes ``ep_axes`` (which split the experts and, in the layer, the tokens' batch),
    gathered over ``tp_axes`` (with sequence parallelism each tensor-parallel rank sends its own tokens,
    as Megatron-Core's AllToAll dispatcher does), the experts' MLP (F split over ``tp_axes``), the way
    back, and each token's ``k`` results summed with the router's weights (the unpermutation); the shared
    experts are a dense MLP beside them. Returns the weights' declarations and the statements, ending in
    ``Z[B, T{o}, D]``."""
    b, m = format_axes(tuple(ep_axes)), format_axes(tuple(tp_axes))
    gated = cfg.gated
    weights = [f"W1{w}[E{b}, D, F{m}]"] + ([f"W2{w}[E{b}, D, F{m}]"] if gated else []) + [f"W3{w}[E{b}, F{m}, D]"]
    if cfg.shared_experts:
        weights += [f"Ws1{w}[D, L{m}]"] + ([f"Ws2{w}[D, L{m}]"] if gated else []) + [f"Ws3{w}[L{m}, D]"]
    tok, sent, ex = f"B{b}, T{o}", f"M, I{o}, E{b}", f"M, I{c}, E{b}"
    lines = [f"Xk[{tok}, J, D] = Rn[{tok}, D] * Gk[{tok}, J]",
             f"Xr[M{b}, I{o}, E, D] = View(Xk[{tok}, J, D])"]
    if b:
        lines.append(f"AllToAll{b}(Xr[M{b}, I{o}, E, D]) -> Xe[{sent}, D]")
    else:
        lines.append(f"Xe[{sent}, D] = View(Xr[{sent}, D])")
    if o != c:
        lines.append(f"Xe[{ex}, D] = Xe[{sent}, D]")
    lines += _mlp(gated, f"[{ex}, F{m}]", f"Xe[{ex}, D]", ("U1", "U2", "Ua", "Ug"),
                  (f"W1[E{b}, D, F{m}]", f"W2[E{b}, D, F{m}]"))
    lines.append(f"Ze[{sent}, D] = Ug[{ex}, F{m}] *_F W3[E{b}, F{m}, D]")
    if b:
        lines.append(f"AllToAll{b}(Ze[{sent}, D]) -> Zb[M{b}, I{o}, E, D]")
    else:
        lines.append(f"Zb[{sent}, D] = View(Ze[{sent}, D])")
    out = "Zr" if cfg.shared_experts else "Z"
    lines += [f"Zk[{tok}, J, D] = View(Zb[M{b}, I{o}, E, D])",
              f"{out}[{tok}, D] = Zk[{tok}, J, D] *_J Gk[{tok}, J]"]
    if cfg.shared_experts:
        whole = f"B{b}, T{c}"
        if o != c:
            lines.append(f"Rn[{whole}, D] = Rn[{tok}, D]")
        lines += _mlp(gated, f"[{whole}, L{m}]", f"Rn[{whole}, D]", ("S1", "S2", "Sa", "Sg"),
                      (f"Ws1[D, L{m}]", f"Ws2[D, L{m}]"))
        lines += [f"Zs[{tok}, D] = Sg[{whole}, L{m}] *_L Ws3[L{m}, D]",
                  f"Z[{tok}, D] = Add(Zr[{tok}, D], Zs[{tok}, D])"]
    return ", ".join(weights), lines


def _mlp(gated: bool, dims: str, x: str, names: tuple, weights: tuple) -> list[str]:
    """A (gated) MLP's up projections and activation: ``names`` = (up, gate, activation, product)."""
    up, gate, act, prod = names
    if not gated:
        return [f"{up}{dims} = {x} *_D {weights[0]}", f"{prod}{dims} = GeLU({up}{dims})"]
    return [f"{up}{dims} = {x} *_D {weights[0]}", f"{gate}{dims} = {x} *_D {weights[1]}",
            f"{act}{dims} = SiLU({up}{dims})", f"{prod}{dims} = Mul({act}{dims}, {gate}{dims})"]


def training_sizes(cfg, microbatch: int, seq: int, ep: int) -> dict:
    """The dimensions of :func:`training_block`: the batch over the ``ep`` ranks (each its own microbatch),
    ``J = k`` experts a token, ``M x I = B T k / E`` tokens an expert, F an expert's width, L the shared
    experts' together."""
    width = cfg.F_expert or cfg.F
    return {"B": microbatch * ep, "E": cfg.E, "J": cfg.k, "M": microbatch * ep,
            "I": max(1, round(seq * cfg.k / cfg.E)), "F": width, "L": max(1, cfg.shared_experts) * width}


__all__ = ["training_block", "training_sizes"]
