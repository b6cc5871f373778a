"""A training iteration as Megatron-style runs execute it: tensor, pipeline and data parallelism, a pipeline
schedule, sequence parallelism and a recomputation policy, priced operation by operation with the
hardware preset's achieved efficiency (``[efficiency]``: matmul efficiency by size, HBM, per-link
collectives).

A layer is the engine's plan of :func:`~symcost.models.transformer.training_program` at the run's TP, SP
and CP, forward and backward, priced step by step (:class:`~symcost.models.layer_cost.LayerCost`); runs
that share a layer share its figures. Around it is the run's structure: a microbatch on a stage is its
layers forward, backward and the recomputed statements; the last stage adds the logits and the fp32
cross-entropy. An iteration is ``(m + (p - 1) / v)`` microbatch-times (the schedule's bubble), the
point-to-point sends (split over the TP ranks and gathered after each receive when sequence parallelism
is off, as Megatron does), the data-parallel gradient reduction (over the network the replicas span;
hidden behind the last backward pass only with ``dp_overlap``), and the optimizer step. Every
collective here is priced by the collectives registry on a mesh placed on the hardware
(:func:`~symcost.models.layer_cost.collective_seconds`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from .. import caching
from ..errors import UsageError
from . import experts
from .config import ModelConfig
from .collective import collective_seconds, placed
from .layer_cost import ATTENTION, RECOMPUTE, LayerCost
from .schedule import Schedule, default_schedule
from .step import TrainingStep
from ..memory import OPTIMIZERS, optimizer_state

#: the optimizer step as Megatron-LM's mixed-precision optimizer runs it (megatron/optimizer/optimizer.py,
#: clip_grads.py), bytes per parameter, each its own pass over HBM: the fp32 gradient buffer zeroed before
#: the iteration's first microbatch (writes 4), the loss scale's unscale and inf / NaN check of the fp32
#: gradients (torch._amp_foreach_non_finite_check_and_unscale_: reads 4, writes 4), the gradient norm for
#: clipping (reads the fp32 gradient, 4), Adam (apex FusedAdam: reads the gradient, master weight and two
#: moments, 16, writes the master weight and the moments, 12) and the master weights copied to the bf16
#: model weights (reads 4, writes 2)
STEP_BYTES = {"zero_grads": 4, "unscale": 8, "grad_norm": 4, "adam": 28, "to_model": 6}


@caching.memoize(maxsize=1024)
def _params_per_device(cfg, tp: int, pp: int, ep: int) -> float:
    from .transformer import param_counts
    routed = experts.routed_params(cfg)
    return (param_counts(cfg)["total"] - routed + routed / ep) / (tp * pp)


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
    dp_overlap: bool = False    # the gradient reduction runs beside the last backward pass (Megatron 2022: after it)
    optimizer: str = "adam"     # the optimizer whose state a device holds (symcost.memory.OPTIMIZERS)
    dtype: str = "bf16"         # the weights' dtype (what the model runs: fp8 holds one byte a parameter)

    def __post_init__(self):
        if self.recompute not in RECOMPUTE:
            raise UsageError(f"--recompute must be one of {', '.join(RECOMPUTE)}, not {self.recompute!r}")
        if self.optimizer not in OPTIMIZERS:
            raise UsageError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, not {self.optimizer!r}")
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
        if self.pp * self.interleave > self.cfg.L:
            raise UsageError(f"{self.cfg.name} has {self.cfg.L} layers, fewer than {self.pp} stages x "
                             f"{self.interleave} chunks: every chunk needs a layer")
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
        self.pipeline   # noqa: B018 -- validates the schedule

    @property
    def chips(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def layers_per_stage(self) -> int:
        """Layers on the fullest pipeline stage: its ``interleave`` chunks of at most ``ceil(L / (pp v))``
        layers each. Uneven stages run at the pace of the fullest, as when LLaMA 3 405B's 126 layers run on
        16 stages of at most 8 (the first and the last stage one layer short; with 2 chunks a stage, chunks
        of at most 4)."""
        chunk = -(-self.cfg.L // (self.pp * self.interleave))
        return chunk * self.interleave

    @property
    def replicas(self) -> int:
        """Devices holding the same weights: the data-parallel replicas and the context-parallel ranks
        (gradients are summed, and ZeRO shards, over both)."""
        return self.dp * self.cp

    @cached_property
    def pipeline(self) -> Schedule:
        name = self.schedule or default_schedule(self.pp, self.interleave)
        return Schedule(name, self.pp, self.sequences // (self.dp * self.microbatch), self.interleave)

    # ------------------------------------------------------------------ figures
    @cached_property
    def layer_cost(self) -> LayerCost:
        """The layer as this run prices it (:class:`~symcost.models.layer_cost.LayerCost`): what the runs
        of a search that share it share."""
        return LayerCost(self.cfg, self.hw, self.tp, self.microbatch, self.seq, self.cp, self.recompute,
                         self.seq_parallel, self.tp_overlap, self.checkpoints, self.attention, self.ep)

    @property
    def policy(self) -> str:
        """What is recomputed: with checkpoints (book Part 6) the layer runs again from them (as full)."""
        return self.layer_cost.policy

    @cached_property
    def _kinds(self) -> tuple:
        lay = self.layer_cost
        n = experts.moe_layers(self.cfg)
        if not n:
            return ((1.0, lay),)
        return (((self.cfg.L - n) / self.cfg.L, lay), (n / self.cfg.L, replace(lay, moe=True)))

    def kinds(self) -> tuple:
        """(share of the layers, the layer pricing them): an MoE model's dense and MoE layers."""
        return self._kinds

    @property
    def tp_link(self) -> str:
        return self.layer_cost.tp_link

    @property
    def pp_link(self) -> str:
        return self.link(self.tp * self.cp * self.pp)

    @property
    def cp_link(self) -> str:
        return self.layer_cost.cp_link

    @property
    def dp_link(self) -> str:
        return self.link(self.chips)

    def link(self, span: int) -> str:
        """The link kind of a group whose outermost axis makes the run's innermost ``span`` devices (the
        placement of :func:`symcost.topology.place`: inner axes fill the fast domain first)."""
        return placed(self.hw, f"A={span}").axes[0].kind

    def _collective(self, kind: str, nbytes: float, group: int, inner: int) -> float:
        """A collective over ``group`` devices laid out outside ``inner`` consecutive ones (DP outside TP x CP
        x PP; PP outside TP x CP)."""
        mesh = f"A={group}" + (f",I={inner}" if inner > 1 else "")
        return collective_seconds(self.hw, kind, nbytes, group, mesh, "A")

    def layer(self) -> dict:
        """Seconds one layer takes for one microbatch on one device, by part (an MoE model: the mean over
        its dense and MoE layers)."""
        parts = [(w, lay.figures()) for w, lay in self.kinds()]
        return {k: sum(w * p[k] for w, p in parts) for k in parts[0][1]}

    def layer_timings(self) -> dict:
        """Forward, backward and recompute seconds of one layer for one microbatch, communication included
        as it runs (an MoE model: the mean over its layers)."""
        parts = [(w, lay.timings()) for w, lay in self.kinds()]
        return {k: sum(w * p[k] for w, p in parts) for k in ("forward", "backward", "recompute")}

    def head(self) -> float:
        """The logits (forward and backward) and cross-entropy of one microbatch on the last stage."""
        return self.layer_cost.head()

    def params_per_device(self) -> float:
        """Parameters a device holds before ZeRO: its stage's share over TP, routed experts over EP."""
        return _params_per_device(self.cfg, self.tp, self.pp, self.ep)

    def send(self) -> float:
        """Seconds of one point-to-point send of a microbatch's activations between stages: each TP rank
        sends its 1 / t of them (the scatter-gather of Narayanan et al. 2021, section 4.1) and, without
        sequence parallelism, the receiving stage gathers them over TP."""
        if self.pp == 1:
            return 0.0
        v = 2 * self.seq * self.microbatch * self.cfg.D / self.cp
        inner = self.tp * self.cp
        send = collective_seconds(self.hw, "Send", v / self.tp, self.pp,
                                  f"P={self.pp}" + (f",I={inner}" if inner > 1 else ""), "P")
        if self.tp > 1 and not self.seq_parallel:
            send += self._collective("AllGather", v, self.tp, 1)
        return send

    def iteration(self) -> dict:
        """Seconds per iteration, by part."""
        sch = self.pipeline
        lay = self.layer()
        per_stage = self.layers_per_stage
        mb = self._microbatch()
        m = sch.microbatches
        p2p = m * sch.sends_per_microbatch * self.send()
        params = self.params_per_device()
        dp_exposed = self._dp_comms(params, per_stage * lay["backward"], per_stage * lay["forward"], m)
        optimizer = self._optimizer_step(params)
        parts = {"forward": m * per_stage * lay["forward"], "backward": m * per_stage * lay["backward"],
                 "recompute": m * per_stage * lay["recompute"],
                 "tp_comms": m * per_stage * lay["tp_comms"]
                 + self._sequence_parallel_grads(per_stage * lay["sp_grads"]),
                 "cp_comms": m * per_stage * lay["cp_comms"], "ep_comms": m * per_stage * lay["ep_comms"],
                 "head": m * self.head(), "bubble": sch.bubble(mb, per_stage * lay["weight_grads"]), "p2p": p2p,
                 "dp_comms": dp_exposed, "optimizer": optimizer}
        parts["iteration"] = sum(parts.values())
        return parts

    def _microbatch(self) -> float:
        """Seconds of one microbatch through a stage: its layers' forward, backward and recomputation with
        their communication, and the head."""
        lay = self.layer()
        return self.layers_per_stage * sum(lay[k] for k in ("forward", "backward", "recompute", "tp_comms", "cp_comms",
                                                            "ep_comms")) + self.head()

    def _sequence_parallel_grads(self, elements: float) -> float:
        """The sequence-parallel weights' fp32 gradients (an MoE router's: each TP rank saw its own tokens)
        summed over the TP ranks once a step, after the last backward pass and before the data-parallel
        reduction, as Megatron-Core's finalize_model_grads sums them."""
        if elements == 0 or self.tp == 1:
            return 0.0
        return self._collective("AllReduce", 4 * elements, self.tp, 1)

    def _optimizer_step(self, params: float) -> float:
        """Seconds of the optimizer step (:data:`STEP_BYTES`): ZeRO stage 1 steps each replica's shard of the
        parameters, stage 2 also holds (and zeroes) only its shard of the gradients."""
        dp = self.replicas
        shard = params / (dp if self.zero >= 1 else 1)
        grads = params / (dp if self.zero >= 2 else 1)
        on_shard = sum(b for k, b in STEP_BYTES.items() if k != "zero_grads")   # the gradients: where held
        e = self.hw.efficiency
        return (on_shard * shard + STEP_BYTES["zero_grads"] * grads) / (self.hw.hbm_bandwidth * e.hbm)

    def _dp_comms(self, params: float, backward: float, forward: float, m: int) -> float:
        """Data-parallel collectives on the critical path. The fp32 gradients are reduced (an AllReduce, or
        with ZeRO a ReduceScatter and, after the step, an AllGather of the bf16 weights) after the last
        microbatch's backward pass, or beside it with ``dp_overlap``. ZeRO-3 (FSDP) also gathers each
        stage's weights before every microbatch's forward and backward pass, prefetched behind that pass.
        The group is the replicas: the data-parallel ones and the context-parallel ranks, laid out outside
        the TP ranks and the stages."""
        n = self.replicas
        if n == 1:
            return 0.0
        inner = self.tp * self.pp

        def exposed(t: float) -> float:
            return max(0.0, t - backward) if self.dp_overlap else t
        if self.zero == 0:
            return exposed(self._collective("AllReduce", 4 * params, n, inner))
        reduce = exposed(self._collective("ReduceScatter", 4 * params, n, inner))
        gather = self._collective("AllGather", 2 * params, n, inner)
        if self.zero < 3:
            return reduce + gather
        return reduce + m * (max(0.0, gather - forward) + max(0.0, gather - backward))

    def flops(self) -> dict:
        """FLOPs of one iteration: ``6N`` (parameters only, book Part 6), the model's (every matmul forward and
        backward, attention and logits included: what MFU counts) and the hardware's (with recomputation: HFU)."""
        from .transformer import param_counts
        tokens = self.sequences * self.seq
        per_mb = redo = 0.0      # one layer, one microbatch (an MoE model: the mean over its layers)
        for w, lay in self.kinds():
            model, again = lay.einsum_flops_all()
            per_mb, redo = per_mb + w * model, redo + w * again
        logits = 2 * self.seq * self.microbatch * self.cfg.D * self.cfg.V
        microbatches = self.sequences // self.microbatch
        model = 3 * microbatches * (self.cfg.L * per_mb + logits)
        return {"6N": 6 * param_counts(self.cfg)["active"] * tokens, "model": model,
                "hardware": model + microbatches * self.cfg.L * redo}

    @property
    def policy_name(self) -> str:
        """The memory policy in use: ``book`` (``checkpoints`` [B, D] tensors a layer) or ``saved``."""
        return "book" if self.checkpoints is not None else "saved"

    def _schedule(self, bubble: float) -> dict:
        """The schedule as the report gives it; ZB-H1's bubble fraction is the bubble it leaves (it depends on
        the stage's weight gradients, which the schedule alone does not know)."""
        out = self.pipeline.as_dict()
        if self.pipeline.name == "zb-h1":
            out["bubble_fraction"] = bubble / (self.pipeline.microbatches * self._microbatch())
        return out

    def result(self) -> TrainingStep:
        """The step priced: the iteration by part, FLOPs, MFU and HFU, memory under its policy, one layer."""
        it, fl = self.iteration(), self.flops()
        peak = self.chips * self.hw.C * it["iteration"]
        return TrainingStep.of(iteration=it, flops=fl, mfu=fl["model"] / peak, hfu=fl["hardware"] / peak,
                               mfu_6n=fl["6N"] / peak, schedule=self._schedule(it["bubble"]), memory=self.memory(),
                               memory_policy=self.policy_name, layer=self.layer_timings())

    def report(self) -> dict:
        """Everything ``symcost model --train`` prints, as a dictionary (:meth:`result`'s)."""
        return self.result().as_dict()

    def memory(self) -> dict:
        """Bytes per device on the first stage (the one holding the most activations): the weights in their
        dtype, the
        gradients and optimizer state of :func:`symcost.memory.optimizer_state` (Adam in mixed precision:
        fp32 gradients 4, an fp32 master copy 4 and two fp32 moments 8 bytes a parameter), activations in
        flight under the memory policy; ZeRO stage 1 splits the optimizer state over the replicas, 2 the
        gradients too, 3 (FSDP) the weights too."""
        params = self.params_per_device()
        if self.checkpoints is not None:
            per_layer = self.layer_cost.checkpoint_bytes(self.checkpoints)
        else:
            per_layer = sum(w * lay.saved_bytes() for w, lay in self.kinds())
        acts = per_layer * self.layers_per_stage * self.pipeline.in_flight
        dp = self.replicas
        state = optimizer_state(self.optimizer)
        from .. import dtypes
        out = {"weights": dtypes.nbytes(self.dtype) * params / (dp if self.zero >= 3 else 1),
               "gradients": state.gradients * params / (dp if self.zero >= 2 else 1),
               "optimizer": (state.master + state.moments) * params / (dp if self.zero >= 1 else 1),
               "activations": acts}
        out["total"] = sum(out.values())
        return out


__all__ = ["Run", "STEP_BYTES", "ATTENTION"]
