"""A transformer layer as a program of sharded einsums, and the counts derived from it (book Part 4).

    >>> from symcost.models.config import load_model_config
    >>> print(layer_program(load_model_config("llama3-8b"), {}).splitlines()[3])
    Q[B, T, K, G, H] = Xn[B, T, D] *_D Wq[D, K, G, H]

The layer is the book's: Q/K/V/O projections with K key/value heads of G query heads each, the two
attention einsums against the keys and values ``Kc[B, S, K, H]`` / ``Vc[B, S, K, H]`` (the KV cache when
decoding, the sequence itself in training or prefill, with S = T), and a gated MLP (U1, U2 -> W3). An
MoE layer routes M x I = B T k / E tokens to each of E experts. Every count here -- parameters, FLOPs, KV
bytes -- is read off the derived plan of that program, so another sharding or dtype changes them by
derivation. The elementwise work a server runs between the matmuls (norms, rotary embedding, the MLP's
activation and gate, residual adds) is in the layer as the engine's elementwise statements, so a decode or
prefill step pays each of their kernels and bytes; ``elementwise=False`` gives the book's matmuls alone.
An MoE layer's MLP -- the router, the routed and the shared experts -- is
:func:`symcost.models.expert_layer.moe_block`, the same statements a training layer runs.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import sympy as sp

from .. import caching
from ..layout import global_bytes
from ..notation import format_axes, parse
from ..program import derive_program
from . import mla
from .expert_layer import ROUTED, ROUTER, SHARED, moe_block, moe_sizes
from .config import ModelConfig

WEIGHTS_ATTN = ("Wq", "Wk", "Wv", "Wo")
#: the MLP's weights: a dense MLP's W1, W2, W3 (an MoE layer's routed experts), and an MoE layer's router and
#: shared experts
WEIGHTS_MLP = ROUTED + ROUTER + SHARED
#: the einsums of attention proper (their FLOPs grow with the context; causal masking halves them)
ATTENTION = ("A", "Ctx")
#: activations checkpointed by ``checkpoints-per-layer`` k: the first k of these (book Part 4: one
#: checkpoint a layer is the layer's output; Part 5 Question 2: the three big MLP matmuls' outputs)
CHECKPOINT_ORDER = ("Out", "U1", "U2", "Y", "Ctx", "Q", "Kn", "Vn")


@dataclass(frozen=True)
class Sharding:
    """Mesh axes for each role: ``model`` splits heads and F, ``kv_batch`` the KV cache's batch,
    ``batch`` the activations' batch (data parallelism), ``fsdp`` the weights' D, ``experts`` an MoE
    layer's routed experts (expert parallelism; the ``model`` axes not among them split each expert's F),
    ``context`` the tokens: the KV cache's S and a prompt's T (context parallelism)."""

    model: tuple[str, ...] = ()
    heads: tuple[str, ...] = ()
    kv_batch: tuple[str, ...] = ()
    batch: tuple[str, ...] = ()
    fsdp: tuple[str, ...] = ()
    experts: tuple[str, ...] = ()
    context: tuple[str, ...] = ()

    @property
    def expert_width(self) -> tuple[str, ...]:
        """The axes that split each expert's F: the model axes that do not split the experts."""
        return tuple(a for a in self.model if a not in self.experts)


def experts_over(axes) -> str:
    """``; experts over Y,Z``: how a layout names the axes its routed experts are split over ("" for none)."""
    return f"; experts over {','.join(axes)}" if axes else ""


def tokens_over(axes) -> str:
    """``; tokens over Z``: how a layout names the axes that split its tokens (context parallelism)."""
    return f"; tokens over {','.join(axes)}" if axes else ""


def norm_kind(cfg: ModelConfig) -> str:
    """The layer's normalisation: RMSNorm in a gated (LLaMA-style) model, LayerNorm in a GPT-style one."""
    return "RMSNorm" if cfg.gated else "LayerNorm"


def activation(cfg: ModelConfig, rows: str, cols: str) -> list[str]:
    """The MLP's elementwise work between its input and output matmuls, on ``U1`` (and ``U2``) laid out as
    ``[rows, cols]``, ending in ``Ug``: SiLU and the gate's product (two operations, one kernel once fused)
    in a gated model, GeLU in an ungated one."""
    if cfg.gated:
        return [f"Ua[{rows}, {cols}] = SiLU(U1[{rows}, {cols}])",
                f"Ug[{rows}, {cols}] = Mul(Ua[{rows}, {cols}], U2[{rows}, {cols}])"]
    return [f"Ug[{rows}, {cols}] = GeLU(U1[{rows}, {cols}])"]


