"""Serving and training estimates for a model on a slice (book Parts 7 and 8), from the sharded layer
program derived by the engine.

    >>> from symcost.models.config import load_model_config
    >>> from symcost.hardware import hardware
    >>> s = Serving(load_model_config("llama3-70b"), hardware("tpu-v5e"), chips=8, dtype="int8")
    >>> r = s.decode(batch=32, seq=8192)
    >>> round(r["step_time"] * 1e3, 1), round(r["tokens_per_s_per_chip"])     # book Part 8: 17 ms, 235
    (17.8, 225)

A decode step is the sum over the layer's einsums of max(T_math, T_hbm) per device (weights and the KV
cache stream from HBM; matmuls become compute-bound past the critical batch), times the layers, plus the
unembedding; collectives run beside compute (the step is the larger of the two). With the weights and
KV sharded as the book does (heads and F over the model axes, the KV cache's batch over the rest) this is
its general form, B KV / W_hbm + max(2 B N_params / C, P / W_hbm).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import sympy as sp

from .. import dtypes
from ..env import Env
from ..errors import UsageError
from ..pricing import op_cost, totals
from ..program import derive_program
from .config import ModelConfig
from .transformer import (Sharding, checkpoint_bytes, flops_per_token, forward_flops, head_program,
                          kv_bytes_per_token, layer_program, on_chip, param_counts, sizes,
                          WEIGHTS_MLP)


def _canon(dtype: str | None) -> str | None:
    return dtypes.canonical(dtype)


def default_mesh(cfg: ModelConfig, chips: int) -> tuple[str, Sharding]:
    """Model parallelism over Y (the KV heads, as far as they divide) and Z (the rest): heads over Y,
    F and the vocabulary over Y and Z, the KV cache's batch over Z (book Part 8: KV[2, B_Z, S, K_Y, H])."""
    if chips < 1:
        raise UsageError(f"--chips must be positive, not {chips}")
    y = math.gcd(chips, cfg.K)
    return split_mesh(y, chips // y)


def split_mesh(y: int, z: int) -> tuple[str, Sharding]:
    """The mesh of ``y`` chips along the heads (Y) by ``z`` along the KV cache's batch (Z), F and the
    vocabulary over both; an axis of one chip is left out."""
    if z == 1:
        return f"Y={y}", Sharding(model=("Y",), heads=("Y",))
    if y == 1:
        return f"Z={z}", Sharding(model=("Z",), kv_batch=("Z",))
    return f"Y={y},Z={z}", Sharding(model=("Y", "Z"), heads=("Y",), kv_batch=("Z",))


@dataclass
class Serving:
    """A model on ``chips`` chips of ``hw``: weights in ``dtype``, KV cache in ``kv_dtype``."""

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
        self.dtype = _canon(self.dtype)
        self.kv_dtype = _canon(self.kv_dtype) or self.dtype
        self.compute_dtype = _canon(self.compute_dtype)
        if self.mesh is None or self.sharding is None:
            mesh, sh = default_mesh(self.cfg, self.chips)
            self.mesh = self.mesh or mesh
            self.sharding = self.sharding or sh

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
    def held_param_bytes(self) -> float:
        """Bytes of weights the slice holds, copies included: each weight's block on every device, read off
        the layout of its ``param`` in the layer and head programs (a weight the mesh does not split is
        held once a device; the shared experts as the routed ones are laid out)."""
        if self._held is None:
            from ..memory import memory_per_device
            from .transformer import attention_weights
            one = self._padded(1)
            total = 0.0
            for moe, count in self._layer_kinds():
                if not count:
                    continue
                plan = self._plan("layer", one, 1, 1, moe)
                attn = attention_weights(self.cfg)
                mlp = [n for n in WEIGHTS_MLP if n in {l.name for l in plan.layouts}]
                b_attn = float(plan.evaluate(memory_per_device(plan, attn)["params"]))
                b_mlp = float(plan.evaluate(memory_per_device(plan, mlp)["params"]))
                if moe:
                    b_mlp *= (self.cfg.E + self.cfg.shared_experts) / self.cfg.E
                total += count * (b_attn + b_mlp)
            head = self._plan("head", one, 1, 1)
            total += (1 if self.cfg.tied_embeddings else 2) * float(head.evaluate(memory_per_device(head, ["Wu"])["params"]))
            self._held = total * self.chips
        return self._held

    def _layer_kinds(self) -> list:
        if self.cfg.is_moe:
            return [(False, self.cfg.dense_layers), (True, self.cfg.L - self.cfg.dense_layers)]
        return [(False, self.cfg.L)]

    @property
    def kv_copies(self) -> int:
        """How many devices hold each block of the KV cache: one where the cache is split over every
        axis; with latent attention the latent is shared by all heads, so splitting the heads copies it
        onto every device of those axes (only the cache's batch axes split it)."""
        from ..mesh import parse_mesh
        mesh = parse_mesh(self.mesh)
        split = set(self.sharding.kv_batch or self.sharding.batch)
        if not self.cfg.is_mla:
            split |= set(self.sharding.heads)
        n = 1
        for a in split:
            n *= mesh.axis(a).size or 1
        return max(1, self.chips // n)

    def _kv_bytes(self, batch: int, seq: int) -> float:
        """Bytes the KV caches of ``batch`` sequences of ``seq`` tokens take on the slice, copies included."""
        return batch * seq * self.kv_bytes_per_token * self.kv_copies

    @property
    def hbm_total(self) -> float:
        return self.chips * self.hw.hbm_bytes

    def _constants(self, plan):
        b = dict(self.hw.bindings(self.compute_dtype or plan.compute_dtype))
        return b

    def _plan(self, which: str, batch: int, seq: int, context: int, moe: bool = False, absorbed: bool = True):
        key = (which, moe, batch, seq, context, absorbed)
        plan = self._plans.get(key)
        if plan is None:
            if which == "layer":
                text = layer_program(self.cfg, self.sharding, dtype=self.dtype, kv_dtype=self.kv_dtype, moe=moe,
                                     absorbed=absorbed)
            else:
                text = head_program(self.cfg, self.sharding, dtype=self.dtype)
            dims = sizes(self.cfg, batch=batch, seq=seq, context=context, experts_moe=moe)
            plan = derive_program(text, mesh=self.mesh, dims=dims, hw=self.hw, moves="all")
            self._plans[key] = plan
        return plan

    def _roofline(self, plan, override=None) -> tuple[float, float, float, float]:
        """(sum over einsums of max(T_math, T_hbm), T_math, T_hbm, T_comms) per device, in seconds, under
        the ``step`` overlap policy. The attention scores never reach HBM (the attention einsums run fused,
        as flash attention does), so their bytes are not counted. ``override`` rebinds sizes
        (the plan is symbolic in them), so one derivation serves a sweep."""
        env = Env.numeric(plan.mesh, {**dict(plan.sizes), **(override or {})}, self._constants(plan))
        t = totals((op_cost(s.op, env, on_chip(self.cfg)) for s in plan.steps), env, "step")
        return t.t_einsums, t.t_math, t.t_hbm, t.t_comms

    # ------------------------------------------------------------------ decode
    def decode(self, batch: int, seq: int, plan_batch: int | None = None, new_tokens: int = 1) -> dict:
        """One generation step for ``batch`` sequences with ``seq`` tokens of context each. The layout is
        chosen at ``plan_batch`` (default: ``batch``) and the costs evaluated at ``batch``."""
        return self._step(batch, seq, plan_batch, new_tokens, new_tokens, absorbed=True)

    def prefill_step(self, batch: int, seq: int, plan_batch: int | None = None) -> dict:
        """Prefill of ``batch`` prompts of ``seq`` tokens through the derived layer program on this mesh
        (its collectives included): every token through every layer, attention over the whole prompt (not
        halved for causality), latent attention in its naive form, the logits of the last token only.
        ``step_time`` is the time to the first token; tokens a second count the prompt's tokens."""
        return self._step(batch, seq, plan_batch, seq, 1, absorbed=False)

    def _step(self, batch: int, seq: int, plan_batch, new_tokens: int, logits_tokens: int, absorbed: bool) -> dict:
        if batch < 1 or seq < 1:
            raise UsageError("--batch and --seq must be positive")
        run_batch = self._padded(batch)
        at = self._padded(plan_batch) if plan_batch else run_batch
        per = []
        roof = tm = th = tc = 0.0
        for moe, count in self._layer_kinds():
            if count:
                over = {"B": run_batch,
                        **({"R": max(1, round(run_batch * new_tokens * self.cfg.k / self.cfg.E))} if moe else {})}
                r = self._roofline(self._plan("layer", at, new_tokens, seq, moe, absorbed), over)
                per.append(r)
                roof += count * r[0]
                tm += count * r[1]
                th += count * r[2]
                tc += count * r[3]
        h = self._roofline(self._plan("head", at, logits_tokens, seq), {"B": run_batch})
        roof, tm, th, tc = roof + h[0], tm + h[1], th + h[2], tc + h[3]
        step = max(roof, tc)
        memory = self.held_param_bytes + self._kv_bytes(batch, seq)
        return {"step_time": step, "t_math": tm, "t_hbm": th, "t_comms": tc,
                "tokens_per_s": batch * new_tokens / step,
                "tokens_per_s_per_chip": batch * new_tokens / step / self.chips,
                "max_batch": self.max_batch(seq), "memory_bytes": memory, "kv_copies": self.kv_copies,
                "fits": memory <= self.hbm_total}

    def _padded(self, batch: int) -> int:
        """A batch the KV cache's batch axes divide (a server pads a ragged batch)."""
        from ..mesh import parse_mesh
        mesh = parse_mesh(self.mesh)
        n = 1
        for a in self.sharding.kv_batch or self.sharding.batch:
            n *= mesh.axis(a).size or 1
        return -(-batch // n) * n

    def max_batch(self, seq: int) -> int:
        """Largest batch whose weights and KV caches fit in the slice's HBM."""
        free = self.hbm_total - self.held_param_bytes
        return max(0, int(free // (seq * self.kv_bytes_per_token * self.kv_copies)))

    def frontier(self, seq: int, batches=None) -> list[dict]:
        """Latency and throughput by batch size (book Part 7's LLaMA-2 13B tables, Part 8's Pareto)."""
        if batches is None:
            top = max(1, self.max_batch(seq))
            batches = sorted({2 ** i for i in range(0, int(math.log2(top)) + 1)} | {top})
        out = []
        rank_at = max(1, min(self.max_batch(seq) or 1, 64))  # one layout for the sweep
        for b in batches:
            r = self.decode(b, seq, plan_batch=rank_at)
            out.append({"batch": b, "step_time": r["step_time"], "tokens_per_s": r["tokens_per_s"],
                        "tokens_per_s_per_chip": r["tokens_per_s_per_chip"], "memory_bytes": r["memory_bytes"],
                        "fits": r["fits"]})
        return out

    # ------------------------------------------------------------------ prefill and training
    def prefill(self, seq: int, mfu: float | None = None, attention: bool = True, causal: bool = False,
                batch: int = 1) -> dict:
        """Prefill of ``batch`` sequences of ``seq`` tokens at ``mfu`` of the slice's peak (by default the
        preset's matmul efficiency at the size of the layer's largest matmul on one chip, or the book's 0.4
        for a preset without efficiency data). It can be no faster than streaming the weights from HBM
        once (the HBM floor). It fits when the weights and the KV caches it writes fit in the slice's HBM."""
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
        floor = self.held_param_bytes / (self.chips * self.hw.hbm_bandwidth * eff.hbm)
        memory = self.held_param_bytes + self._kv_bytes(batch, seq)
        return {"batch": batch, "flops": flops, "seconds": max(flops / (self.chips * C * mfu), floor),
                "mfu": mfu, "mfu_source": source, "hbm_floor": floor,
                "memory_bytes": memory, "fits": memory <= self.hbm_total}


def critical_batch(hw, weight_dtype: str = "bf16", compute_dtype: str | None = None) -> float:
    """B_crit where a decode matmul turns compute-bound: solve T_math = T_hbm for B on the einsum
    ``Out[B, F] = In[B, D] *_D W[D, F]`` with its weight-streaming term (book Part 7: 240 on v5e in
    bf16, 120 with int8 weights and bf16 FLOPs, 240 int8 x int8)."""
    wd = _canon(weight_dtype)
    cd = _canon(compute_dtype) or ("bf16" if wd in ("int8", "int4", "fp8") else wd)
    act = cd if cd != "bf16" or wd == "bf16" else "bf16"
    plan = derive_program(f"Out:{act}[B, F] = In:{act}[B, D] *_D W:{wd}[D, F]")
    B, D, F = (sp.Symbol(n, positive=True, integer=True) for n in "BDF")
    weights = sp.expand(plan.t_hbm).coeff(D * F) * D * F     # the weight bytes dominate: B << D, F
    (b,) = sp.solve(sp.Eq(plan.t_math, weights), B)
    return float(b.xreplace({sp.Symbol("C", positive=True): hw.flops_for(cd),
                             sp.Symbol("W_hbm", positive=True): hw.hbm_bandwidth}))


def train_estimate(cfg: ModelConfig, hw, chips: int, batch_tokens: float, tokens: float | None, mfu: float,
                   seq: int = 0, checkpoints_per_layer: int = 1, param_dtype: str = "bf16") -> dict:
    """Training FLOPs, time (None without ``tokens``), memory and the fewest chips whose HBM holds it (book
    Parts 4 and 5); ``fits`` says whether ``chips`` are enough."""
    if not 0 < mfu <= 1:
        raise UsageError(f"the MFU is a fraction of the peak, in (0, 1], not {mfu:g}")
    fpt = flops_per_token(cfg, seq=seq)
    total = fpt["train"] * tokens if tokens else None
    p = param_counts(cfg)["total"]
    params_b = p * dtypes.nbytes(_canon(param_dtype))
    opt_b = p * 8  # Adam's two fp32 moments
    act_b = checkpoint_bytes(cfg, batch_tokens, checkpoints_per_layer)
    mem = params_b + opt_b + act_b
    need = int(math.ceil(mem / hw.hbm_bytes))
    return {"flops_total": total, "seconds": total / (chips * hw.C * mfu) if total else None,
            "min_chips": need, "fits": chips >= need,
            "memory_bytes": {"params": params_b, "optimizer": opt_b, "activations": act_b, "total": mem}}


def min_topology(cfg: ModelConfig, hw, dtype: str, seq: int, kv_dtype: str | None = None) -> dict:
    """Fewest chips (a power of two) whose HBM holds the weights, the HBM left, and how many
    ``seq``-token KV caches fit in it (book Part 8's table)."""
    d = _canon(dtype)
    pb = param_counts(cfg)["total"] * dtypes.nbytes(d)
    need = pb / hw.hbm_bytes
    chips = 1
    while chips < need:
        chips *= 2
    free = chips * hw.hbm_bytes - pb
    kv = kv_bytes_per_token(cfg, _canon(kv_dtype) or d)
    return {"param_bytes": pb, "min_chips": need, "slice_chips": chips, "free_bytes": free,
            "kv_caches": free / (seq * kv)}


def kv_evicted_per_step(batch: int, prefill: int, generate: int) -> float:
    """KV tokens freed per decode step: each step finishes batch / generate sequences of prefill +
    generate tokens (book Part 8)."""
    return batch * (prefill + generate) / generate


def prefill_generate_ratio(prefill_seconds: float, step_seconds: float, batch: int, generate: int) -> float:
    """Prefill servers per generate server in disaggregated serving: the generate server finishes batch
    sequences every generate x step seconds; each needs a prefill (book Part 8)."""
    return prefill_seconds * batch / (step_seconds * generate)


def speculative_decode(target: Serving, drafter: Serving, batch: int, seq: int, draft: int,
                       acceptance: float) -> dict:
    """Speculative sampling (book Part 7): the drafter proposes ``draft`` tokens one step at a time, the
    target checks them in one step over ``draft + 1`` new tokens. With each draft token accepted with
    probability ``acceptance`` (independently), a round yields (1 - a^(k+1)) / (1 - a) tokens on average.
    Both step times come from the derived layer programs; in the memory-bound regime the check costs
    about one ordinary step, which is where the method wins."""
    if not 0 <= acceptance < 1 or draft < 1:
        raise UsageError("speculative decoding needs 0 <= acceptance < 1 and at least one draft token")
    t_draft = drafter.decode(batch, seq)["step_time"]
    t_check = target.decode(batch, seq, new_tokens=draft + 1)["step_time"]
    expected = (1 - acceptance ** (draft + 1)) / (1 - acceptance)
    round_time = draft * t_draft + t_check
    plain = target.decode(batch, seq)["step_time"]
    return {"round_time": round_time, "tokens_per_round": expected, "check_step": t_check,
            "draft_step": t_draft, "tokens_per_s": batch * expected / round_time,
            "speedup": (expected / round_time) / (1 / plain)}


def moe_critical_batch(cfg: ModelConfig, hw, weight_dtype: str = "bf16") -> float:
    """An MoE layer is compute-bound when each expert sees B_crit tokens: B > B_crit E / k."""
    return critical_batch(hw, weight_dtype) * cfg.E / cfg.k
