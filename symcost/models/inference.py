"""Serving and training estimates for a model on a slice (book Parts 7 and 8), from the sharded layer
program derived by the engine.

    >>> from symcost.models.config import load_model_config
    >>> from symcost.hardware import hardware
    >>> s = Serving(load_model_config("llama3-70b"), hardware("tpu-v5e"), chips=8, dtype="int8")
    >>> r = s.decode(batch=32, seq=8192)
    >>> round(r.step_time * 1e3, 1), round(r.tokens_per_s_per_chip)     # book Part 8: 17 ms, 235
    (18.5, 217)

(the book counts the matmuls alone; the layer's norms, rotary embedding and residual adds stream another
0.7 ms of activations.)

A decode step is the sum over the layer's kernels -- its einsums and its elementwise work -- of max(T_math,
T_hbm) per device, each with the preset's per-kernel floor (weights and the KV cache stream from HBM; matmuls
become compute-bound past the critical batch), times the layers, plus the unembedding; collectives run
beside compute (the step is the larger of the two). With the weights and KV sharded as the book does (heads
and F over the model axes, the KV cache's batch over the rest) this is its general form,
B KV / W_hbm + max(2 B N_params / C, P / W_hbm).

A chip reads every weight block in the layout it holds it (a weight the mesh does not split is streamed
whole by every chip of that axis), and an MoE step reads only the experts its batch reaches, so the step
time and the memory a chip holds (``memory_bytes``) are two readings of the same layouts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from .. import dtypes
from ..env import Env
from ..errors import UsageError
from ..layout import bytes_per_device
from ..mesh import parse_mesh
from ..pricing import masked_half, op_cost, totals
from ..program import declared, derive_program
from .config import ModelConfig
from .counts import forward_flops, kv_bytes_per_token
from .results import PrefillEstimate, ServingStep
from .transformer import (
    WEIGHTS_MLP,
    Sharding,
    attention_weights,
    context_einsums,
    head_program,
    layer_program,
    on_chip,
    param_counts,
    sizes,
)


def default_mesh(cfg: ModelConfig, chips: int) -> tuple[str, Sharding]:
    """Model parallelism over Y (the KV heads, as far as they divide) and Z (the rest): heads over Y,
    F and the vocabulary over Y and Z, the KV cache's batch over Z (book Part 8: KV[2, B_Z, S, K_Y, H])."""
    if chips < 1:
        raise UsageError(f"--chips must be positive, not {chips}")
    y = math.gcd(chips, cfg.K)
    return split_mesh(y, chips // y)


def split_mesh(y: int, z: int) -> tuple[str, Sharding]:
    """The mesh of ``y`` chips along the heads (Y) by ``z`` along the KV cache's batch (Z), F and the
    vocabulary over both, written as ``--mesh`` reads it (:func:`mesh_sharding`: its first axis splits the
    heads), so that a mesh a search names is the mesh ``--mesh`` gives: ``Y=1,Z=8`` where the heads stay
    whole (``Z=8`` alone would split them); a KV cache's batch of one chip is left out."""
    if z == 1:
        return f"Y={y}", Sharding(model=("Y",), heads=("Y",))
    return f"Y={y},Z={z}", Sharding(model=("Y", "Z"), heads=("Y",), kv_batch=("Z",))


def mesh_sharding(mesh: str) -> Sharding:
    """The roles of a mesh the user writes: its first axis splits the heads, the others the KV cache's
    batch, F and the vocabulary all of them."""
    names = parse_mesh(mesh).names
    return Sharding(model=names, heads=names[:1], kv_batch=names[1:])


def touched_experts(experts: int, k: int, tokens: int) -> float:
    """Experts a step's ``tokens`` reach when each picks ``k`` of ``experts`` uniformly: each expert is
    missed by every token with probability (1 - k/E)^tokens, so E (1 - (1 - k/E)^tokens) are read."""
    return experts * (1 - (1 - k / experts) ** tokens)


@dataclass
class Serving:
    """A model on ``chips`` chips of ``hw``: weights in ``dtype``, KV cache in ``kv_dtype``, laid out on
    ``mesh`` by ``sharding`` (by default heads over Y, the KV cache's batch over Z; a ``mesh`` given alone
    takes :func:`mesh_sharding`'s roles). A device reads the weights as it holds them: step time and
    memory are two readings of the same layouts."""

    cfg: ModelConfig
    hw: object
    chips: int = 1
    dtype: str = "bf16"
    kv_dtype: str | None = None
    compute_dtype: str | None = None
    mesh: str | None = None
    sharding: Sharding | None = None
    _plans: dict = field(default_factory=dict, repr=False)
    _held: float | None = field(default=None, repr=False)

    def __post_init__(self):
        self.dtype = dtypes.canonical(self.dtype)
        self.kv_dtype = dtypes.canonical(self.kv_dtype) or self.dtype
        self.compute_dtype = dtypes.canonical(self.compute_dtype)
        if self.mesh is not None:
            devices = math.prod(a.size or 1 for a in parse_mesh(self.mesh).axes)
            if devices != self.chips:
                raise UsageError(f"--mesh {self.mesh} has {devices} devices but --chips is {self.chips}: give a mesh "
                                 f"of {self.chips} devices or --chips {devices}")
            self.sharding = self.sharding or mesh_sharding(self.mesh)
        else:
            mesh, sh = default_mesh(self.cfg, self.chips)
            self.mesh, self.sharding = mesh, self.sharding or sh

    # ------------------------------------------------------------------ derived pieces
    @property
    def params(self) -> dict:
        return param_counts(self.cfg)

    @property
    def param_bytes(self) -> float:
        return self.params["total"] * dtypes.nbytes(self.dtype)

    @property
    def kv_bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.cfg, self.kv_dtype)

    @property
    def axes(self) -> tuple[tuple[str, int], ...]:
        """The mesh used, axis by axis (a mesh with the default roles, heads over Y and the KV cache's batch
        over Z, names both, one of them maybe 1)."""
        sizes = {a.name: a.size or 1 for a in parse_mesh(self.mesh).axes}
        if set(self.sharding.heads) <= {"Y"} and set(self.sharding.kv_batch) <= {"Z"} and set(sizes) <= {"Y", "Z"}:
            sizes = {"Y": sizes.get("Y", 1), "Z": sizes.get("Z", 1)}
        return tuple(sizes.items())

    def _weights(self, plan) -> dict:
        """The weights of a layer or head plan as the devices hold them (their declared layouts)."""
        names = set(attention_weights(self.cfg)) | set(WEIGHTS_MLP) | {"Wu"}
        return {l.name: l for l in plan.layouts if l.name in names}

    @property
    def held_param_bytes(self) -> float:
        """Bytes of weights the slice holds, copies included: each weight's block on every device, read off
        the layout of its ``param`` in the layer and head programs (a weight the mesh does not split is
        held once a device; an MoE layer's router and shared experts as their own ``param`` lays them out)."""
        if self._held is None:
            one = self.padded(1)
            total = 0.0
            for moe, count in self._layer_kinds():
                if count:
                    text = layer_program(self.cfg, self.sharding, dtype=self.dtype, kv_dtype=self.kv_dtype, moe=moe,
                                         absorbed=True)
                    total += count * self._declared_bytes(text, sizes(self.cfg, batch=one, seq=1, context=1,
                                                                      experts_moe=moe),
                                                          set(attention_weights(self.cfg)) | set(WEIGHTS_MLP))
            copies = 1 if self.cfg.tied_embeddings else 2
            total += copies * self._declared_bytes(head_program(self.cfg, self.sharding, dtype=self.dtype),
                                                   sizes(self.cfg, batch=one, seq=1, context=1), {"Wu"})
            self._held = total * self.chips
        return self._held

    def _declared_bytes(self, text: str, dims: dict, names: set) -> float:
        """Bytes a device holds of the weights ``names`` as the program's ``param`` statements lay them out."""
        held, bound = declared(text, mesh=self.mesh, dims=dims, hw=self.hw)
        return sum(float(bytes_per_device(lay, bound["mesh"], bound["sizes"])) for n, lay in held.items() if n in names)

    @property
    def weight_bytes_per_device(self) -> float:
        """The weights one device holds (every device holds as much: the layouts are even)."""
        return self.held_param_bytes / self.chips

    def _layer_kinds(self) -> list:
        if self.cfg.is_moe:
            return [(False, self.cfg.dense_layers), (True, self.cfg.L - self.cfg.dense_layers)]
        return [(False, self.cfg.L)]

    def _group(self, names) -> int:
        mesh = parse_mesh(self.mesh)
        return math.prod(mesh.axis(a).size or 1 for a in set(names))

    @property
    def kv_copies(self) -> int:
        """How many devices hold each block of the KV cache: one where the cache is split over every
        axis; with latent attention the latent is shared by all heads, so splitting the heads copies it
        onto every device of those axes (only the cache's batch axes split it)."""
        split = set(self.sharding.kv_batch or self.sharding.batch) | set(self.sharding.context)
        if not self.cfg.is_mla:
            split |= set(self.sharding.heads)
        return max(1, self.chips // self._group(split))

    def _kv_slot(self, seq: int) -> float:
        """Bytes one sequence's KV cache of ``seq`` tokens takes on a device: its block of the key-value
        heads (a split the heads do not divide pads them: 8 heads over 3 devices hold 3 each), or the whole
        latent with latent attention; its block of the tokens where they are split (context parallelism)."""
        share = 1.0
        if not self.cfg.is_mla:
            n = self._group(self.sharding.heads)
            share = -(-self.cfg.K // n) / self.cfg.K
        return -(-seq // self._group(self.sharding.context)) * self.kv_bytes_per_token * share

    def memory_per_device(self, batch: int, seq: int) -> float:
        """What a device holds: its weight blocks and its block of the KV caches, the batch padded as the
        step pads it (``batch`` over the cache's batch axes, rounded up)."""
        per = self.padded(batch) // self._group(self.sharding.kv_batch or self.sharding.batch)
        return self.weight_bytes_per_device + per * self._kv_slot(seq)

    @property
    def hbm_total(self) -> float:
        return self.chips * self.hw.hbm_bytes

    def _constants(self, plan):
        b = dict(self.hw.bindings(self.compute_dtype or plan.compute_dtype))
        return b

    def _plan(self, which: str, batch: int, seq: int, context: int, moe: bool = False, absorbed: bool = True,
              prompt: bool = False):
        key = (which, moe, batch, seq, context, absorbed, prompt)
        plan = self._plans.get(key)
        if plan is None:
            if which == "layer":
                text = layer_program(self.cfg, self.sharding, dtype=self.dtype, kv_dtype=self.kv_dtype, moe=moe,
                                     absorbed=absorbed, prompt=prompt)
            else:
                text = head_program(self.cfg, self.sharding, dtype=self.dtype)
            dims = sizes(self.cfg, batch=batch, seq=seq, context=context, experts_moe=moe)
            achieved = not self.hw.efficiency.ideal          # chosen as it is priced: floors in
            plan = derive_program(text, mesh=self.mesh, dims=dims, hw=self.hw, moves="all", efficiency=achieved,
                                  choose_achieved=achieved, alternatives=False)   # the plan; no runner-ups kept
            self._plans[key] = plan
        return plan

    def _roofline(self, plan, override=None, causal: bool = False) -> tuple[float, float, float, float, float, float]:
        """(the step time, T_math, T_hbm, T_comms, weight bytes read, the kernels one after another) per device,
        in seconds and bytes, under the ``step`` overlap policy. Every einsum that uses a weight reads the
        block the device holds (a replicated weight whole, though the plan may compute on a slice of it).
        The attention scores never reach HBM (the attention einsums run fused, as flash attention does), so
        their bytes are not counted; ``causal``: each token attends to the tokens before it alone, and the
        fused kernel skips the score blocks above the diagonal, so the attention einsums do half their
        FLOPs (they still read every key and value). ``override`` rebinds sizes (the plan is symbolic in
        them), so one derivation serves a sweep."""
        eff = None if self.hw.efficiency.ideal else self.hw.efficiency     # the preset's achieved figures
        env = Env.numeric(plan.mesh, {**dict(plan.sizes), **(override or {})}, self._constants(plan), eff)
        held = self._weights(plan)
        einsums = [_reading_held(s.op, held) for s in plan.steps if s.is_einsum]
        ops = [_reading_held(s.op, held) if s.is_einsum else s.op for s in plan.steps]
        costs = [op_cost(op, env, on_chip(self.cfg)) for op in ops]
        if causal:
            masked = set(context_einsums(self.cfg))
            costs = [masked_half(c, env) if s.is_einsum and s.tensor in masked else c
                     for s, c in zip(plan.steps, costs)]
        t = totals(costs, env, "step")
        read = sum(float(env.local_bytes(i)) for op in einsums for i in op.inputs if i.name in held)
        return t.t_step, t.t_math, t.t_hbm, t.t_comms, read, t.t_einsums

    # ------------------------------------------------------------------ decode
    def decode(self, batch: int, seq: int, plan_batch: int | None = None, new_tokens: int = 1) -> ServingStep:
        """One generation step for ``batch`` sequences with ``seq`` tokens of context each. The layout is
        chosen at ``plan_batch`` (default: ``batch``) and the costs evaluated at ``batch``."""
        return self._step(batch, seq, plan_batch, new_tokens, new_tokens, absorbed=True, causal=False, prompt=False)

    def prefill_step(self, batch: int, seq: int, plan_batch: int | None = None, causal: bool = True) -> ServingStep:
        """Prefill of ``batch`` prompts of ``seq`` tokens through the derived layer program on this mesh
        (its collectives included): every token through every layer, each attending to the tokens before
        it (``causal``: half the attention's FLOPs, as a causal flash-attention kernel skips the masked
        blocks; ``causal=False``: to every token of the prompt), latent attention in its naive form, the
        logits of the last token only. ``step_time`` is the time to the first token; tokens a second count
        the prompt's tokens."""
        return self._step(batch, seq, plan_batch, seq, 1, absorbed=False, causal=causal, prompt=True)

    def _expert_layer(self, plan, over: dict, tokens: int, causal: bool) -> tuple[tuple, float]:
        """An MoE layer's step, reading the experts its ``tokens`` reach, and those experts on the slice.
        The routed experts are split over the ``experts`` axes (``n`` groups of E/n; none by default) and
        each expert's F over the other model axes, so a device holds a slice of every expert of its group.
        A group reads ``p`` experts: of its E/n, those reached (:func:`touched_experts`, at least one
        where the experts are split: the step waits for a group that holds a reached expert); each device
        of the group reads its slice of each. The plan's experts are priced with E = n x floor(p) and
        n x ceil(p) (each seeing its tokens, M x I = B T k / E, so the FLOPs stay the tokens') and the two
        steps weighed to p: the expected step over the batches' routings. The router scores all ``Er``
        experts and the shared experts (their own statements) see every token, whichever are reached."""
        cfg = self.cfg
        n = self._group(self.sharding.experts)
        touched = touched_experts(cfg.E, cfg.k, tokens)
        p = min(cfg.E / n, max(1.0, touched / n))
        lo, hi = math.floor(p), math.ceil(p)
        batch = over["B"]

        def at(per: int) -> tuple:
            experts = n * per
            return self._roofline(plan, {**over, "E": experts, "M": batch, "I": tokens * cfg.k / (batch * experts)},
                                  causal)
        low = at(lo)
        if hi == lo:
            return low, touched + cfg.shared_experts
        high = at(hi)
        return tuple(a + (p - lo) * (b - a) for a, b in zip(low, high)), touched + cfg.shared_experts

    def _step(self, batch: int, seq: int, plan_batch, new_tokens: int, logits_tokens: int,
              absorbed: bool, causal: bool, prompt: bool) -> ServingStep:
        if batch < 1 or seq < 1:
            raise UsageError("--batch and --seq must be positive")
        run_batch = self.padded(batch)
        at = self.padded(plan_batch) if plan_batch else run_batch
        roof = tm = th = tc = read = kernels = 0.0
        experts = None
        pads: set = set()
        for moe, count in self._layer_kinds():
            if count:
                plan = self._plan("layer", at, new_tokens, seq, moe, absorbed, prompt)
                pads |= {(p.dim, p.size, p.devices, p.padded) for p in plan.padding if p.dim != "B"}
                if moe:
                    r, experts = self._expert_layer(plan, {"B": run_batch}, run_batch * new_tokens, causal)
                else:
                    r = self._roofline(plan, {"B": run_batch}, causal)
                roof, tm, th, tc, read, kernels = (acc + count * x for acc, x in
                                                   zip((roof, tm, th, tc, read, kernels), r))
        head = self._plan("head", at, logits_tokens, seq)
        pads |= {(p.dim, p.size, p.devices, p.padded) for p in head.padding if p.dim != "B"}
        h = self._roofline(head, {"B": run_batch})
        roof, tm, th, tc, read, kernels = (acc + x for acc, x in zip((roof, tm, th, tc, read, kernels), h))
        return ServingStep(step_time=max(roof, tc), t_math=tm, t_hbm=th, t_comms=tc, t_kernels=kernels,
                           tokens=batch * new_tokens,
                           chips=self.chips, mesh=self.axes, memory_bytes=self.memory_per_device(batch, seq),
                           hbm_bytes=self.hw.hbm_bytes, max_batch=self.max_batch(seq), kv_copies=self.kv_copies,
                           weight_bytes_read=read, experts_read=experts, batch=batch, padded_batch=run_batch,
                           weight_bytes_held=self.weight_bytes_per_device, experts_over=self.sharding.experts,
                           tokens_over=self.sharding.context, padding=tuple(sorted(pads)))

    def padded(self, batch: int) -> int:
        """A batch the KV cache's batch axes divide (a server pads a ragged batch)."""
        n = self._group(self.sharding.kv_batch or self.sharding.batch)
        return -(-batch // n) * n

    def max_batch(self, seq: int) -> int:
        """Largest batch whose weights and KV caches fit in a device's HBM (:meth:`memory_per_device`: a
        multiple of the devices the cache's batch splits over)."""
        free = self.hw.hbm_bytes - self.weight_bytes_per_device
        n = self._group(self.sharding.kv_batch or self.sharding.batch)
        return max(0, int(free // self._kv_slot(seq)) * n)

    def batches(self, top: int) -> list[int]:
        """The batches a sweep up to ``top`` prices: the powers of two, each padded to a multiple of the
        devices the KV cache's batch splits over (it costs what the power of two does and serves more
        sequences), and ``top``."""
        if top < 1:
            return []
        return [b for b in sorted({self.padded(2 ** i) for i in range(int(math.log2(top)) + 1)} | {top}) if b <= top]

    def frontier(self, seq: int, batches=None, plan_at: int | None = None) -> list[ServingStep]:
        """Latency and throughput by batch size (book Part 7's LLaMA-2 13B tables, Part 8's Pareto): each
        batch's step derived at that batch, as :meth:`decode` derives it alone; ``plan_at``: every batch
        priced with the one plan made at that batch instead (a fine sweep: hundreds of batches for the
        price of one derivation, each step that plan's, which at far larger batches may not be the plan
        derived there)."""
        if batches is None:
            batches = self.batches(max(1, self.max_batch(seq)))
        return [self.decode(b, seq, plan_batch=plan_at) for b in batches]

    # ------------------------------------------------------------------ prefill and training
    def prefill(self, seq: int, mfu: float | None = None, attention: bool = True, causal: bool = True,
                batch: int = 1) -> PrefillEstimate:
        """Prefill of ``batch`` sequences of ``seq`` tokens (``causal``: each attending to the tokens before it,
        half the attention's FLOPs) at ``mfu`` of the slice's peak (by default the
        preset's matmul efficiency at the size of the layer's largest matmul on one chip, or the book's 0.4
        for a preset without efficiency data). It can be no faster than streaming the weights a device
        holds from HBM once (the HBM floor). It fits when the weights and the KV caches it writes fit in a
        device's HBM (``memory_bytes`` is per device)."""
        if mfu is not None and not 0 < mfu <= 1:
            raise UsageError(f"the MFU is a fraction of the peak, in (0, 1], not {mfu:g}")
        flops = forward_flops(self.cfg, batch=batch, seq=seq, attention=attention, causal=causal)
        C = self.hw.flops_for(self.compute_dtype or ("bf16" if dtypes.nbytes(self.dtype) <= 2 else self.dtype))
        eff = self.hw.efficiency
        source = "given"
        if mfu is None:
            if eff.matmul:
                largest = 2 * batch * seq * self.cfg.D * self.cfg.F / self.chips
                mfu, source = eff.math(largest), "the preset's matmul efficiency"
            else:
                mfu, source = 0.4, "the book's assumption (the preset has no efficiency data)"
        floor = self.weight_bytes_per_device / (self.hw.hbm_bandwidth * eff.hbm)
        return PrefillEstimate(batch, flops, max(flops / (self.chips * C * mfu), floor), mfu, source, floor,
                               self.axes, self.memory_per_device(batch, seq), self.hw.hbm_bytes,
                               "causal" if causal else "full")


def _reading_held(op, held: dict):
    """The einsum ``op`` reading each weight in the layout the device holds it (an einsum on a slice of a replicated
    weight still streams the whole block from HBM: the device holds it and the step reads what it holds)."""
    if not any(i.name in held for i in op.inputs):
        return op
    return replace(op, inputs=tuple(held.get(i.name, i) for i in op.inputs))

