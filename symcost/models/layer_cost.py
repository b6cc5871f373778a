"""One transformer layer, one microbatch, one device of a training run: read off the engine's plan.

A :class:`LayerCost` is the part of a run (:class:`symcost.models.execution.Run`) that a layer's time
depends on -- the model, the hardware, TP, CP, EP, the microbatch and sequence, the recomputation policy,
sequence parallelism, the attention kernel -- and not the pipeline, the data-parallel replicas or the ZeRO
stage. Its layer is :func:`symcost.models.transformer.training_program` at the run's sharding (TP on mesh
axis ``Y``, CP on ``Z``, an MoE layer's EP on ``X``, placed on the hardware as a run places them: TP
innermost), derived with its backward pass by :func:`symcost.program.derive_program`. Every step of that
plan -- einsums, elementwise work, the collectives TP, SP, CP and EP need (EP's AllToAlls included) -- is
priced by :func:`symcost.pricing.op_cost` at the bound
sizes with the preset's achieved efficiency (each matmul at the rate its shape reaches, each collective
through the registry and its link model), and the steps on the critical path add up (the ``critical``
overlap policy: a training framework runs a layer's operations one after another).

A recomputation policy names the forward statements run again in the backward pass: ``full`` all of
them (communication included), ``selective`` the attention core (Korthikanti et al. 2022), JAX's
``dots_saveable`` everything but the einsums. The tensors the layer keeps for its backward pass are the
plan's residuals that the backward steps of the statements *not* recomputed read, plus what enters the
recomputed statements from outside them (:meth:`LayerCost.saved`): Korthikanti's 34sbh + 5as^2b and the
rest follow from the plan (tests/models/test_layer_plan.py).

    >>> from symcost.hardware import hardware
    >>> from symcost.models.config import load_model_config
    >>> lay = LayerCost(load_model_config("megatron-22b"), hardware("a100"), tp=8, microbatch=4, seq=2048)
    >>> t = lay.timings()
    >>> round(t["forward"] * 1e3, 1), round(t["backward"] * 1e3, 1), t["recompute"]
    (7.4, 12.0, 0.0)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType

from .. import caching, dtypes
from ..env import Env
from ..errors import UsageError
from ..layout import Layout, bytes_per_device
from ..pricing import floored, masked_half, op_cost
from ..program import derive_program
from . import expert_layer
from .collective import collective_seconds  # noqa: F401  (where a run prices its collectives)
from .transformer import WEIGHTS_ATTN, WEIGHTS_MLP

#: the layer's parameters (:func:`symcost.models.transformer.training_program` declares these)
WEIGHTS = frozenset(WEIGHTS_ATTN + WEIGHTS_MLP)

#: how the attention core runs
ATTENTION = ("unfused", "flash")

#: JAX's checkpoint policies (jax.checkpoint_policies) by name: what each keeps, as a policy of ours
JAX_POLICIES = {"everything_saveable": "none", "nothing_saveable": "full", "dots_saveable": "dots",
                "dots_with_no_batch_dims_saveable": "dots_no_batch"}
RECOMPUTE = ("none", "selective", "full", "dots", "dots_no_batch") + tuple(JAX_POLICIES)

#: the einsums of the attention core that run per sequence and head (JAX's "batch dimensions")
BATCHED = ("A", "Ctx")


def policy(recompute: str) -> str:
    """The policy's own name (a JAX policy name maps to what it keeps)."""
    if recompute not in RECOMPUTE:
        raise UsageError(f"--recompute must be one of {', '.join(RECOMPUTE)}, not {recompute!r}")
    return JAX_POLICIES.get(recompute, recompute)


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
        return "full" if self.checkpoints is not None else policy(self.recompute)

    # ------------------------------------------------------------------ the plan
    @property
    def mesh(self) -> str:
        """The layer's mesh: CP outside TP, so TP takes the fastest links, and an MoE layer's expert
        parallelism (``X``, carved out of the data-parallel replicas) outside both (a run's DP and PP lie
        outside all three)."""
        return ",".join(f"{n}={k}" for n, k in (("X", self._ep), ("Z", self.cp), ("Y", self.tp)) if k > 1) or "Y=1"

    @property
    def _ep(self) -> int:
        """The expert-parallel ranks this layer's plan spans (an MoE layer's; 1 for a dense one)."""
        return self.ep if self.moe else 1

    @property
    def sizes(self) -> dict:
        cfg = self.cfg
        out = {"B": self.microbatch, "T": self.seq, "S": self.seq, "D": cfg.D, "K": cfg.K, "G": cfg.G,
               "H": cfg.H, "F": cfg.F, "V": cfg.V}
        if self.moe:
            out.update(expert_layer.training_sizes(cfg, self.microbatch, self.seq, self.ep))
        return out

    def program(self) -> str:
        from .transformer import training_program
        return training_program(self.cfg, tp_axes=("Y",) if self.tp > 1 else (),
                                cp_axes=("Z",) if self.cp > 1 else (), seq_parallel=self.seq_parallel and self.tp > 1,
                                moe=self.moe, ep_axes=("X",) if self._ep > 1 else ())

    def plan(self):
        """The layer's plan, forward and backward, as ``derive --backward --json`` gives it: activations are
        kept as each operation has them and gathered again where the backward pass needs them gathered
        (Megatron keeps the sequence-parallel inputs split and gathers them again)."""
        return _plan(self.program(), self.mesh, tuple(sorted(self.sizes.items())), self.hw)

    @property
    def on_chip(self) -> frozenset:
        """Tensors that never reach HBM: with flash attention the scores and probabilities and their gradients."""
        if self.attention != "flash":
            return frozenset()
        names = ("A", "P", "Pd")
        return frozenset(names + tuple("d" + n for n in names))

    # ------------------------------------------------------------------ readings
    def timings(self) -> dict:
        """Seconds of one layer for one microbatch on one device: ``forward``, ``backward`` and
        ``recompute`` with their communication as it runs; ``tp_comms`` / ``cp_comms`` / ``ep_comms`` the
        collectives among them, ``matmul`` and ``elementwise`` the compute."""
        return _timings(self)

    def figures(self) -> dict:
        """The timings split as a run's breakdown shows them: compute (``forward``, ``backward``,
        ``recompute``) apart from each kind of communication; ``sp_grads``: the elements of the
        sequence-parallel weights' gradients a device holds (the router's), summed over the TP ranks once a
        step by the run; ``weight_grads``: the part of ``backward`` that computes the weights' gradients."""
        t = self.timings()
        return {"forward": t["forward_compute"], "backward": t["backward_compute"],
                "recompute": t["recompute_compute"], "tp_comms": t["tp_comms"], "cp_comms": t["cp_comms"],
                "ep_comms": t["ep_comms"], "matmul": t["matmul"], "elementwise": t["elementwise"],
                "sp_grads": t["sp_grads"], "weight_grads": t["weight_grads"]}

    def saved(self) -> tuple:
        """The layouts the layer keeps for its backward pass under its policy (:func:`_saved`)."""
        return _saved(self)

    def saved_bytes(self) -> float:
        """Bytes of activations the layer keeps for its backward pass on one device (the ``saved`` policy)."""
        return _saved_bytes(self)

    def _saved_bytes(self) -> float:
        plan = self.plan()
        sizes = dict(plan.sizes)
        out = sum(float(bytes_per_device(t, plan.mesh, sizes)) for t in self.saved())
        if self.attention == "flash" and self.policy != "full":    # the fp32 log-sum-exp, one a query and head
            out += 4 * self.microbatch * self.seq * self.cfg.N / (self.tp * self.cp)
        return out

    def checkpoint_bytes(self, k: int) -> float:
        """Bytes of ``k`` [B, D] checkpoints of the layer in bf16 on one device (book Part 6): the tokens
        the device holds between the TP regions (split over CP, and over TP with sequence parallelism)."""
        tokens = self.microbatch * self.seq / (self.cp * (self.tp if self.seq_parallel else 1))
        return 2.0 * k * tokens * self.cfg.D

    def einsum_flops_all(self) -> tuple[float, float]:
        """(FLOPs of the layer's einsums forward, FLOPs run again in the backward pass) for the whole layer
        (every TP and CP rank): what MFU and HFU count."""
        return _flops(self)

    def head(self) -> float:
        """The logits (forward and backward) and the fp32 cross-entropy of one microbatch on the last stage."""
        return _head(self)

    def env(self, plan) -> Env:
        return Env.numeric(plan.mesh, dict(plan.sizes), self.hw.bindings("bf16"), self.hw.efficiency)

    @property
    def tp_link(self) -> str:
        return self._link("Y")

    @property
    def cp_link(self) -> str:
        return self._link("Z") if self.cp > 1 else self.tp_link

    def _link(self, axis: str) -> str:
        plan = self.plan()
        names = [a.name for a in plan.mesh.axes]
        return plan.mesh.axes[names.index(axis)].kind if axis in names else "nvlink"