def layer_program(cfg: ModelConfig, sharding, *, dtype: str = "bf16", kv_dtype: str | None = None,
                  moe: bool | None = None, absorbed: bool = False, elementwise: bool = True,
                  prompt: bool = False) -> str:
    """The program of one layer, with ``param`` declarations, laid out by ``sharding``. A model with
    latent attention has its attention from :func:`symcost.models.mla.attention` (``absorbed``: the form
    a decoder runs, attention in the latent).

    With ``elementwise`` (the default) the layer has the work a server runs between its matmuls, each
    statement one of the engine's elementwise rules, so that its kernels, their floors and their HBM traffic
    are priced as the matmuls are: the norm before attention (``Xn``) and before the MLP (``Rn``), the
    rotary embedding of the new queries and keys in a gated (LLaMA-style) model (a GPT-style model adds
    learned positions once, at the embedding), the residual adds (``R``, ``Out``) and the MLP's activation
    (:func:`activation`). Softmax is not written: flash attention keeps the scores on chip and runs them
    within the kernel of the scores' einsum (:func:`on_chip`). An MoE layer's MLP is
    :func:`symcost.models.expert_layer.moe_block` (its router, its softmax and top-k, the tokens to their
    experts and back, the shared experts) with the routed experts split over ``sharding.experts`` and each
    expert's F over the other model axes, the shared experts' width over every model axis, the tokens whole
    on each device. Without ``elementwise``: the matmuls alone, as the book counts a layer.

    ``sharding.context`` splits the KV cache's tokens S (context parallelism) and, for a ``prompt`` (the
    new tokens T are the prompt), T too: a device projects its own tokens, gathers the keys and values
    over those axes and attends from its queries to all of them. A decode step's token attends to each
    device's block of S, and its partial sums are reduced over those axes."""
    sh = sharding if isinstance(sharding, Sharding) else Sharding(**(sharding or {}))
    kv_dtype = kv_dtype or dtype
    c = format_axes(sh.context)
    t, sa = (c, "") if prompt else ("", c)      # the new tokens' split, and the scores' S
    b, kb = format_axes(sh.batch), format_axes(sh.kv_batch or sh.batch)
    m, h, f = format_axes(sh.model), format_axes(sh.heads), format_axes(sh.fsdp)
    w = f":{dtype}" if dtype != "bf16" else ""
    kv = f":{kv_dtype}" if kv_dtype != "bf16" else ""
    moe = cfg.is_moe if moe is None else moe
    x = "Xn" if elementwise else "X"
    rotary = elementwise and cfg.gated
    if cfg.is_mla:
        params, attn, _ = mla.attention(cfg, b, kb, h, f, w, kv, absorbed=absorbed, x=x, rotary=rotary, t=t, c=c)
        lines = [params]
    else:
        q = "Qr" if rotary else "Q"
        lines = [f"param Wq{w}[D{f}, K{h}, G, H], Wk{w}[D{f}, K{h}, H], Wv{w}[D{f}, K{h}, H], Wo{w}[K{h}, G, H, D{f}]"]
        attn = [
            f"Q[B{b}, T{t}, K{h}, G, H] = {x}[B{b}, T{t}, D] *_D Wq[D, K, G, H]",
            f"Kn{kv}[B{b}, T{t}, K{h}, H] = {x}[B, T, D] *_D Wk[D, K, H]",
            f"Vn{kv}[B{b}, T{t}, K{h}, H] = {x}[B, T, D] *_D Wv[D, K, H]",
        ]
        if rotary:
            attn += [f"Qr[B{b}, T{t}, K{h}, G, H] = Rotary(Q[B, T, K, G, H])",
                     f"Kr{kv}[B{b}, T{t}, K{h}, H] = Rotary(Kn[B, T, K, H])"]
        attn += [
            f"A[B{kb}, T{t}, S{sa}, K{h}, G] = {q}[B, T, K, G, H] *_H Kc{kv}[B{kb}, S{c}, K{h}, H]",
            f"Ctx[B{kb}, T{t}, K{h}, G, H] = A[B, T, S, K, G] *_S Vc{kv}[B{kb}, S{c}, K{h}, H]",
            f"Y[B{b}, T{t}, D] = Ctx[B, T, K, G, H] *_{{K,G,H}} Wo[K, G, H, D]",
        ]
    if elementwise:
        attn = [f"Xn[B{b}, T{t}, D] = {norm_kind(cfg)}_D(X[B{b}, T{t}, D])", *attn,
                f"R[B{b}, T{t}, D] = Add(X[B{b}, T{t}, D], Y[B{b}, T{t}, D])",
                f"Rn[B{b}, T{t}, D] = {norm_kind(cfg)}_D(R[B{b}, T{t}, D])"]
    y = "Rn" if elementwise else "Y"
    if moe:
        weights, mlp = moe_block(cfg, x=y, batch=b, seq=t, experts=format_axes(sh.experts),
                                 width=format_axes(sh.expert_width), shared=m, fsdp=f, w=w, elementwise=elementwise)
        lines.append("param " + ", ".join(weights))
    else:
        lines.append(f"param W1{w}[D{f}, F{m}]" + (f", W2{w}[D{f}, F{m}]" if cfg.gated else "")
                     + f", W3{w}[F{m}, D{f}]")
    lines += attn
    if moe:
        lines += mlp
        if elementwise:
            lines.append(f"Out[B{b}, T{t}, D] = Add(R[B{b}, T{t}, D], Z[B{b}, T{t}, D])")
        return "\n".join(lines)
    lines.append(f"U1[B{b}, T{t}, F{m}] = {y}[B, T, D] *_D W1[D, F]")
    if cfg.gated:
        lines.append(f"U2[B{b}, T{t}, F{m}] = {y}[B, T, D] *_D W2[D, F]")
    if elementwise:
        lines += activation(cfg, f"B{b}, T{t}", f"F{m}")
        lines += [f"Z[B{b}, T{t}, D] = Ug[B, T, F] *_F W3[F, D]",
                  f"Out[B{b}, T{t}, D] = Add(R[B{b}, T{t}, D], Z[B{b}, T{t}, D])"]
    else:
        lines.append(f"Out[B{b}, T{t}, D] = U1[B, T, F] *_F W3[F, D]")
    return "\n".join(lines)


