"""An MoE layer's MLP, written once: the statements between the norm and the residual add that both the
training layer program (:func:`symcost.models.transformer.training_program`) and the serving one
(:func:`symcost.models.transformer.layer_program`) use, and their sizes.

The layer is the router -- the gate logits ``Lg[B, T, Er] = Rn[B, T, D] *_D Wr[D, Er]`` and their softmax
and top-k (``TopK_Er``: each token's ``J = k`` expert weights ``Gk``) -- then each token copied, unweighted,
to its k experts (the permutation: ``Dispatch_J``, a gather steered by the router's choice, which moves
the bytes Megatron-Core's permute moves), viewed as ``M x I`` tokens for each of the ``E`` experts, the
experts' MLP, the way back, each token's k results summed with its weights ``Gk`` (the unpermutation, the
one place the gate multiplies), and the shared experts, a dense MLP beside them. ``Er`` is every routed
expert (what the router scores); ``E`` the experts the plan runs, which a serving step binds to the experts
its batch reaches.

    >>> from symcost.models.config import load_model_config
    >>> _, lines = moe_block(load_model_config("mixtral-8x7b"), batch="_X", experts="_X", width="_Y")
    >>> lines[:2]
    ['Lg[B_X, T, Er] = Rn[B_X, T, D] *_D Wr[D, Er]', 'Gk[B_X, T, J] = TopK_Er(Lg[B_X, T, Er])']
    >>> lines[4]
    'AllToAll_X(Xr[M_X, I, E, D]) -> Xe[M, I, E_X, D]'
"""
from __future__ import annotations

#: the MLP weights of an MoE layer: the router, the routed experts, the shared experts
ROUTER = ("Wr",)
ROUTED = ("W1", "W2", "W3")
SHARED = ("Ws1", "Ws2", "Ws3")


def moe_block(cfg, *, x: str = "Rn", batch: str = "", seq: str = "", inner: str | None = None,
              experts: str = "", width: str = "", shared: str | None = None, fsdp: str = "", w: str = "",
              elementwise: bool = True) -> tuple[list[str], list[str]]:
    """The MLP of an MoE layer on its input ``x[B{batch}, T{seq}, D]``, ending in ``Z[B{batch}, T{seq}, D]``.
    Returns the weights' declarations and the statements. Each argument is a mesh-axes suffix
    (``"_X"``, ``"_{Y,Z}"`` or ``""``):

    - ``batch``: the tokens' batch (B, and M, the tokens an expert receives, per sequence group);
    - ``seq``: the tokens as the MLP receives and returns them; ``inner`` (default ``seq``) inside the
      experts (with sequence parallelism each tensor-parallel rank sends its own tokens and the experts'
      tokens are gathered over those axes, as Megatron-Core's AllToAll dispatcher does);
    - ``experts``: the axes that split the routed experts. Where they also split the batch (training's
      expert parallelism, carved out of the data-parallel ranks) the tokens go to the experts' ranks and
      back by AllToAlls over them; where the tokens are whole on each device (serving), each device takes
      the tokens its experts receive and every device gathers the experts' outputs back;
    - ``width``: the axes that split each expert's F (a tensor-parallel MLP; its output reduced over them);
    - ``shared``: the axes that split the shared experts' width L (default ``width``);
    - ``fsdp``: the axes that split the weights' D.

    ``elementwise``: the router's softmax and top-k, the tokens' way to their experts and back (the
    permutation, the views, the weighted sum) and the activations, as the engine's statements. Without it
    the layer's matmuls alone, as the book counts a layer and a matmul-only trace has them: the router's
    logits, the experts' matmuls on their tokens ``Xe`` (an input; gathered back where the experts are
    split) and the shared experts'."""
    inner = seq if inner is None else inner
    shared = width if shared is None else shared
    a2a = bool(experts) and batch == experts
    mb = "" if a2a else batch                         # the AllToAll moves the split from M to E
    tok, sent, ex = f"B{batch}, T{seq}", f"M{mb}, I{seq}, E{experts}", f"M{mb}, I{inner}, E{experts}"
    lines = [f"Lg[{tok}, Er] = {x}[{tok}, D] *_D Wr[D, Er]"]
    if elementwise:
        lines += [f"Gk[{tok}, J] = TopK_Er(Lg[{tok}, Er])",
                  f"Xk[{tok}, J, D] = Dispatch_J({x}[{tok}, D], Gk[{tok}, J])",
                  f"Xr[M{batch}, I{seq}, E, D] = View(Xk[{tok}, J, D])"]
        lines.append(f"AllToAll{experts}(Xr[M{experts}, I{seq}, E, D]) -> Xe[{sent}, D]" if a2a
                     else f"Xe[{sent}, D] = View(Xr[{sent}, D])")
    elif a2a:
        lines.append(f"AllToAll{experts}(Xr[M{experts}, I{seq}, E, D]) -> Xe[{sent}, D]")
    if inner != seq:
        lines.append(f"Xe[{ex}, D] = Xe[{sent}, D]")
    lines += _mlp(cfg.gated, f"[{ex}, F{width}]", f"Xe[{ex}, D]", ("U1", "U2", "Ua", "Ug"),
                  ("W1[E, D, F]", "W2[E, D, F]"), elementwise)
    lines.append(f"Ze[{sent}, D] = {'Ug' if elementwise else 'U1'}[{ex}, F{width}] *_F W3[E, F, D]")
    lines += _back(cfg, tok, sent, batch, mb, experts, seq, a2a, elementwise)
    if cfg.shared_experts:
        lines += _shared(cfg, x, tok, f"B{batch}, T{inner}", shared, elementwise)
    return _weights(cfg, experts, width, shared, fsdp, w), lines