@caching.memoize(maxsize=512)
def _plan(program: str, mesh: str, sizes: tuple, hw):
    return derive_program(program, mesh=mesh, dims=dict(sizes), hw=hw, backward=True, reuse="none",
                          overlap="critical", efficiency=True, alternatives=False)


def _statement(step, outputs: set) -> str | None:
    """The forward statement a step belongs to: a forward step's result, a backward step's gradient input."""
    if step.phase == "forward":
        return step.tensor
    if not step.is_compute:
        return None
    for t in step.op.inputs:
        if t.name.startswith("d") and t.name[1:] in outputs:
            return t.name[1:]
    return None


def _core(plan) -> set:
    """The indices of the steps of the attention core (its forward statements and their gradients): what a
    flash-attention kernel runs."""
    from .transformer import CORE
    outputs = {s.tensor for s in plan.steps if s.phase == "forward" and s.is_compute}
    return {i for i, s in enumerate(plan.steps) if s.is_compute and _statement(s, outputs) in CORE}


def _recomputed(lay: LayerCost, plan) -> set:
    """Forward statements (by result) run again in the backward pass under the layer's policy."""
    pol = lay.policy
    fwd = [s for s in plan.steps if s.phase == "forward" and s.is_compute]
    if pol == "full":
        return {s.tensor for s in fwd}
    if pol == "selective" and lay.attention != "flash":   # flash's backward kernel recomputes the core itself
        from .transformer import CORE
        return {s.tensor for s in fwd if s.tensor in CORE}
    if pol in ("dots", "dots_no_batch"):
        return {s.tensor for s in fwd if not s.is_einsum or (pol == "dots_no_batch" and s.tensor in BATCHED)}
    return set()