def training_program(cfg: ModelConfig, *, tp_axes: tuple = (), cp_axes: tuple = (), seq_parallel: bool = False,
                     dtype: str = "bf16", moe: bool = False, ep_axes: tuple = ()) -> str:
    """One layer as a training run executes it: :func:`layer_program`'s projections, attention and MLP with the
    work between them -- the norms, the attention core (softmax, and dropout where the model trains with it),
    dropout and the residual adds -- so that its backward pass, the tensors that pass saves and its
    collectives all come from the derivation. ``tp_axes`` split the heads and F (Megatron's tensor
    parallelism); ``cp_axes`` split the tokens (context parallelism: each rank gathers the keys and values);
    ``seq_parallel`` also splits the tokens over ``tp_axes`` between the tensor-parallel regions, gathered
    once before each region (Megatron's g) and reduce-scattered after it. An MoE layer (``moe``) has
    :func:`symcost.models.expert_layer.moe_block` for its MLP (the statements a serving layer runs): its
    router, its experts split over ``ep_axes``, which also split the batch (expert parallelism carved out of
    the data-parallel ranks), tokens sent to their experts and back by AllToAlls over them.

    A GPT-style model (ungated MLP) has LayerNorm, GeLU and dropout (Megatron's GPT runs train with
    dropout 0.1); a gated one RMSNorm, SiLU and the gate's product, and no dropout (LLaMA's configs set
    none)."""
    m = format_axes(tuple(tp_axes))
    c = format_axes(tuple(cp_axes))
    o = format_axes(tuple(cp_axes) + (tuple(tp_axes) if seq_parallel else ()))
    w = f":{dtype}" if dtype != "bf16" else ""
    norm = norm_kind(cfg)
    drop = not cfg.gated
    if moe:
        b = format_axes(tuple(ep_axes))
        weights, mlp = moe_block(cfg, batch=b, seq=o, inner=c, experts=b, width=m, w=w)
        mlp_params = ", ".join(weights)
    else:
        mlp_params = f"W1{w}[D, F{m}]" + (f", W2{w}[D, F{m}]" if cfg.gated else "") + f", W3{w}[F{m}, D]"
        mlp = [f"U1[B, T{c}, F{m}] = Rn[B, T{c}, D] *_D W1[D, F{m}]"]
        if cfg.gated:
            mlp.append(f"U2[B, T{c}, F{m}] = Rn[B, T{c}, D] *_D W2[D, F{m}]")
        mlp += activation(cfg, f"B, T{c}", f"F{m}")
        mlp.append(f"Z[B, T{o}, D] = Ug[B, T{c}, F{m}] *_F W3[F{m}, D]")
    lines = [f"param Wq{w}[D, K{m}, G, H], Wk{w}[D, K{m}, H], Wv{w}[D, K{m}, H], Wo{w}[K{m}, G, H, D], " + mlp_params,
             f"Xn[B, T{o}, D] = {norm}_D(X[B, T{o}, D])"]
    if o != c:
        lines.append(f"Xn[B, T{c}, D] = Xn[B, T{o}, D]")
    lines += [f"Q[B, T{c}, K{m}, G, H] = Xn[B, T{c}, D] *_D Wq[D, K{m}, G, H]",
              f"Kn[B, T{c}, K{m}, H] = Xn[B, T{c}, D] *_D Wk[D, K{m}, H]",
              f"Vn[B, T{c}, K{m}, H] = Xn[B, T{c}, D] *_D Wv[D, K{m}, H]",
              f"Ks[B, S{c}, K{m}, H] = View(Kn[B, T{c}, K{m}, H])",
              f"Vs[B, S{c}, K{m}, H] = View(Vn[B, T{c}, K{m}, H])"]
    if c:    # each rank gathers the keys and values, and keeps its own for the backward pass (gathered again)
        lines += [f"Ks[B, S, K{m}, H] = Ks[B, S{c}, K{m}, H]", f"Vs[B, S, K{m}, H] = Vs[B, S{c}, K{m}, H]"]
    lines += [
              f"A[B, T{c}, S, K{m}, G] = Q[B, T{c}, K{m}, G, H] *_H Ks[B, S, K{m}, H]",
              f"P[B, T{c}, S, K{m}, G] = Softmax_S(A[B, T{c}, S, K{m}, G])"]
    probs = "P"
    if drop:
        lines.append(f"Pd[B, T{c}, S, K{m}, G] = Dropout(P[B, T{c}, S, K{m}, G])")
        probs = "Pd"
    lines.append(f"Ctx[B, T{c}, K{m}, G, H] = {probs}[B, T{c}, S, K{m}, G] *_S Vs[B, S, K{m}, H]")
    lines.append(f"Y[B, T{o}, D] = Ctx[B, T{c}, K{m}, G, H] *_{{K,G,H}} Wo[K{m}, G, H, D]")
    y = "Y"
    if drop:
        lines.append(f"Yd[B, T{o}, D] = Dropout(Y[B, T{o}, D])")
        y = "Yd"
    lines += [f"R[B, T{o}, D] = Add(X[B, T{o}, D], {y}[B, T{o}, D])",
              f"Rn[B, T{o}, D] = {norm}_D(R[B, T{o}, D])"]
    if o != c and not moe:
        lines.append(f"Rn[B, T{c}, D] = Rn[B, T{o}, D]")
    lines += mlp
    z = "Z"
    if drop:
        lines.append(f"Zd[B, T{o}, D] = Dropout(Z[B, T{o}, D])")
        z = "Zd"
    lines.append(f"Out[B, T{o}, D] = Add(R[B, T{o}, D], {z}[B, T{o}, D])")
    b = format_axes(tuple(ep_axes))
    return "\n".join(l.replace("[B,", f"[B{b},") if b else l for l in lines)