def _weights(cfg, e: str, width: str, shared: str, f: str, w: str) -> list[str]:
    """The declarations: the router, the routed experts (split over ``e`` and ``width``), the shared ones."""
    gated = cfg.gated
    out = [f"Wr{w}[D{f}, Er]", f"W1{w}[E{e}, D{f}, F{width}]"] + (
        [f"W2{w}[E{e}, D{f}, F{width}]"] if gated else []) + [f"W3{w}[E{e}, F{width}, D{f}]"]
    if cfg.shared_experts:
        out += [f"Ws1{w}[D{f}, L{shared}]"] + ([f"Ws2{w}[D{f}, L{shared}]"] if gated else []) + [
            f"Ws3{w}[L{shared}, D{f}]"]
    return out


def _back(cfg, tok: str, sent: str, batch: str, mb: str, e: str, seq: str, a2a: bool, elementwise: bool) -> list[str]:
    """The experts' outputs back to their tokens: by an AllToAll, or gathered over the experts' axes; then
    (``elementwise``) each token's k results summed with the router's weights, ending in ``Z`` (``Zr``
    where shared experts are added after)."""
    if a2a:
        lines = [f"AllToAll{e}(Ze[{sent}, D]) -> Zb[M{e}, I{seq}, E, D]"]
    elif elementwise:
        lines = [f"Zb[M{mb}, I{seq}, E, D] = View(Ze[M{mb}, I{seq}, E, D])"]
    else:
        return [f"Ze[M{mb}, I{seq}, E, D] = Ze[{sent}, D]"] if e else []
    if not elementwise:
        return lines
    out = "Zr" if cfg.shared_experts else "Z"
    return lines + [f"Zk[{tok}, J, D] = View(Zb[M{batch}, I{seq}, E, D])",
                    f"{out}[{tok}, D] = Zk[{tok}, J, D] *_J Gk[{tok}, J]"]


def _shared(cfg, x: str, tok: str, whole: str, shared: str, elementwise: bool) -> list[str]:
    """The shared experts, a dense MLP of width L on every token (its tokens gathered first where the MLP
    receives them split), added to the routed experts' result."""
    lines = [f"{x}[{whole}, D] = {x}[{tok}, D]"] if whole != tok else []
    lines += _mlp(cfg.gated, f"[{whole}, L{shared}]", f"{x}[{whole}, D]", ("S1", "S2", "Sa", "Sg"),
                  ("Ws1[D, L]", "Ws2[D, L]"), elementwise)
    lines.append(f"Zs[{tok}, D] = {'Sg' if elementwise else 'S1'}[{whole}, L{shared}] *_L Ws3[L, D]")
    if elementwise:
        lines.append(f"Z[{tok}, D] = Add(Zr[{tok}, D], Zs[{tok}, D])")
    return lines


def _mlp(gated: bool, dims: str, x: str, names: tuple, weights: tuple, elementwise: bool) -> list[str]:
    """A (gated) MLP's up projections and activation: ``names`` = (up, gate, activation, product); without
    ``elementwise`` the up projections alone."""
    up, gate, act, prod = names
    lines = [f"{up}{dims} = {x} *_D {weights[0]}"] + ([f"{gate}{dims} = {x} *_D {weights[1]}"] if gated else [])
    if not elementwise:
        return lines
    if not gated:
        return lines + [f"{prod}{dims} = GeLU({up}{dims})"]
    return lines + [f"{act}{dims} = SiLU({up}{dims})", f"{prod}{dims} = Mul({act}{dims}, {gate}{dims})"]


def moe_sizes(cfg, batch: int, seq: int) -> dict:
    """The dimensions of :func:`moe_block` for ``batch`` sequences of ``seq`` tokens: ``Er = E`` routed
    experts, ``J = k`` experts a token, ``M x I = B T k / E`` tokens an expert (``I = T k / E`` a sequence
    and ``M = B`` where that is whole, as in training; where it is not, as when decoding a token a
    sequence, ``I`` is one and ``M`` the tokens an expert sees, rounded, at least one: a serving step binds
    the exact share when it prices), F an expert's width, L the shared experts' together."""
    width = cfg.F_expert or cfg.F
    per_sequence = max(1, round(seq * cfg.k / cfg.E))
    groups = max(1, round(batch * seq * cfg.k / (cfg.E * per_sequence)))
    return {"E": cfg.E, "Er": cfg.E, "J": cfg.k, "M": groups, "I": per_sequence, "F": width,
            "L": max(1, cfg.shared_experts) * width}


def training_sizes(cfg, microbatch: int, seq: int, ep: int) -> dict:
    """The sizes of a training run's MoE layer: the batch over the ``ep`` ranks (each its own microbatch)."""
    return {"B": microbatch * ep, **moe_sizes(cfg, microbatch * ep, seq)}


__all__ = ["moe_block", "moe_sizes", "training_sizes", "ROUTER", "ROUTED", "SHARED"]
