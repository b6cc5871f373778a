"""Activation memory of a GPT layer, derived from its operations: what each operation's backward pass reads
(an einsum its activation operands, elementwise work what its rule saves), under tensor parallelism,
sequence parallelism and a recomputation policy (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", section 4).

    >>> per_layer = saved_bytes("none")
    >>> per_layer
    5*a*b*s**2 + 34*b*h*s
    >>> saved_bytes("none", tp=True)
    5*a*b*s**2/t + 10*b*h*s + 24*b*h*s/t
    >>> saved_bytes("selective", tp=True, seq_parallel=True)
    34*b*h*s/t
    >>> saved_bytes("dots_with_no_batch_dims_saveable", tp=True)     # JAX's policy names
    6*b*h*s + 14*b*h*s/t

The layer is the one the paper (and GPT-2/3, Megatron) runs: LayerNorm, the QKV projection, scores,
softmax, attention dropout, the product with V, the output projection, dropout and a residual add; then
LayerNorm, the first MLP matrix, GeLU, the second, dropout and a residual add. ``s`` is the sequence, ``b``
the microbatch, ``h`` the hidden width, ``a`` the heads, ``t`` the tensor-parallel degree; activations are
2-byte (bf16/fp16), dropout masks 1 byte.
"""
from __future__ import annotations

from typing import NamedTuple

import sympy as sp

from ..elementwise import MASK_DTYPE, RULES
from .. import dtypes

s, b, h, a, t = sp.symbols("s b h a t", positive=True)

#: tensor shapes (elements) of the layer; "inside" tensors are split over tensor parallelism, "outside"
#: ones (between the TP regions) only with sequence parallelism
SHAPES = {"x": (s * b * h, "outside"), "h3": (3 * s * b * h, "inside"), "q": (s * b * h, "inside"),
          "k": (s * b * h, "inside"), "v": (s * b * h, "inside"), "scores": (a * s * s * b, "inside"),
          "ctx": (s * b * h, "inside"), "h4": (4 * s * b * h, "inside")}

#: JAX's checkpoint policies (jax.checkpoint_policies) by name: what each keeps
JAX_POLICIES = {"everything_saveable": "none", "nothing_saveable": "full", "dots_saveable": "dots",
                "dots_with_no_batch_dims_saveable": "dots_no_batch"}
RECOMPUTE = ("none", "selective", "full", "dots", "dots_no_batch") + tuple(JAX_POLICIES)


class Op(NamedTuple):
    name: str
    kind: str            # an elementwise rule name, or "Einsum"
    reads: tuple         # activation operands (shape names)
    writes: str
    core: bool = False   # part of the attention core (selective recomputation recomputes it)
    batched: bool = False  # an einsum with batch dimensions (per sequence and head: JAX's "batch dims")


#: the GPT layer, in order
LAYER = (
    Op("ln1", "LayerNorm", ("x",), "x"),
    Op("qkv", "Einsum", ("x",), "h3"),
    Op("scores", "Einsum", ("q", "k"), "scores", core=True, batched=True),
    Op("softmax", "Softmax", ("scores",), "scores", core=True),
    Op("attn_dropout", "Dropout", ("scores",), "scores", core=True),
    Op("context", "Einsum", ("scores", "v"), "ctx", core=True, batched=True),
    Op("proj", "Einsum", ("ctx",), "x"),
    Op("dropout1", "Dropout", ("x",), "x"),
    Op("residual1", "Add", ("x", "x"), "x"),
    Op("ln2", "LayerNorm", ("x",), "x"),
    Op("fc1", "Einsum", ("x",), "h4"),
    Op("gelu", "GeLU", ("h4",), "h4"),
    Op("fc2", "Einsum", ("h4",), "x"),
    Op("dropout2", "Dropout", ("x",), "x"),
    Op("residual2", "Add", ("x", "x"), "x"),
)


def widths(cfg) -> dict:
    """The layer's tensor widths for a model, in units of ``h`` (the GPT layer: 3 for QKV, 4 for the MLP;
    grouped keys and values and a gated MLP's two first matrices change them)."""
    return {"h3": sp.Rational((cfg.N + 2 * cfg.K) * cfg.H, cfg.D), "q": sp.Rational(cfg.N * cfg.H, cfg.D),
            "k": sp.Rational(cfg.K * cfg.H, cfg.D), "v": sp.Rational(cfg.K * cfg.H, cfg.D),
            "ctx": sp.Rational(cfg.N * cfg.H, cfg.D), "h4": sp.Rational(cfg.F * (2 if cfg.gated else 1), cfg.D)}


