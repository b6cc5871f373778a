"""Multi-head latent attention (DeepSeek-V2/V3, arXiv 2405.04434 section 2.1) as einsums of the layer
program: keys and values come from one low-rank latent a token caches, so the KV cache holds
``kv_lora + rope_dim`` values a token and layer (DeepSeek-V3: 512 + 64 = 576) where ordinary attention
holds ``2 K H`` (32,768).

The dimensions: ``Rq`` the query latent (``q_lora``), ``Rkv`` the key-value latent (``kv_lora``), ``Hr``
the decoupled rotary key width (``rope_dim``, one rotary key a token shared by every head); the heads are
``K`` (with ``G = 1``: after the up-projections every head has its own key and value) of width ``H``.

Two forms of the same weights (the paper's appendix; every serving stack does this):

- ``naive`` (training, prefill): the cached latent ``Cc`` is projected up to keys ``Kc`` and values ``Vc``,
  then attention is the ordinary one over ``H + Hr`` query-key widths;
- ``absorbed`` (decoding): the key up-projection is folded into the query (``Qa = Qn W_kb``) and the value
  up-projection applied after attention, so attention runs in the latent and only the latent is read.

    >>> from symcost.models.config import load_model_config
    >>> params, lines, names = attention(load_model_config("deepseek-v3"), "", "", "", "", "", "", absorbed=True)
    >>> next(line for line in lines if line.startswith("An"))
    'An[B, T, S, K, G] = Qa[B, T, K, G, Rkv] *_Rkv Cc[B, S, Rkv]'
    >>> names["cache"], names["fused"]
    (('Cn', 'Kr'), ('An', 'Ar', 'A'))
"""
from __future__ import annotations