@caching.memoize(maxsize=4096)
def _saved(lay: LayerCost) -> tuple:
    """What the backward pass reads and the policy does not make again: each residual of the plan read by
    the backward step of a statement that is not recomputed, and every tensor that enters the recomputed
    statements from outside them (their inputs, kept as the forward pass had them)."""
    plan = lay.plan()
    redo = _recomputed(lay, plan)
    residual = {t.name: t for t in plan.residuals}
    outputs = {s.tensor for s in plan.steps if s.phase == "forward" and s.is_compute}
    keep: dict[str, Layout] = {}
    for s in plan.steps:
        if s.phase != "backward" or not s.is_compute:
            continue
        if _statement(s, outputs) in redo:
            continue
        for t in s.op.inputs:
            base = t.name[:-5] if t.name.endswith("_mask") else t.name
            if t.name in residual and base not in lay.on_chip:
                keep.setdefault(t.name, residual[t.name])
    layouts = {t.name: t for t in plan.layouts}
    for s in plan.steps:
        if s.phase == "forward" and s.is_compute and s.tensor in redo:
            for t in s.op.inputs:
                if t.name not in redo and t.name not in outputs - redo and not t.name.startswith("W"):
                    keep.setdefault(t.name, residual.get(t.name, layouts.get(t.name, t)))
                elif t.name in outputs and t.name not in redo and not t.name.startswith("W"):
                    keep.setdefault(t.name, residual.get(t.name, t))
    if lay.attention == "flash" and lay.policy != "full":   # the kernel keeps Q, K and V
        for n in ("Q", "Ks", "Vs"):
            if n in residual:
                keep.setdefault(n, residual[n])
    return tuple(keep.values())


@caching.memoize(maxsize=4096)
def _saved_bytes(lay: LayerCost) -> float:
    return lay._saved_bytes()