def elements(shape: str, tp: bool, seq_parallel: bool, width: dict | None = None) -> sp.Expr:
    """Elements of one of the layer's tensors on one device (inside a TP region split over ``t``; between
    them only with sequence parallelism); ``width`` (from :func:`widths`) for a model other than GPT's."""
    n, where = SHAPES[shape]
    if width and shape in width:
        n = width[shape] * s * b * h
    return n / t if tp and (where == "inside" or seq_parallel) else n


def saved_tensors(recompute: str = "none", tp: bool = False, seq_parallel: bool = False,
                  act_bytes: int = 2, width: dict | None = None, flash: bool = False) -> list[tuple[str, sp.Expr]]:
    """(operation, bytes) of every tensor the backward pass reads, per layer. With ``flash`` attention the
    core is one kernel that keeps Q, K, V and the fp32 log-sum-exp of its scores (one a query and head),
    nothing of size s^2."""
    out = _saved(recompute, tp, seq_parallel, act_bytes, width)
    if flash and policy(recompute) != "full":
        core = {op.name for op in LAYER if op.core}
        out = [(n, v) for n, v in out if n not in core]
        out += [("flash", act_bytes * elements(r, tp, False, width)) for r in ("q", "k", "v")]
        out.append(("flash", 4 * a * s * b / (t if tp else 1)))
    return out


def _saved(recompute, tp, seq_parallel, act_bytes, width) -> list[tuple[str, sp.Expr]]:
    recompute = policy(recompute)
    if recompute in ("dots", "dots_no_batch"):   # JAX: keep the layer's input and the einsums' results
        kept = [op for op in LAYER if op.kind == "Einsum" and not (recompute == "dots_no_batch" and op.batched)]
        return [("input", act_bytes * elements("x", tp, seq_parallel, width))] + \
            [(op.name, act_bytes * elements(op.writes, tp, seq_parallel, width)) for op in kept]
    if recompute == "full":   # only the layer's input is kept; the whole layer runs again in backward
        return [("input", act_bytes * elements("x", tp, seq_parallel, width))]
    mask = dtypes.nbytes(MASK_DTYPE)
    out = []
    core_made = {op.writes for op in LAYER if op.core}
    for op in LAYER:
        if recompute == "selective" and op.core:   # recomputed from what enters the core (Q, K and V)
            out += [(op.name, act_bytes * elements(r, tp, seq_parallel, width)) for r in op.reads if r not in core_made]
            continue
        if op.kind == "Einsum":
            out += [(op.name, act_bytes * elements(r, tp, seq_parallel, width)) for r in op.reads]
            continue
        saves = RULES[op.kind].saves
        if saves == "inputs":
            out += [(op.name, act_bytes * elements(r, tp, seq_parallel, width)) for r in op.reads]
        elif saves == "output":
            out.append((op.name, act_bytes * elements(op.writes, tp, seq_parallel, width)))
        elif saves == "mask":
            out.append((op.name, mask * elements(op.writes, tp, seq_parallel, width)))
    return out


def saved_bytes(recompute: str = "none", tp: bool = False, seq_parallel: bool = False) -> sp.Expr:
    """Bytes of activations one layer keeps for its backward pass (symbols s, b, h, a, t)."""
    return sp.expand(sum((v for _, v in saved_tensors(recompute, tp, seq_parallel)), sp.Integer(0)))


def policy(recompute: str) -> str:
    """The policy's own name (a JAX policy name maps to what it keeps)."""
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}")
    return JAX_POLICIES.get(recompute, recompute)


def recompute_ops(recompute: str) -> tuple[Op, ...]:
    """The operations run again in the backward pass."""
    recompute = policy(recompute)
    if recompute in ("dots", "dots_no_batch"):
        return tuple(op for op in LAYER if op.kind != "Einsum" or (recompute == "dots_no_batch" and op.batched))
    if recompute == "full":
        return LAYER
    if recompute == "selective":
        return tuple(op for op in LAYER if op.core)
    return ()


__all__ = ["LAYER", "Op", "RECOMPUTE", "JAX_POLICIES", "policy", "elements", "widths", "saved_tensors", "saved_bytes", "recompute_ops",
           "s", "b", "h", "a", "t"]