#: the statements of :func:`training_program` that make up the attention core (what Megatron's selective
#: recomputation runs again: the scores, softmax, dropout and the product with V)
CORE = ("A", "P", "Pd", "Ctx")


def head_program(cfg: ModelConfig, sharding, *, dtype: str = "bf16") -> str:
    """The unembedding: logits for every position (the embedding lookup is a gather, no FLOPs)."""
    sh = sharding if isinstance(sharding, Sharding) else Sharding(**(sharding or {}))
    w = f":{dtype}" if dtype != "bf16" else ""
    b, m, f = format_axes(sh.batch), format_axes(sh.model), format_axes(sh.fsdp)
    return f"param Wu{w}[D{f}, V{m}]\nLogits[B{b}, T, V{m}] = X[B{b}, T, D] *_D Wu[D, V]"


def sizes(cfg: ModelConfig, *, batch=1, seq=1, context=None, experts_moe: bool | None = None) -> dict:
    """Dimension bindings for a program of ``cfg``: B sequences, T new tokens, S keys."""
    out = {"D": cfg.D, "F": cfg.F_expert if (cfg.is_moe and experts_moe is not False and cfg.F_expert)
           else cfg.F, "K": cfg.K, "G": cfg.G, "H": cfg.H, "V": cfg.V, "B": int(batch), "T": int(seq),
           "S": int(context if context is not None else seq)}
    out.update(mla.sizes(cfg))
    if cfg.is_moe:
        moe = moe_sizes(cfg, batch, seq)
        out.update({k: v for k, v in moe.items() if k != "F"})
    return out