@caching.memoize(maxsize=4096)
def _timings(lay: LayerCost) -> dict:
    plan = lay.plan()
    env = lay.env(plan)
    redo = _recomputed(lay, plan)
    out = dict.fromkeys(("forward", "backward", "recompute", "forward_compute", "backward_compute",
                         "recompute_compute", "tp_comms", "cp_comms", "ep_comms", "matmul", "elementwise",
                         "weight_grads"), 0.0)
    # a weight's gradient summed over ranks that split only the tokens -- the EP (data) ranks on X, the CP
    # ranks on Z, and, for a weight the TP ranks do not split under sequence parallelism (the router's,
    # which Megatron-Core marks sequence-parallel), the TP ranks on Y -- is summed once a step by the run,
    # not once a microbatch by the layer
    weights = {t.name: t for t in plan.layouts}
    replicated = {w for w, t in weights.items() if "Y" not in t.sharding_axes} if lay.seq_parallel else set()
    sequence_parallel: set = set()
    # each step as the one pricing path totals it: a step that launches a kernel pays the preset's per-kernel
    # floor beside its work (none on a preset without one); a flash-attention kernel is causal (the layer is
    # a decoder's) and skips the score blocks above the diagonal, forward and backward
    costs = [op_cost(s.op, env, lay.on_chip) for s in plan.steps]
    if lay.attention == "flash":
        core = _core(plan)
        costs = [masked_half(c, env) if i in core else c for i, c in enumerate(costs)]
    costs = floored(costs, env)
    for s, c in zip(plan.steps, costs):
        again = s.phase == "forward" and (lay.policy == "full" or (s.is_compute and s.tensor in redo))
        if s.is_compute:
            out[s.phase + "_compute"] += c.seconds
            out[s.phase] += c.seconds
            if s.phase == "backward" and s.tensor.startswith("d") and s.tensor[1:] in WEIGHTS:
                out["weight_grads"] += c.seconds     # W: what a zero-bubble schedule runs late
            out["matmul" if s.is_einsum else "elementwise"] += c.seconds * (2 if again else 1)
            if again:
                out["recompute_compute"] += c.seconds
                out["recompute"] += c.seconds
            continue
        if not s.is_collective or lay.tp_overlap and "Y" in s.axes and "Z" not in s.axes:
            continue
        if s.tensor.startswith("dW") and (set(s.axes) <= {"X", "Z"} or (
                s.tensor[1:] in replicated and set(s.axes) <= {"X", "Y", "Z"})):
            if "Y" in s.axes:
                sequence_parallel.add(s.tensor[1:])
            continue
        part = "ep_comms" if "X" in s.axes else "cp_comms" if "Z" in s.axes else "tp_comms"
        runs = 2 if again else 1
        out[part] += runs * c.seconds
        out[s.phase] += c.seconds
        if again:
            out["recompute"] += c.seconds
    out["sp_grads"] = sum(float(bytes_per_device(weights[w], plan.mesh, dict(plan.sizes)))
                          / dtypes.nbytes(weights[w].dtype) for w in sequence_parallel)
    if lay.attention == "flash" and lay.policy != "full":    # the backward kernel computes the scores again
        for s in plan.steps:
            if s.phase == "forward" and s.tensor == "A" and s.is_einsum:
                c = masked_half(op_cost(s.op, env, lay.on_chip), env).seconds
                out["recompute_compute"] += c
                out["recompute"] += c
                out["matmul"] += c
    return MappingProxyType(out)


@caching.memoize(maxsize=4096)
def _flops(lay: LayerCost) -> tuple[float, float]:
    """Each forward einsum's FLOPs over the whole layer, 2 x the product of its dimensions (however the plan
    lays it out: work a plan repeats on several devices counts once), for one microbatch (an MoE layer's
    plan holds the ``ep`` ranks' microbatches)."""
    plan = lay.plan()
    sizes = dict(plan.sizes)
    redo = _recomputed(lay, plan)
    model = again = 0.0
    for s in plan.steps:
        if s.phase == "forward" and s.is_einsum:
            f = 2.0 * math.prod(sizes[d] for d in s.op.dims) / lay._ep
            model += f
            if s.tensor in redo or (lay.attention == "flash" and s.tensor == "A" and lay.policy != "full"):
                again += f
    return model, again


@caching.memoize(maxsize=4096)
def _head(lay: LayerCost) -> float:
    """The vocabulary split over TP as Megatron splits it (``P`` blocks of ``Q = V / P`` words): the logits'
    matmul, then each rank's cross-entropy over its own block in fp32 (the max and the sum across ranks are
    B T floats each, not priced), forward and backward. Megatron 2022 casts the bf16 logits to fp32 before
    the cross-entropy (``output.float()``) and the fp32 gradient back: a pass each way reading 2 and
    writing 4 bytes an element, or reading 4 and writing 2, at the preset's achieved HBM bandwidth (a kernel
    each, with the per-kernel floor)."""
    tp = lay.tp
    m = "_Y" if tp > 1 else ""
    c = "_Z" if lay.cp > 1 else ""
    text = (f"param Wu[D, P{m}, Q]\n"
            f"Logits[B, T{c}, P{m}, Q] = X[B, T{c}, D] *_D Wu[D, P{m}, Q]\n"
            f"Lf:fp32[B, T{c}, P{m}, Q] = View(Logits[B, T{c}, P{m}, Q])\n"
            f"Loss[B, T{c}, P{m}] = CrossEntropy_Q(Lf[B, T{c}, P{m}, Q])")
    sizes = {"B": lay.microbatch, "T": lay.seq, "D": lay.cfg.D, "P": tp, "Q": -(-lay.cfg.V // tp)}
    plan = _plan(text, lay.mesh, tuple(sorted(sizes.items())), lay.hw)
    env = lay.env(plan)
    logits = lay.microbatch * lay.seq / lay.cp * sizes["Q"]
    casts = 2 * 6 * logits / (lay.hw.hbm_bandwidth * lay.hw.efficiency.hbm)
    costs = floored([op_cost(s.op, env) for s in plan.steps], env)    # each kernel with the per-kernel floor
    return sum(c.seconds for s, c in zip(plan.steps, costs) if s.is_compute) + casts + 2 * env.t_kernel


__all__ = ["LayerCost", "ATTENTION", "RECOMPUTE", "JAX_POLICIES", "policy", "collective_seconds"]
