"""A training iteration as Megatron-style runs execute it: tensor, pipeline and data parallelism, a pipeline
schedule, sequence parallelism and a recomputation policy, priced operation by operation with the
hardware preset's achieved efficiency (``[efficiency]``: matmul efficiency by size, HBM, per-link
collectives).

Each layer's operations (:data:`symcost.models.recompute.LAYER`) are priced on one device: an einsum at
``FLOPs / (C eta_math(FLOPs))``, elementwise work at ``max(bytes / (W_hbm eta_hbm), FLOPs / (C_vec eta_vec))``
(read its operands, write its result; the rule's FLOPs), tensor-parallel collectives on the critical path
(two AllReduces a layer forward and two backward; with sequence parallelism each becomes an AllGather and
a ReduceScatter of the same bytes). A microbatch on a stage is its layers forward, backward (twice the
forward's FLOPs, elementwise work reading the gradient and the saved tensor and writing a gradient) and
the recomputed operations; the last stage adds the logits and cross-entropy. An iteration is
``(m + (p - 1) / v)`` microbatch-times (the schedule's bubble), the point-to-point sends, the data-parallel
gradient reduction not hidden behind the last backward pass, and the optimizer step. With context
parallelism (``cp``) each rank holds ``s / cp`` of every sequence, so its share of every operation is
``1 / cp``, and ring attention passes the keys and values round the ``cp`` ranks beside the attention core.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import sympy as sp

from .. import caching
from ..elementwise import RULES
from ..errors import UsageError
from . import experts, placement
from . import recompute as rc
from .config import ModelConfig
from .schedule import Schedule, default_schedule

#: how the attention core runs
ATTENTION = ("unfused", "flash")

#: bytes an Adam step reads and writes per parameter in mixed precision: reads the fp32 gradient, master
#: weight and two moments (16), writes the master weight, the moments and the bf16 weight (14)
ADAM_BYTES = 30


@caching.memoize(maxsize=1024)
def _numeric(expr):
    """``expr`` (in the layer's symbols s, b, h, a, t) as a plain function of them: a run's figures are the
    same few expressions at other numbers, and a search prices thousands of runs."""
    return sp.lambdify((rc.s, rc.b, rc.h, rc.a, rc.t), expr, "math")


@dataclass(frozen=True)
class Run:
    cfg: ModelConfig
    hw: object
    tp: int = 1
    pp: int = 1
    dp: int = 1
    sequences: int = 1          # per iteration, all replicas
    microbatch: int = 1
    seq: int = 2048
    interleave: int = 1
    recompute: str = "none"
    seq_parallel: bool = False
    schedule: str | None = None
    tp_overlap: bool = False    # TP collectives overlapped with the matmuls (not on the critical path)
    zero: int = 0               # ZeRO stage over the data-parallel replicas (3 = FSDP)
    checkpoints: int | None = None  # k saved [B, D] tensors a layer (book Part 6), the rest recomputed
    cp: int = 1                 # context parallelism: each sequence split over cp ranks (ring attention)
    attention: str = "unfused"  # the attention core: "unfused" (scores through HBM, Megatron 2022) or "flash"
    ep: int = 1                 # expert parallelism: an MoE model's routed experts split over ep replicas
    _moe: bool = field(default=False, repr=False)   # price an MoE model's MoE layer (not its dense ones)

    def __post_init__(self):
        if self.recompute not in rc.RECOMPUTE:
            raise UsageError(f"--recompute must be one of {', '.join(rc.RECOMPUTE)}, not {self.recompute!r}")
        for what, v in (("--tp", self.tp), ("--pp", self.pp), ("--dp", self.dp), ("--microbatch", self.microbatch),
                        ("--sequences", self.sequences), ("--seq", self.seq), ("--cp", self.cp)):
            if v < 1:
                raise UsageError(f"{what} must be at least 1, not {v}")
        if self.checkpoints is not None and self.checkpoints < 0:
            raise UsageError(f"--checkpoints-per-layer must be at least 0, not {self.checkpoints}")
        if self.checkpoints is not None and self.recompute not in ("none", "full", "nothing_saveable"):
            raise UsageError("--checkpoints-per-layer says what is saved; it replaces --recompute selective or a "
                             "JAX policy")
        if self.zero not in (0, 1, 2, 3):
            raise UsageError(f"--zero is a ZeRO stage, 0 to 3, not {self.zero}")
        if self.interleave > 1 and self.cfg.L % (self.pp * self.interleave) or self.pp > self.cfg.L:
            raise UsageError(f"{self.cfg.name} has {self.cfg.L} layers, which do not split into {self.pp} stages "
                             f"x {self.interleave} chunks" + (" (interleaved chunks must be equal)"
                                                              if self.pp <= self.cfg.L else ""))
        if self.attention not in ATTENTION:
            raise UsageError(f"--attention must be one of {', '.join(ATTENTION)}, not {self.attention!r}")
        experts.check(self.cfg, self.ep, self.replicas)
        if self.seq % self.cp:
            raise UsageError(f"--seq {self.seq} does not split over --cp {self.cp}")
        if self.cfg.N % self.tp:
            raise UsageError(f"{self.cfg.N} heads do not split over --tp {self.tp}")
        if self.sequences % (self.dp * self.microbatch):
            raise UsageError(f"--sequences {self.sequences} is not a whole number of microbatches of "
                             f"{self.microbatch} on each of {self.dp} replicas")
        self.pipeline   # validates the schedule

    @property
    def chips(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def layers_per_stage(self) -> int:
        """Layers on the fullest pipeline stage (uneven stages: the slowest sets the pace, as when LLaMA 3
        405B's 126 layers run on 16 stages of at most 8)."""
        return -(-self.cfg.L // self.pp)

    @property
    def replicas(self) -> int:
        """Devices holding the same weights: the data-parallel replicas and the context-parallel ranks
        (gradients are summed, and ZeRO shards, over both)."""
        return self.dp * self.cp

    @property
    def pipeline(self) -> Schedule:
        name = self.schedule or default_schedule(self.pp, self.interleave)
        return Schedule(name, self.pp, self.sequences // (self.dp * self.microbatch), self.interleave)

    # ------------------------------------------------------------------ figures
    def _n(self, expr) -> float:
        """A per-layer figure on one device; with context parallelism a rank holds ``s / cp`` of each
        sequence's tokens and attends them to all ``s`` keys, so every term (``s`` and ``s^2``) is a
        ``1 / cp`` share."""
        return float(_numeric(sp.sympify(expr))(self.seq, self.microbatch, self.cfg.D, self.cfg.N, self.tp)) / self.cp

    @property
    def policy(self) -> str:
        """What is recomputed: with checkpoints (book Part 6) the layer runs again from them (as full)."""
        return "full" if self.checkpoints else rc.policy(self.recompute)

    @property
    def _w(self) -> dict:
        if self._moe:   # a token's MLP in an MoE layer: its k routed experts and the shared ones
            return rc.widths(replace(self.cfg, F=experts.active_width(self.cfg)))
        return rc.widths(self.cfg)

    def _kinds(self) -> list:
        """(share of the layers, the run pricing them): an MoE model's dense and MoE layers."""
        n = experts.moe_layers(self.cfg)
        if not n:
            return [(1.0, self)]
        return [((self.cfg.L - n) / self.cfg.L, self), (n / self.cfg.L, replace(self, _moe=True))]


    def _eff(self):
        return self.hw.efficiency

    def _matmul(self, flops: float) -> float:
        return flops / (self.hw.C * self._eff().math(flops))

    def _hbm(self, nbytes: float, vflops: float) -> float:
        e = self._eff()
        t_vec = vflops / (self.hw.vector_flops * e.vector) if self.hw.vector_flops else 0.0
        return max(nbytes / (self.hw.hbm_bandwidth * e.hbm), t_vec)

    def _collective(self, kind: str, nbytes: float, group: int, link: str) -> float:
        return placement.collective(self.hw, kind, nbytes, group, link)

    @property
    def tp_link(self) -> str:
        return self.link(self.tp)

    @property
    def pp_link(self) -> str:
        return self.link(self.tp * self.pp)

    def link(self, span: int) -> str:
        return placement.link(self.hw, span)

    def _einsum_flops(self, op) -> float:
        s, b, h, t, w = self.seq, self.microbatch, self.cfg.D, self.tp, self._w
        out = float(w["h4"]) / (2 if self.cfg.gated else 1)   # a gated MLP: two first matrices, then F x D
        return {"qkv": 2 * float(w["h3"]) * b * s * h * h, "scores": 2 * float(w["q"]) * b * s * s * h,
                "context": 2 * float(w["q"]) * b * s * s * h, "proj": 2 * float(w["ctx"]) * b * s * h * h,
                "fc1": 2 * float(w["h4"]) * b * s * h * h, "fc2": 2 * out * b * s * h * h}[op.name] / (t * self.cp)

    def _einsum_bytes(self, op) -> float:
        """HBM bytes an einsum reads and writes (its activations; weights for the projections)."""
        act = sum(self._n(rc.elements(r, True, False, self._w)) for r in op.reads) + self._n(rc.elements(op.writes, True, False, self._w))
        w = self._w
        mlp_out = w["h4"] / (2 if self.cfg.gated else 1)
        weights = {"qkv": w["h3"], "proj": w["ctx"], "fc1": w["h4"], "fc2": mlp_out}.get(op.name, 0)
        weights = float(weights) * self.cfg.D ** 2 / self.tp
        return 2 * (act + weights)

    def _elementwise(self, op, backward: bool) -> float:
        rule = RULES[op.kind]
        out = self._n(rc.elements(op.writes, True, self.seq_parallel, self._w))
        ins = sum(self._n(rc.elements(r, True, self.seq_parallel, self._w)) for r in op.reads)
        if backward:   # read the gradient and what the rule saved, write each operand's gradient
            nbytes = 2 * (out + ins + (ins if rule.saves in ("inputs", "output") else 0)) \
                + (out if rule.saves == "mask" else 0)
            return self._hbm(nbytes, rule.grad_flops * ins)
        nbytes = 2 * (ins + out) + (out if rule.saves == "mask" else 0)
        return self._hbm(nbytes, rule.flops * out)

    def _ops(self, ops, backward: bool) -> tuple[float, float]:
        """(matmul seconds, elementwise seconds) of ``ops`` on one device; with flash attention the
        attention core is one kernel (:meth:`_flash`)."""
        mm = vec = 0.0
        if self.attention == "flash" and any(op.core for op in ops):
            mm += self._flash(backward)
            ops = [op for op in ops if not op.core]
        for op in ops:
            if op.kind == "Einsum":   # backward: both operands' gradients, each as many FLOPs and bytes
                f, nbytes = self._einsum_flops(op), self._einsum_bytes(op)
                mm += (2 if backward else 1) * max(self._matmul(f), self._hbm(nbytes, 0.0))
            else:
                vec += self._elementwise(op, backward)
        return mm, vec

    def _flash(self, backward: bool) -> float:
        """The attention core as one fused kernel (FlashAttention): the scores never reach HBM. Forward: the
        two attention matmuls, reading Q, K and V and writing the context and its log-sum-exp (fp32, one a
        query and head); backward: five matmuls (the scores again, then the gradients of V, the
        probabilities, Q and K: 2.5 times the forward's FLOPs), reading Q, K, V, the context, its gradient
        and the log-sum-exp, writing the gradients of Q, K and V."""
        core = [op for op in rc.LAYER if op.kind == "Einsum" and op.core]
        flops = sum(self._einsum_flops(op) for op in core)
        qkv = sum(self._n(rc.elements(r, True, False, self._w)) for r in ("q", "k", "v"))
        ctx = self._n(rc.elements("ctx", True, False, self._w))
        lse = self._n(rc.a * rc.s * rc.b / rc.t)
        if backward:
            return max(self._matmul(2.5 * flops), self._hbm(2 * (2 * qkv + 2 * ctx) + 4 * lse, 0.0))
        return max(self._matmul(flops), self._hbm(2 * (qkv + ctx) + 4 * lse, 0.0))

    def _recomputed(self) -> tuple:
        """The operations the backward pass runs again: with flash attention the core's recomputation is
        inside its backward kernel, so only full recomputation runs the core again."""
        ops = rc.recompute_ops(self.policy)
        if self.attention == "flash" and self.policy != "full":
            ops = tuple(op for op in ops if not op.core)
        return ops

    def _tp_comms(self) -> float:
        """TP collectives of one layer's forward pass on the critical path."""
        if self.tp == 1 or self.tp_overlap:
            return 0.0
        v = 2 * self.seq * self.microbatch * self.cfg.D / self.cp
        if self.seq_parallel:
            return 2 * (self._collective("AllGather", v, self.tp, self.tp_link)
                        + self._collective("ReduceScatter", v, self.tp, self.tp_link))
        return 2 * self._collective("AllReduce", v, self.tp, self.tp_link)

    def _tp_regather(self) -> float:
        """Sequence parallelism keeps the inputs of the QKV and first MLP matmuls split over TP; the backward
        pass gathers them again for the weight gradients (Korthikanti et al. 2022, section 4.2.2)."""
        if self.tp == 1 or self.tp_overlap or not self.seq_parallel or self.policy == "full":
            return 0.0
        return 2 * self._collective("AllGather", 2 * self.seq * self.microbatch * self.cfg.D / self.cp, self.tp,
                                    self.tp_link)

    @property
    def cp_link(self) -> str:
        return self.link(self.tp * self.cp)

    def _cp_comms(self) -> float:
        """Ring attention's exposed time in one layer (forward and backward): each rank passes its keys and
        values round the ring, ``cp - 1`` sends of ``s / cp`` tokens, overlapped with attention over the
        chunk it holds; the backward pass passes them again with their gradients (twice the bytes)."""
        if self.cp == 1:
            return 0.0
        chunk = 2 * 2 * (self.seq / self.cp) * self.microbatch * float(self._w["k"]) * self.cfg.D / self.tp
        bw, lat = placement.bandwidth(self.hw, self.cp_link)
        ring = (self.cp - 1) * (chunk / bw + lat)
        core = [op for op in rc.LAYER if op.core]
        fwd, bwd = sum(self._ops(core, False)), sum(self._ops(core, True))
        return max(0.0, ring - fwd) + max(0.0, 2 * ring - bwd)

    def layer(self) -> dict:
        """Seconds one layer takes for one microbatch on one device, by part (an MoE model: the mean over
        its dense and MoE layers)."""
        parts = [(w, r._layer()) for w, r in self._kinds()]
        return {k: sum(w * p[k] for w, p in parts) for k in parts[0][1]}

    def _layer(self) -> dict:
        fwd_mm, fwd_vec = self._ops(rc.LAYER, False)
        bwd_mm, bwd_vec = self._ops(rc.LAYER, True)
        re_mm, re_vec = self._ops(self._recomputed(), False)
        comms = self._tp_comms()
        re_comms = comms if self.policy == "full" else 0.0
        return {"forward": fwd_mm + fwd_vec, "backward": bwd_mm + bwd_vec, "recompute": re_mm + re_vec + re_comms,
                "tp_comms": 2 * comms + self._tp_regather(), "cp_comms": self._cp_comms(), "ep_comms": experts.alltoalls(self) if self._moe else 0.0, "matmul": fwd_mm + bwd_mm + re_mm, "elementwise": fwd_vec + bwd_vec + re_vec}

    def head(self) -> float:
        """The logits (forward and backward) and cross-entropy of one microbatch on the last stage."""
        tokens, v = self.seq * self.microbatch / self.cp, self.cfg.V / self.tp
        f = 2 * tokens * self.cfg.D * v
        ce = RULES["CrossEntropy"]
        return 3 * self._matmul(f) + self._hbm(4 * tokens * v * 2, (ce.flops + ce.grad_flops) * tokens * v)

    def _params_per_device(self) -> float:
        from .transformer import param_counts
        routed = experts.routed_params(self.cfg)
        return (param_counts(self.cfg)["total"] - routed + routed / self.ep) / (self.tp * self.pp)

    def iteration(self) -> dict:
        """Seconds per iteration, by part, and the FLOPs behind MFU and HFU."""
        sch = self.pipeline
        lay = self.layer()
        per_stage = self.layers_per_stage
        mb = per_stage * sum(lay[k] for k in ("forward", "backward", "recompute", "tp_comms", "cp_comms", "ep_comms")) \
            + self.head()
        m = sch.microbatches
        bw, lat = placement.bandwidth(self.hw, self.pp_link)
        send = 2 * self.seq * self.microbatch * self.cfg.D / (self.tp * self.cp) / bw + lat if sch.stages > 1 else 0.0
        p2p = m * sch.sends_per_microbatch * send
        params = self._params_per_device()
        dp_exposed = self._dp_comms(params, per_stage * lay["backward"], per_stage * lay["forward"], m)
        optimizer = self._hbm(ADAM_BYTES * params, 0.0)
        parts = {"forward": m * per_stage * lay["forward"], "backward": m * per_stage * lay["backward"],
                 "recompute": m * per_stage * lay["recompute"], "tp_comms": m * per_stage * lay["tp_comms"],
                 "cp_comms": m * per_stage * lay["cp_comms"], "ep_comms": m * per_stage * lay["ep_comms"],
                 "head": m * self.head(), "bubble": sch.bubble_microbatches * mb, "p2p": p2p,
                 "dp_comms": dp_exposed, "optimizer": optimizer}
        parts["iteration"] = sum(parts.values())
        return parts

    @property
    def dp_link(self) -> str:
        return self.link(self.chips)

    def _dp_comms(self, params: float, backward: float, forward: float, m: int) -> float:
        """Data-parallel collectives not hidden behind compute. Gradients (fp32) are reduced while the last
        microbatch's backward pass runs: an AllReduce, or with ZeRO a ReduceScatter and, after the step, an
        AllGather of the bf16 weights (on the critical path). ZeRO-3 (FSDP) also gathers each stage's
        weights before every microbatch's forward and backward pass, prefetched behind that pass. The group
        is the replicas: the data-parallel ones and the context-parallel ranks."""
        n = self.replicas
        if n == 1:
            return 0.0
        link = self.dp_link
        if self.zero == 0:
            return max(0.0, self._collective("AllReduce", 4 * params, n, link) - backward)
        exposed = max(0.0, self._collective("ReduceScatter", 4 * params, n, link) - backward)
        gather = self._collective("AllGather", 2 * params, n, link)
        if self.zero < 3:
            return exposed + gather
        return exposed + m * (max(0.0, gather - forward) + max(0.0, gather - backward))

    def flops(self) -> dict:
        """FLOPs of one iteration: ``6N`` (parameters only, book Part 6), the model's (every matmul forward and
        backward, attention and logits included: what MFU counts) and the hardware's (with recomputation: HFU)."""
        from .transformer import param_counts
        tokens = self.sequences * self.seq
        per_mb = redo = 0.0      # one layer, one microbatch (an MoE model: the mean over its layers)
        for w, r in self._kinds():
            per_mb += w * self.tp * self.cp * sum(r._einsum_flops(op) for op in rc.LAYER if op.kind == "Einsum")
            redo += w * self.tp * self.cp * sum(r._einsum_flops(op) for op in r._recomputed() if op.kind == "Einsum")
        if self.attention == "flash":   # the backward kernel computes the scores again
            redo += self.tp * self.cp * self._einsum_flops(next(op for op in rc.LAYER if op.name == "scores"))
        logits = 2 * self.seq * self.microbatch * self.cfg.D * self.cfg.V
        microbatches = self.sequences // self.microbatch
        model = 3 * microbatches * (self.cfg.L * per_mb + logits)
        return {"6N": 6 * param_counts(self.cfg)["active"] * tokens, "model": model,
                "hardware": model + microbatches * self.cfg.L * redo}

    def report(self) -> dict:
        """Everything ``symcost model --train`` prints: the iteration by part, FLOPs, MFU and HFU, memory."""
        it, fl = self.iteration(), self.flops()
        peak = self.chips * self.hw.C * it["iteration"]
        return {"iteration": it, "flops": fl, "mfu": fl["model"] / peak, "hfu": fl["hardware"] / peak,
                "mfu_6n": fl["6N"] / peak, "schedule": self.pipeline.as_dict(), "memory": self.memory()}

    def memory(self) -> dict:
        """Bytes per GPU on the first stage (the one holding the most activations): bf16 weights,
        gradients accumulated in fp32 (4 bytes), fp32 master weights and Adam moments (12 bytes a parameter),
        activations in flight; ZeRO stage 1 splits the optimizer state over the replicas, 2 the gradients too,
        3 (FSDP) the weights too."""
        params = self._params_per_device()
        if self.checkpoints is not None:   # book Part 6: k tensors of [B, D] a layer, in bf16
            per_layer = self._n(2 * self.checkpoints * rc.elements("x", self.tp > 1, self.seq_parallel))
        else:
            per_layer = sum(w * r._saved_per_layer() for w, r in self._kinds())
        layers = self.layers_per_stage
        acts = per_layer * layers * self.pipeline.in_flight
        dp = self.replicas
        out = {"weights": 2 * params / (dp if self.zero >= 3 else 1),
               "gradients": 4 * params / (dp if self.zero >= 2 else 1),
               "optimizer": 12 * params / (dp if self.zero >= 1 else 1), "activations": acts}
        out["total"] = sum(out.values())
        return out

    def _saved_per_layer(self) -> float:
        """Bytes of activations one layer keeps for its backward pass on one device."""
        saved = rc.saved_tensors(self.recompute, self.tp > 1, self.seq_parallel, width=self._w,
                                 flash=self.attention == "flash")
        return self._n(sum((v for _, v in saved), sp.Integer(0)))

__all__ = ["Run", "ADAM_BYTES"]