def attention(cfg, b: str, kb: str, h: str, f: str, w: str, kv: str, *, absorbed: bool = False, x: str = "X",
              rotary: bool = False, t: str = "", c: str = "") -> tuple:
    """(params line, statements, names) of the attention of ``cfg`` (an MLA model), laid out with the
    formatted axes ``b`` (batch), ``kb`` (the cache's batch), ``h`` (heads), ``f`` (FSDP), ``t`` (the new
    tokens) and ``c`` (the cache's tokens: context parallelism) and the dtype suffixes ``w`` (weights) and
    ``kv`` (cache), reading the layer's input ``x`` (``Xn`` once normalised). With the cache's tokens split,
    a decode step's scores are split as the cache is (their partial sums reduced), and a prompt's keys and
    values are made whole from the latent (the latent is what crosses the links, if the engine finds it
    cheaper than the keys and values).
    ``rotary``: the decoupled rotary parts of the queries (``Qr``) and of the new key (``Kr``) are rotated
    (``Qp``, ``Kp``) before attention reads them. ``names``: the weights, the new cache entries (what a
    token adds to the cache), the attention einsums (their FLOPs grow with the context) and the
    intermediates that stay on chip."""
    weights = []
    if cfg.q_lora:
        weights += [f"Wqa{w}[D{f}, Rq]", f"Wqn{w}[Rq, K{h}, G, H]", f"Wqr{w}[Rq, K{h}, G, Hr]"]
        q_in, q_dim = "Cq[B, T, Rq]", "Rq"
    else:
        weights += [f"Wqn{w}[D{f}, K{h}, G, H]", f"Wqr{w}[D{f}, K{h}, G, Hr]"]
        q_in, q_dim = f"{x}[B, T, D]", "D"
    weights += [f"Wkv{w}[D{f}, Rkv]", f"Wkr{w}[D{f}, Hr]", f"Wkb{w}[Rkv, K{h}, H]", f"Wvb{w}[Rkv, K{h}, H]",
                f"Wo{w}[K{h}, G, H, D{f}]"]
    sa = "" if t else c          # the scores' S: split as the cache is, but where the new tokens are split
    lines = [f"Cq[B{b}, T{t}, Rq] = {x}[B{b}, T{t}, D] *_D Wqa[D, Rq]"] if cfg.q_lora else []
    lines += [
        f"Qn[B{b}, T{t}, K{h}, G, H] = {q_in} *_{q_dim} Wqn[{q_dim}, K, G, H]",
        f"Qr[B{b}, T{t}, K{h}, G, Hr] = {q_in} *_{q_dim} Wqr[{q_dim}, K, G, Hr]",
        f"Cn{kv}[B{b}, T{t}, Rkv] = {x}[B, T, D] *_D Wkv[D, Rkv]",
        f"Kr{kv}[B{b}, T{t}, Hr] = {x}[B, T, D] *_D Wkr[D, Hr]",
    ]
    qr = "Qr"
    if rotary:
        lines += [f"Qp[B{b}, T{t}, K{h}, G, Hr] = Rotary(Qr[B, T, K, G, Hr])",
                  f"Kp{kv}[B{b}, T{t}, Hr] = Rotary(Kr[B, T, Hr])"]
        qr = "Qp"
    if absorbed:
        lines += [
            f"Qa[B{b}, T{t}, K{h}, G, Rkv] = Qn[B, T, K, G, H] *_H Wkb[Rkv, K, H]",
            f"An[B{kb}, T{t}, S{sa}, K{h}, G] = Qa[B, T, K, G, Rkv] *_Rkv Cc{kv}[B{kb}, S{c}, Rkv]",
            f"Ar[B{kb}, T{t}, S{sa}, K{h}, G] = {qr}[B, T, K, G, Hr] *_Hr Rc{kv}[B{kb}, S{c}, Hr]",
            f"A[B{kb}, T{t}, S{sa}, K{h}, G] = Add(An[B, T, S, K, G], Ar[B, T, S, K, G])",
            f"Cl[B{kb}, T{t}, K{h}, G, Rkv] = A[B, T, S, K, G] *_S Cc[B, S, Rkv]",
            f"Ctx[B{b}, T{t}, K{h}, G, H] = Cl[B, T, K, G, Rkv] *_Rkv Wvb[Rkv, K, H]",
        ]
        context = ("An", "Ar", "Cl")
    else:
        lines += [
            f"Kc[B{kb}, S{sa}, K{h}, H] = Cc{kv}[B{kb}, S{c}, Rkv] *_Rkv Wkb[Rkv, K, H]",
            f"Vc[B{kb}, S{sa}, K{h}, H] = Cc[B, S, Rkv] *_Rkv Wvb[Rkv, K, H]",
            f"An[B{kb}, T{t}, S{sa}, K{h}, G] = Qn[B, T, K, G, H] *_H Kc[B{kb}, S, K{h}, H]",
            f"Ar[B{kb}, T{t}, S{sa}, K{h}, G] = {qr}[B, T, K, G, Hr] *_Hr Rc{kv}[B{kb}, S{c}, Hr]",
            f"A[B{kb}, T{t}, S{sa}, K{h}, G] = Add(An[B, T, S, K, G], Ar[B, T, S, K, G])",
            f"Ctx[B{kb}, T{t}, K{h}, G, H] = A[B, T, S, K, G] *_S Vc[B, S, K, H]",
        ]
        context = ("An", "Ar", "Ctx")
    lines.append(f"Y[B{b}, T{t}, D] = Ctx[B, T, K, G, H] *_{{K,G,H}} Wo[K, G, H, D]")
    names = {"weights": tuple(x.split(":")[0].split("[")[0] for x in weights), "cache": ("Cn", "Kr"),
             "context": context, "fused": ("An", "Ar", "A")}
    return "param " + ", ".join(weights), lines, names


def sizes(cfg) -> dict:
    """The MLA dimensions' bindings (empty for ordinary attention)."""
    if not cfg.kv_lora:
        return {}
    out = {"Rkv": cfg.kv_lora, "Hr": cfg.rope_dim}
    if cfg.q_lora:
        out["Rq"] = cfg.q_lora
    return out