def open_layer(cfg: ModelConfig, *, batch: int = 1, seq: int = 8192, dtype: str = "bf16",
               kv_dtype: str | None = None, elementwise: bool = False) -> tuple[str, dict]:
    """One layer with nothing sharded and a ``rank`` line of its sizes (``batch`` sequences of ``seq``
    tokens): what ``symcost search`` takes without ``--dims``. Returns the text and those sizes. By default
    it is the layer's matmuls alone (the book's layer, what a sharding search chooses among), as plain JAX
    traced with ``--matmuls-only`` gives it; ``elementwise`` adds its norms, rotary embedding, activation and
    residual adds (the serving layer), whose tensors the search shards too."""
    body = layer_program(cfg, {}, dtype=dtype, kv_dtype=kv_dtype, elementwise=elementwise)
    used = {d.name for st in parse(body).statements for t in getattr(st, "tensors", ()) for d in t.dims}
    ranked = {d: n for d, n in sizes(cfg, batch=batch, seq=seq).items() if d in used}
    text = (f"# one {cfg.name} layer ({'MoE, ' if cfg.is_moe else ''}nothing sharded): {batch} "
            f"sequence{'s' if batch > 1 else ''} of {seq} tokens\n"
            f"#   symcost search FILE --backward --mesh X=8 --hw h100\n"
            f"rank {', '.join(f'{d}={n}' for d, n in ranked.items())}\n{body}\n")
    return text, ranked


def _elements(layout, dims) -> sp.Expr:
    return sp.sympify(global_bytes(layout, dims)) / layout.dtype_bytes


@caching.memoize(maxsize=64)
def param_counts(cfg: ModelConfig) -> Mapping[str, int]:
    """Parameters by component, read off the layer and head programs (book Part 4's table)."""
    dense = derive_program(layer_program(cfg, {}, moe=False), mesh="X=1", moves="none")
    lay = {l.name: l for l in dense.layouts}
    dims = sizes(cfg, experts_moe=False)
    attn = sum(_elements(lay[n], dims) for n in attention_weights(cfg))
    mlp_dense = sum(_elements(lay[n], dims) for n in WEIGHTS_MLP if n in lay)
    head = derive_program(head_program(cfg, {}), mesh="X=1", moves="none")
    unembed = _elements({l.name: l for l in head.layouts}["Wu"], dims)
    embedding = unembed if cfg.tied_embeddings else 2 * unembed
    if cfg.is_moe:     # the router, every routed expert and the shared ones; a token uses k of the E routed
        moe = derive_program(layer_program(cfg, {}, moe=True), mesh="X=1", moves="none")
        mlay = {l.name: l for l in moe.layouts}
        mdims = sizes(cfg)
        routed = sum(_elements(mlay[n], mdims) for n in ROUTED if n in mlay)
        always = sum(_elements(mlay[n], mdims) for n in ROUTER + SHARED if n in mlay)
        moe_layers = cfg.L - cfg.dense_layers
        mlp = cfg.dense_layers * mlp_dense + moe_layers * (routed + always)
        mlp_active = cfg.dense_layers * mlp_dense + moe_layers * (routed * cfg.k / cfg.E + always)
    else:
        mlp = mlp_active = cfg.L * mlp_dense
    attention = cfg.L * attn
    total = attention + mlp + embedding
    return MappingProxyType({"total": int(total), "active": int(attention + mlp_active + embedding), "mlp": int(mlp),
                             "mlp_active": int(mlp_active), "attention": int(attention), "embedding": int(embedding)})


def _names(cfg: ModelConfig) -> dict:
    if cfg.is_mla:
        return mla.attention(cfg, "", "", "", "", "", "")[2]
    return {"weights": WEIGHTS_ATTN, "cache": ("Kn", "Vn"), "context": ATTENTION, "fused": ("A",)}


def attention_weights(cfg: ModelConfig) -> tuple[str, ...]:
    return _names(cfg)["weights"]


def cache_entries(cfg: ModelConfig) -> tuple[str, ...]:
    """The tensors a new token adds to the KV cache (keys and values; the latent and rotary key for MLA)."""
    return _names(cfg)["cache"]


def context_einsums(cfg: ModelConfig) -> tuple[str, ...]:
    """The einsums whose FLOPs grow with the context (causal masking halves them)."""
    return _names(cfg)["context"]


def on_chip(cfg: ModelConfig) -> tuple[str, ...]:
    """Intermediates that never reach HBM (the attention scores, fused as flash attention runs them)."""
    return _names(cfg)["fused"]
