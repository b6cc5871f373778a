"""One transformer layer, one microbatch, one device: what its operations cost in a training run.

A :class:`LayerCost` is the part of a run (:class:`symcost.models.execution.Run`) that a layer's time
depends on -- the model, the hardware, TP, CP, EP, the microbatch and sequence, the recomputation policy,
sequence parallelism and the attention kernel -- and not the pipeline, the data-parallel replicas or the
ZeRO stage. Runs that share it share its figures: a search over thousands of runs prices each distinct
layer once (its figures are kept, keyed by the value).

Each of the layer's operations (:data:`symcost.models.recompute.LAYER`) is priced on one device: an einsum
as its matmuls, each at ``FLOPs / (C eta)`` with ``eta`` the rate its size reaches times the useful
fraction of its tiles' waves (or its HBM traffic, whichever is longer), elementwise work at
``max(bytes / (W_hbm eta_hbm), FLOPs / (C_vec eta_vec))`` (read its operands, write its result; the
rule's FLOPs), tensor-parallel collectives on the critical path (two AllReduces a layer forward and two
backward; with sequence parallelism each becomes an AllGather and a ReduceScatter of the same bytes).
The backward pass is twice the forward's FLOPs (the gradients of both operands, matmuls of other
shapes), its elementwise work reading the gradient and the saved tensor and writing a gradient; recomputation runs the policy's operations again. With context
parallelism (``cp``) a rank holds ``s / cp`` of every sequence, so its share of every operation is
``1 / cp``, and ring attention passes the keys and values round the ``cp`` ranks beside the attention core.

    >>> from symcost.hardware import hardware
    >>> from symcost.models.config import load_model_config
    >>> lay = LayerCost(load_model_config("gpt3-175b"), hardware("a100"), tp=8, microbatch=1, seq=2048)
    >>> f = lay.figures()
    >>> round(f["forward"] * 1e3, 2), round(f["backward"] / f["forward"], 2), f["recompute"]
    (4.72, 1.81, 0.0)
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

import sympy as sp

from .. import caching
from ..elementwise import RULES
from ..numeric import math_function
from . import experts, placement
from . import recompute as rc

#: how the attention core runs
ATTENTION = ("unfused", "flash")


def _numeric(expr):
    """``expr`` (in the layer's symbols s, b, h, a, t) as a plain function of them: a run's figures are the
    same few expressions at other numbers, and a search prices thousands of runs."""
    return math_function(expr, (rc.s, rc.b, rc.h, rc.a, rc.t))


@caching.memoize(maxsize=256)
def _widths(cfg, moe: bool) -> Mapping:
    if moe:   # a token's MLP in an MoE layer: its k routed experts and the shared ones
        return MappingProxyType(rc.widths(replace(cfg, F=experts.active_width(cfg))))
    return MappingProxyType(rc.widths(cfg))


@caching.memoize(maxsize=8192)
def _elements(shape: str, tp: bool, seq_parallel: bool, width) -> sp.Expr:
    return rc.elements(shape, tp, seq_parallel, dict(width))


@dataclass(frozen=True)
class LayerCost:
    """One layer of ``cfg`` for one microbatch on one device of ``hw`` (``moe``: an MoE model's MoE
    layer, whose MLP is the token's routed and shared experts)."""

    cfg: object
    hw: object
    tp: int = 1
    microbatch: int = 1
    seq: int = 2048
    cp: int = 1
    recompute: str = "none"
    seq_parallel: bool = False
    tp_overlap: bool = False
    checkpoints: int | None = None
    attention: str = "unfused"
    ep: int = 1
    moe: bool = False

    __hash__ = caching.kept_hash            # a search looks its figures up thousands of times
    __getstate__ = caching.state_without_hash

    @property
    def policy(self) -> str:
        """What is recomputed: with checkpoints (book Part 6) the layer runs again from them (as full)."""
        return "full" if self.checkpoints else rc.policy(self.recompute)

    def link(self, span: int) -> str:
        return placement.link(self.hw, span)

    @property
    def tp_link(self) -> str:
        return self.link(self.tp)

    @property
    def cp_link(self) -> str:
        return self.link(self.tp * self.cp)

    # ------------------------------------------------------------------ the pieces
    @property
    def width(self) -> dict:
        return _widths(self.cfg, self.moe)

    def elements(self, shape: str, tp: bool, seq_parallel: bool) -> sp.Expr:
        return _elements(shape, tp, seq_parallel, tuple(sorted(self.width.items())))

    def n(self, expr) -> float:
        """A per-layer figure on one device; with context parallelism a rank holds ``s / cp`` of each
        sequence's tokens and attends them to all ``s`` keys, so every term (``s`` and ``s^2``) is a
        ``1 / cp`` share."""
        return float(_numeric(sp.sympify(expr))(self.seq, self.microbatch, self.cfg.D, self.cfg.N, self.tp)) / self.cp

    def matmul(self, flops: float) -> float:
        return flops / (self.hw.C * self.hw.efficiency.math(flops))

    def gemm(self, m: float, n: float, k: float, batch: float = 1) -> float:
        """Seconds of one ``[batch, m, k] x [batch, k, n]`` matmul on one device, at the rate its size and
        its tiles' waves reach (:meth:`~symcost.hardware.efficiency.Efficiency.matmul_shape`)."""
        return 2 * m * n * k * batch / (self.hw.C * self.hw.efficiency.matmul_shape(m, n, k, batch))

    def gemm_shape(self, op) -> tuple[float, float, float, float]:
        """``(m, n, k, batch)`` of an einsum of the layer on one device: the projections multiply the
        rank's tokens by its block of the weight; the attention matmuls run per sequence and head (an MoE
        layer's MLP is priced as one matmul of the token's experts' width)."""
        s, b, h, t, w, cfg = self.seq, self.microbatch, self.cfg.D, self.tp, self.width, self.cfg
        tokens, heads = s * b / self.cp, b * cfg.N / t
        out = float(w["h4"]) / (2 if cfg.gated else 1)
        return {"qkv": (tokens, float(w["h3"]) * h / t, h, 1), "proj": (tokens, h, float(w["ctx"]) * h / t, 1),
                "fc1": (tokens, float(w["h4"]) * h / t, h, 1), "fc2": (tokens, h, out * h / t, 1),
                "scores": (s / self.cp, s, cfg.H, heads), "context": (s / self.cp, cfg.H, s, heads)}[op.name]

    def einsum_time(self, op, backward: bool) -> float:
        """An einsum's seconds, each matmul bound by its FLOPs or the HBM traffic of the einsum: forward
        ``[m, k] x [k, n]``; backward the gradients of both operands, ``[m, n] x [n, k]`` and
        ``[k, m] x [m, n]``: as many FLOPs each, in other shapes (and so other waves)."""
        m, n, k, batch = self.gemm_shape(op)
        nbytes = self.hbm(self.einsum_bytes(op), 0.0)
        shapes = ((m, k, n), (k, n, m)) if backward else ((m, n, k),)
        return sum(max(self.gemm(*sh, batch), nbytes) for sh in shapes)

    def hbm(self, nbytes: float, vflops: float) -> float:
        e = self.hw.efficiency
        t_vec = vflops / (self.hw.vector_flops * e.vector) if self.hw.vector_flops else 0.0
        return max(nbytes / (self.hw.hbm_bandwidth * e.hbm), t_vec)

    def collective(self, kind: str, nbytes: float, group: int, link: str) -> float:
        return placement.collective(self.hw, kind, nbytes, group, link)

    def einsum_flops(self, op) -> float:
        """FLOPs of an einsum of the layer on one device: ``2 m n k`` of its matmul (:meth:`gemm_shape`)."""
        m, n, k, batch = self.gemm_shape(op)
        return 2 * m * n * k * batch

    def einsum_bytes(self, op) -> float:
        """HBM bytes an einsum reads and writes (its activations; weights for the projections)."""
        act = sum(self.n(self.elements(r, True, False)) for r in op.reads) + self.n(self.elements(op.writes, True, False))
        w = self.width
        mlp_out = w["h4"] / (2 if self.cfg.gated else 1)
        weights = {"qkv": w["h3"], "proj": w["ctx"], "fc1": w["h4"], "fc2": mlp_out}.get(op.name, 0)
        weights = float(weights) * self.cfg.D ** 2 / self.tp
        return 2 * (act + weights)

    def elementwise(self, op, backward: bool) -> float:
        rule = RULES[op.kind]
        out = self.n(self.elements(op.writes, True, self.seq_parallel))
        ins = sum(self.n(self.elements(r, True, self.seq_parallel)) for r in op.reads)
        if backward:   # read the gradient and what the rule saved, write each operand's gradient
            nbytes = 2 * (out + ins + (ins if rule.saves in ("inputs", "output") else 0)) \
                + (out if rule.saves == "mask" else 0)
            return self.hbm(nbytes, rule.grad_flops * ins)
        nbytes = 2 * (ins + out) + (out if rule.saves == "mask" else 0)
        return self.hbm(nbytes, rule.flops * out)

    def ops(self, ops, backward: bool) -> tuple[float, float]:
        """(matmul seconds, elementwise seconds) of ``ops`` on one device; with flash attention the
        attention core is one kernel (:meth:`flash`)."""
        mm = vec = 0.0
        if self.attention == "flash" and any(op.core for op in ops):
            mm += self.flash(backward)
            ops = [op for op in ops if not op.core]
        for op in ops:
            if op.kind == "Einsum":
                mm += self.einsum_time(op, backward)
            else:
                vec += self.elementwise(op, backward)
        return mm, vec

    def flash(self, backward: bool) -> float:
        """The attention core as one fused kernel (FlashAttention): the scores never reach HBM. Forward: the
        two attention matmuls, reading Q, K and V and writing the context and its log-sum-exp (fp32, one a
        query and head); backward: five matmuls (the scores again, then the gradients of V, the
        probabilities, Q and K: 2.5 times the forward's FLOPs), reading Q, K, V, the context, its gradient
        and the log-sum-exp, writing the gradients of Q, K and V."""
        core = [op for op in rc.LAYER if op.kind == "Einsum" and op.core]
        flops = sum(self.einsum_flops(op) for op in core)
        qkv = sum(self.n(self.elements(r, True, False)) for r in ("q", "k", "v"))
        ctx = self.n(self.elements("ctx", True, False))
        lse = self.n(rc.a * rc.s * rc.b / rc.t)
        if backward:
            return max(self.matmul(2.5 * flops), self.hbm(2 * (2 * qkv + 2 * ctx) + 4 * lse, 0.0))
        return max(self.matmul(flops), self.hbm(2 * (qkv + ctx) + 4 * lse, 0.0))

    def recomputed(self) -> tuple:
        """The operations the backward pass runs again: with flash attention the core's recomputation is
        inside its backward kernel, so only full recomputation runs the core again."""
        ops = rc.recompute_ops(self.policy)
        if self.attention == "flash" and self.policy != "full":
            ops = tuple(op for op in ops if not op.core)
        return ops

    def tp_comms(self) -> float:
        """TP collectives of one layer's forward pass on the critical path."""
        if self.tp == 1 or self.tp_overlap:
            return 0.0
        v = 2 * self.seq * self.microbatch * self.cfg.D / self.cp
        if self.seq_parallel:
            return 2 * (self.collective("AllGather", v, self.tp, self.tp_link)
                        + self.collective("ReduceScatter", v, self.tp, self.tp_link))
        return 2 * self.collective("AllReduce", v, self.tp, self.tp_link)

    def tp_regather(self) -> float:
        """Sequence parallelism keeps the inputs of the QKV and first MLP matmuls split over TP; the backward
        pass gathers them again for the weight gradients (Korthikanti et al. 2022, section 4.2.2)."""
        if self.tp == 1 or self.tp_overlap or not self.seq_parallel or self.policy == "full":
            return 0.0
        return 2 * self.collective("AllGather", 2 * self.seq * self.microbatch * self.cfg.D / self.cp, self.tp,
                                   self.tp_link)

    def cp_comms(self) -> float:
        """Ring attention's exposed time in one layer (forward and backward): each rank passes its keys and
        values round the ring, ``cp - 1`` sends of ``s / cp`` tokens, overlapped with attention over the
        chunk it holds; the backward pass passes them again with their gradients (twice the bytes)."""
        if self.cp == 1:
            return 0.0
        chunk = 2 * 2 * (self.seq / self.cp) * self.microbatch * float(self.width["k"]) * self.cfg.D / self.tp
        bw, lat = placement.bandwidth(self.hw, self.cp_link)
        ring = (self.cp - 1) * (chunk / bw + lat)
        core = [op for op in rc.LAYER if op.core]
        fwd, bwd = sum(self.ops(core, False)), sum(self.ops(core, True))
        return max(0.0, ring - fwd) + max(0.0, 2 * ring - bwd)

    # ------------------------------------------------------------------ what a run reads (kept)
    @caching.memoize(maxsize=4096)
    def figures(self) -> Mapping[str, float]:
        """Seconds the layer takes, by part: forward, backward, recompute, TP / CP / EP comms, and the
        matmul and elementwise shares of the compute."""
        fwd_mm, fwd_vec = self.ops(rc.LAYER, False)
        bwd_mm, bwd_vec = self.ops(rc.LAYER, True)
        re_mm, re_vec = self.ops(self.recomputed(), False)
        comms = self.tp_comms()
        re_comms = comms if self.policy == "full" else 0.0
        return MappingProxyType({
            "forward": fwd_mm + fwd_vec, "backward": bwd_mm + bwd_vec, "recompute": re_mm + re_vec + re_comms,
            "tp_comms": 2 * comms + self.tp_regather(), "cp_comms": self.cp_comms(),
            "ep_comms": experts.alltoalls(self) if self.moe else 0.0,
            "matmul": fwd_mm + bwd_mm + re_mm, "elementwise": fwd_vec + bwd_vec + re_vec})

    @caching.memoize(maxsize=4096)
    def head(self) -> float:
        """The logits (forward and backward) and cross-entropy of one microbatch on the last stage."""
        tokens, v, d = self.seq * self.microbatch / self.cp, self.cfg.V / self.tp, self.cfg.D
        ce = RULES["CrossEntropy"]
        logits = self.gemm(tokens, v, d) + self.gemm(tokens, d, v) + self.gemm(d, v, tokens)
        return logits + self.hbm(4 * tokens * v * 2, (ce.flops + ce.grad_flops) * tokens * v)

    @caching.memoize(maxsize=4096)
    def saved_bytes(self) -> float:
        """Bytes of activations the layer keeps for its backward pass on one device (with checkpoints, book
        Part 6: k tensors of [B, D] in bf16)."""
        if self.checkpoints is not None:
            return self.n(2 * self.checkpoints * self.elements("x", self.tp > 1, self.seq_parallel))
        saved = rc.saved_tensors(self.recompute, self.tp > 1, self.seq_parallel, width=self.width,
                                 flash=self.attention == "flash")
        return self.n(sum((v for _, v in saved), sp.Integer(0)))

    @caching.memoize(maxsize=4096)
    def einsum_flops_all(self) -> tuple[float, float]:
        """(FLOPs of the layer's einsums forward, FLOPs run again in backward) for the whole layer (every TP
        and CP rank): what MFU and HFU count."""
        einsums = [op for op in rc.LAYER if op.kind == "Einsum"]
        ranks = self.tp * self.cp
        model = ranks * sum(self.einsum_flops(op) for op in einsums)
        redo = ranks * sum(self.einsum_flops(op) for op in self.recomputed() if op.kind == "Einsum")
        if self.attention == "flash":   # the backward kernel computes the scores again
            redo += ranks * self.einsum_flops(next(op for op in rc.LAYER if op.name == "scores"))
        return model, redo


__all__ = ["LayerCost", "ATTENTION"]
