"""Parts 7 (Inference) and 8 (Serving LLaMA 3-70B): rooflines, decode steps, memory, topology."""
import dataclasses

import pytest
import sympy as sp

import symcost
from symcost.models.config import load_model_config
from symcost.models.estimates import (critical_batch, kv_evicted_per_step, min_topology, moe_critical_batch,
                                      prefill_generate_ratio)
from symcost.models.inference import Serving
from symcost.models.transformer import param_counts
from symcost.models.counts import kv_bytes_per_token
from symcost.optimize import optimize_plan
from symcost.program import derive_program
from symcost.solve import bandwidth_comms
from symcost.symbols import W_ici, axis, dim

from conftest import decode_elementwise_seconds

V5E = symcost.hardware("tpu-v5e")
V5E_82 = dataclasses.replace(V5E, hbm_bandwidth=8.2e11)     # the rounding Part 7 uses
LLAMA70 = load_model_config("llama3-70b")
LLAMA13 = load_model_config("llama2-13b")


# --------------------------------------------------------------------------------- rooflines


@pytest.mark.parametrize("weights, compute, answer", [("bf16", None, 240), ("int8", None, 120),
                                                      ("int8", "int8", 240)])
def test_critical_batch(weights, compute, answer):
    """inference.bcrit_v5e / bcrit_int8_variants / applied-inference.bcrit_dtypes: B_crit = C/W_hbm
    scaled by the weight bytes: 240 in bf16, 120 with int8 weights and bf16 FLOPs, 240 int8 x int8."""
    assert critical_batch(V5E_82, weights, compute) == pytest.approx(answer, rel=0.02)


def test_critical_batch_h100():
    """HARDWARE: H100 bf16 C / W_hbm = 295 (the book's 'about 280')."""
    assert critical_batch(symcost.hardware("h100")) == pytest.approx(295, rel=0.01)


def test_attention_intensity_in_generation_is_about_one():
    """inference.attention_intensity: generation (T = 1) reads the whole KV cache for ~1 FLOP a byte."""
    plan = symcost.derive("A[B, T, S, K, G] = Q[B, T, K, G, H] *_H Kc[B, S, K, H]", moves="none")
    S, H = dim("S"), dim("H")
    intensity = (plan.flops / (2 * dim("B") * S * dim("K") * H)).subs({dim("T"): 1, dim("G"): 1})
    assert sp.simplify(intensity) == 1


def test_moe_critical_batch():
    """inference.q5.moe_batch_threshold: uniform routing sends B k / E tokens to an expert: B > 240 E / k
    in bf16 (1920 for E=16, k=2); DeepSeek-V3 (E=256, k=8) with int8/fp8 weights: 120 * 32 = 3840."""
    moe = dataclasses.replace(load_model_config("part7-example"), E=16, k=2)
    assert moe_critical_batch(moe, V5E_82, "bf16") == pytest.approx(1920, rel=0.02)
    assert moe_critical_batch(load_model_config("deepseek-v3"), V5E_82, "int8") == pytest.approx(3840, rel=0.02)


# ------------------------------------------------------------------------------ step times


def test_popquiz_step_times():
    """inference.popquiz.*: 30B params in int8, 100 kB of KV a token, 8192 context, 16 v5e: batch 4 takes
    (4 * 819e6 + 30e9) / (16 * 8.1e11) = 2.57 ms; batch 256 is MLP compute-bound: 21 ms."""
    kv_seq = 100e3 * 8192
    assert kv_seq == pytest.approx(819e6, rel=0.01)
    step4 = (4 * kv_seq + 30e9) / (16 * 8.1e11)
    assert step4 == pytest.approx(0.0025, rel=0.04)
    step256 = 256 * kv_seq / (16 * 8.1e11) + max(2 * 256 * 30e9 / (16 * 1.97e14), 30e9 / (16 * 8.1e11))
    assert step256 == pytest.approx(0.021, rel=0.01)


def test_llama13b_figures():
    """inference.llama13b.*: 13e9 params, 26 GB in bf16, 6.7 GB of KV per 8192-token sequence (MHA),
    an 8k-token activation of 84 MB (the book: 80 MB)."""
    pc = param_counts(LLAMA13)
    assert pc["total"] == pytest.approx(13e9, rel=0.01)
    assert pc["total"] * 2 == pytest.approx(26e9, rel=0.01)
    assert kv_bytes_per_token(LLAMA13) * 8192 == pytest.approx(6.7e9, rel=0.01)
    assert 8192 * LLAMA13.D * 2 == pytest.approx(80e6, rel=0.05)


TABLE_MHA = {1: (4.98, 200.61), 8: (12.13, 659.3), 16: (20.3, 787.99), 32: (36.65, 873.21),
             64: (69.33, 923.13), 240: (249.09, 963.53)}


@pytest.mark.parametrize("batch", sorted(TABLE_MHA))
def test_llama13b_latency_throughput_table(batch):
    """inference.llama13b.table_mha: 8x v5e, bf16. The book's cells are (26e9 + B * 6.7e9) / (8 * 8.2e11);
    from the derived bytes that formula reproduces every cell at its 0.5%. The engine's own step (the
    layer program, sharded over the 8 chips) reads only B rows of the embedding table and also counts the
    activations each matmul reads: within 1% of the book. The engine's layer also has the norms, rotary
    embedding, SiLU and gate and residual adds (their HBM traffic on the replicated [B, D] activations,
    0.1-0.6 % of the step, which the book does not count): the step less that work is what is compared."""
    s = Serving(LLAMA13, V5E_82, chips=8, dtype="bf16")
    step_ms, tok_s = TABLE_MHA[batch]
    book_formula = (s.param_bytes + batch * 8192 * s.kv_bytes_per_token) / (8 * 8.2e11)
    assert book_formula * 1e3 == pytest.approx(step_ms, rel=0.005)
    assert batch / book_formula == pytest.approx(tok_s, rel=0.005)
    engine = s.decode(batch, 8192)
    elementwise = decode_elementwise_seconds(s, batch, 8192)
    assert 0 < elementwise < 0.01 * engine.step_time
    assert (engine.step_time - elementwise) * 1e3 == pytest.approx(step_ms, rel=0.01)


def test_llama13b_gqa_table():
    """inference.llama13b.table_gqa: with 8 KV heads (5x less KV) the same formula's cells."""
    gqa = dataclasses.replace(LLAMA13, K=8)
    s = Serving(gqa, V5E_82, chips=8, dtype="bf16")
    for batch, step_ms in {1: 4.17, 8: 5.6, 16: 7.23, 32: 10.5, 64: 17.04, 240: 52.99}.items():
        formula = (26e9 + batch * 8192 * s.kv_bytes_per_token) / (8 * 8.2e11)
        assert formula * 1e3 == pytest.approx(step_ms, rel=0.005)


def test_llama13b_max_batch_is_15_not_16():
    """inference.llama13b.max_batch_mha: the book says it OOMs 'beyond 16', but its own table has 133 GB
    at batch 16 against 128 GB: the largest batch that fits is 15."""
    s = Serving(LLAMA13, V5E_82, chips=8, dtype="bf16")
    assert s.max_batch(8192) == 15
    assert s.decode(16, 8192).fits is False


def test_v5e8_totals_and_gen_tp_limit():
    """inference.v5e8_totals / gen_tp_limit: 8 v5e hold 128 GB and stream 6.5e12 B/s; in memory-bound
    generation model parallelism stays ICI-cheap while Y < F / (B beta), beta = W_hbm / W_ici = 9:
    derived from the Megatron MLP on the engine (F = 16384, B = 32: 57; the book rounds beta to 8: 64)."""
    assert 8 * V5E.hbm_bytes == 128e9
    assert 8 * V5E_82.hbm_bandwidth == pytest.approx(6.5e12, rel=0.02)
    plan = derive_program(open("derivations/tp.sc").read(), mesh="Y:wrap", dims="B=32,D=8192,F=16384",
                          hw=V5E_82)
    t_hbm_weights = 2 * 2 * dim("D") * dim("F") / (axis("Y") * sp.Symbol("W_hbm", positive=True))
    (y,) = sp.solve(sp.Eq(t_hbm_weights, bandwidth_comms(plan)), axis("Y"))
    value = plan.evaluate(y)
    assert value == pytest.approx(16384 / (32 * 8.2e11 / 9e10), rel=0.01)
    assert 16384 / (32 * 8) == 64 and 28672 / (64 * 8) == 56   # applied-inference.gen_tp_limit_bs64


def test_q1_model():
    """inference.q1.*: L D (3F + 2H(N + K)) + D V = 18.4e9 parameters (shared embeddings); the KV cache
    (the book leaves it unanswered) is 2 L K H = 262,144 bytes a token in int8."""
    cfg = load_model_config("part7-example")
    assert param_counts(cfg)["total"] == pytest.approx(18.4e9, rel=0.01)
    assert kv_bytes_per_token(cfg, "int8") == 262_144


def test_q5_moe_counts():
    """inference.q5.moe_params / moe_kv_per_token / moe_forward_flops (unanswered in the book): E=16, k=2."""
    moe = dataclasses.replace(load_model_config("part7-example"), name="moe", E=16, k=2, F_expert=16384)
    pc = param_counts(moe)
    assert pc["total"] == pytest.approx(211.66e9, rel=0.01)
    assert pc["active"] == pytest.approx(31.27e9, rel=0.01)
    assert kv_bytes_per_token(moe, "int8") == 262_144


def test_q7_2d_weight_stationary():
    """inference.q7.*: 2D weight-stationary comms 2BD/(X W) + 4BF/(YZ W) (derived from the layout); the
    optimum X = sqrt(N D / (2F)) = sqrt(N / 8) for F = 4D, T = sqrt(128) BD / (sqrt(N) W) ~ 11.3 BD /
    (sqrt(N) W); against 1D sharding's 4BD/(3W) it wins past N = 128 (3/4)^2 = 72 chips -- the book
    prints 81."""
    # Y and Z together as one axis M spanning their two links, so that X * M = N can be optimised
    text = open("derivations/weight_stationary_2d.sc").read().replace("_YZ", "_M")
    plan = derive_program(text, mesh="X,M:2", overlap=False)   # the book adds the two collectives' times
    B, D, F, X, M, N = dim("B"), dim("D"), dim("F"), axis("X"), axis("M"), axis("N")
    t2d = bandwidth_comms(plan)
    assert set(t2d.args) == {2 * B * D / (X * W_ici), 4 * B * F / (M * W_ici)}
    r = optimize_plan(plan, ("X", "M"), "N")
    x_opt = r["optimum"]["X"].subs(F, 4 * D)
    assert sp.simplify(x_opt - sp.sqrt(N / 8)) == 0
    t_opt = sp.simplify(r["t_comms"].subs(F, 4 * D))
    assert sp.simplify(t_opt - sp.sqrt(128) * B * D / (sp.sqrt(N) * W_ici)) == 0
    (n_cross,) = sp.solve(sp.Eq(t_opt, 4 * B * D / (3 * W_ici)), N)
    assert n_cross == 72


def test_appendix_latency_figures():
    """inference.appA / appC: one 2 x 8192 x 32768 layer in bf16 over 4 chips loads in 327 us (the book's
    '600M parameters' gives 365 us); an 8-way collective is latency-bound below 8 * 45 kB = 360 kB;
    16 x 8192 int8 activations are 131 kB; latency-bound once Y > BD / 45,000."""
    assert 2 * 8192 * 32768 * 2 / 4 / 8.2e11 == pytest.approx(327e-6, rel=0.01)
    assert 600e6 * 2 / 4 / 8.2e11 == pytest.approx(365e-6, rel=0.02)
    plan = symcost.derive("AllGather_Y(A[B, D_Y]) -> A[B, D]", mesh="Y=8:wrap", hw="tpu-v5e")
    step = plan.collectives[0]
    bw, lat = sorted(step.seconds.args, key=lambda a: a.has(dim("D")))[::-1]
    (d,) = sp.solve(sp.Eq(bw, lat), dim("D"))
    assert plan.evaluate(step.bytes.subs(dim("D"), d)) / 8 * 2 == pytest.approx(90_000)   # per shard, 2 hops a us
    assert 16 * 8192 == pytest.approx(131e3, rel=0.01)


# --------------------------------------------------------------------------- Part 8: 70B on v5e


def test_kv_and_memory_at_batch_32():
    """applied-inference.kv_per_token / kv_per_seq_32k / kv_bs240 / chips_bs240 / bs32_*: int8 KV is
    163,840 bytes a token (the book: '160kB', used as 162e3 and 160e3); 5.3 GB a 32k sequence; 1.3 TB for
    240 of them, 86 v5e with the weights; batch 32 at 8k needs 112 GB (7 chips, a 4x2 slice)."""
    kv = kv_bytes_per_token(LLAMA70, "int8")
    assert kv == 163_840
    assert kv * 32768 == pytest.approx(5.3e9, rel=0.02)
    assert 240 * kv * 32768 == pytest.approx(1.3e12, rel=0.03)
    s = Serving(LLAMA70, V5E, chips=8, dtype="int8")
    mem = 8 * s.decode(32, 8192).memory_bytes                 # a chip's, eight times
    assert mem == pytest.approx(112e9, rel=0.015)
    assert int(-(-mem // V5E.hbm_bytes)) == 8       # 7.1 chips of HBM: the book's 7, a 4x2 slice
    assert (70e9 + 1.3e12) / V5E.hbm_bytes == pytest.approx(86, rel=0.01)


def test_decode_step_on_4x2_and_4x4():
    """applied-inference.bs32_step_4x2 / bs32_throughput / bs32_step_4x4 / pareto_min_latency: 112 GB /
    (8 * 8.1e11) = 17 ms, 1882 tokens/s (235 a chip); 8.6 ms on 4x4; 5.5 ms for the weights alone on 16
    chips. The engine's step on the sharded layer program adds the activations' traffic and uses the exact
    70.55e9 parameters and 163,840-byte KV (the book rounds to 70e9 and 160e3): 17.8 ms. Its layer also has
    the norms, rotary embedding, SiLU and gate and residual adds, which the book does not count (0.6 ms
    here): each comparison with the book is of the step less that work (:func:`conftest.decode_elementwise_seconds`)."""
    assert 112e9 / (8 * 8.1e11) == pytest.approx(0.017, rel=0.02)
    assert 32 / 0.017 == pytest.approx(1882, rel=0.01)
    s8 = Serving(LLAMA70, V5E, chips=8, dtype="int8")
    r = s8.decode(32, 8192)
    matmuls = r.step_time - decode_elementwise_seconds(s8, 32, 8192)
    assert matmuls == pytest.approx(0.01781, rel=1e-3)
    assert matmuls == pytest.approx(0.017, rel=0.05)
    assert 32 / matmuls / 8 == pytest.approx(235, rel=0.05)
    s16 = Serving(LLAMA70, V5E, chips=16, dtype="int8")
    kv = 32 * 8192 * s16.kv_bytes_per_token
    assert (s16.param_bytes + kv) / (16 * 8.1e11) == pytest.approx(0.0085, rel=0.04)
    # The book's 8.6 ms streams every weight split 16 ways. The derived layout splits the heads over Y=8
    # and the KV cache's batch over Z=2, so the attention weights sit on both halves of Z: the slice holds
    # them twice, 12.1e9 bytes more than the book counts (disagreement kept; the layout is the cause).
    held = 16 * s16.decode(32, 8192).memory_bytes - kv
    assert held - s16.param_bytes == pytest.approx(param_counts(LLAMA70)["attention"], rel=1e-6)
    # A device reads what it holds: each chip streams its attention block, which both halves of Z hold, so
    # the step is longer than the book's by the attention weights read on 8 chips instead of 16 (10.0 ms in
    # all); without that term the engine is the book's 8.6 ms within the activations each matmul also reads.
    step = s16.decode(32, 8192)
    twice = param_counts(LLAMA70)["attention"] * (1 / 8 - 1 / 16) / V5E.hbm_bandwidth
    embedding = LLAMA70.D * LLAMA70.V / 16             # int8; looked up a row a token, not streamed
    assert step.weight_bytes_read == pytest.approx(s16.weight_bytes_per_device - embedding, rel=1e-9)
    # Each layer's two AllReduces also wait on the matmul before them and the next matmul waits on them,
    # so their latency floors (T_min a hop) add to the step instead of hiding under it: 9.86 ms without the
    # attention term, against the book's 8.5 (disagreement kept: the book overlaps them; the dependency
    # graph is the cause).
    less = step.step_time - twice - decode_elementwise_seconds(s16, 32, 8192)
    assert less == pytest.approx(0.009855, rel=1e-3)
    assert less == pytest.approx(0.0085, rel=0.2)
    one = Serving(LLAMA70, V5E_82, chips=16, dtype="int8")
    weights_only = one.decode(1, 1).step_time - decode_elementwise_seconds(one, 1, 1)
    twice_82 = param_counts(LLAMA70)["attention"] * (1 / 8 - 1 / 16) / V5E_82.hbm_bandwidth
    # at batch 1 every AllReduce is latency-bound: 160 latency floors on the dependency path add 0.8 ms to
    # the 5.5 ms the weights take (kept: the book leaves collective latency out of its minimum-latency point)
    assert weights_only - twice_82 == pytest.approx(0.006314, rel=1e-3)
    assert weights_only - twice_82 == pytest.approx(0.0055, rel=0.2)


def test_ici_bound_on_model_parallelism():
    """applied-inference.bs32_ici_bound: Y < M_Y F / alpha with 2 axes: 2 * 28672 / 2550 = 22.5 with the
    v5p intensity the book uses; v5e's own 1.97e14 / 9e10 = 2189 gives 26.2 (same conclusion)."""
    for hw, expected in (("tpu-v5p", 22.5), ("tpu-v5e", 26.2)):
        plan = derive_program(open("derivations/tp.sc").read(), mesh="Y:2", dims="F=28672", hw=hw)
        (y,) = sp.solve(sp.Eq(plan.t_math, bandwidth_comms(plan)), axis("Y"))
        assert plan.evaluate(y) == pytest.approx(expected, rel=0.03)


def test_matmul_times_on_4x8():
    """applied-inference.matmul_times_4x8: one 8192 x 28672 bf16 matmul, batch 64, over 32 v5e:
    T_ici 11.65 us, T_hbm 18.1 us, T_math 4.77 us (printed 4 us) -- HBM-bound."""
    plan = symcost.derive("Out[B, F]{U_Y} = In[B, D_Y] *_D W[D_Y, F]", mesh="Y=32:wrap", moves="none",
                          dims="B=64,D=8192,F=28672", hw=dataclasses.replace(V5E, hbm_bandwidth=8.1e11))
    t_math = plan.evaluate(plan.t_math)
    weights = 2 * 8192 * 28672 / 32 / 8.1e11
    ici = symcost.derive("AllGather_Y(A[B, D_Y]) -> A[B, D]", mesh="Y=32:wrap", dims="B=64,D=8192", hw="tpu-v5e")
    step = ici.collectives[0]
    t_ici = ici.evaluate(next(a for a in step.seconds.args if not a.has(symcost.symbols.T_min)))
    # the latency floor is larger here: 16 hops of a 32-ring, 16 us; the book counts the bandwidth term
    assert ici.evaluate(step.seconds) == pytest.approx(16e-6)
    assert t_math == pytest.approx(4.77e-6, rel=0.01)
    assert weights == pytest.approx(18.1e-6, rel=0.01)
    assert t_ici == pytest.approx(11.65e-6, rel=0.01)


def test_min_topology_table():
    """applied-inference.min_topology.*: bf16 needs 16 chips with 116 GB free for 43 caches of 8k. The
    book's int8 row (68 GB free, 52 caches) and int4 row (45 GB of weights, 19 GB free, 67 caches) slip:
    8 * 16 - 70 = 58 GB and 4 * 16 - 35 = 29 GB -- every dtype holds the same ~43 caches."""
    rows = {d: min_topology(LLAMA70, V5E, d, 8192) for d in ("bf16", "int8", "int4")}
    assert rows["bf16"]["slice_chips"] == 16 and rows["bf16"]["free_bytes"] == pytest.approx(116e9, rel=0.02)
    assert rows["int8"]["slice_chips"] == 8 and rows["int8"]["free_bytes"] == pytest.approx(58e9, rel=0.02)
    assert rows["int4"]["slice_chips"] == 4 and rows["int4"]["param_bytes"] == pytest.approx(35e9, rel=0.02)
    for r in rows.values():
        assert r["kv_caches"] == pytest.approx(43, rel=0.03)


def test_serving_rates():
    """applied-inference.full_hbm_step / decode_512 / int4_param_only_step / qps_*: a full 16 GB chip
    streams in 19.5 ms; 512 steps take 10 s; int4 weights alone on 4 chips 10.7 ms; QPS a chip
    B / (step * 512 * N). The book's QPS cells use its slipped batches (43/52/67); with 43 for every dtype:
    0.276, 0.553, 1.105. Doubling the topology frees 372 GB (not 186) for 140 caches of 8k."""
    assert 16e9 / 8.2e11 == pytest.approx(0.019, rel=0.03)
    assert 512 * 0.019 == pytest.approx(9, rel=0.1)
    assert 35e9 / 4 / 8.2e11 == pytest.approx(0.0107, rel=0.01)
    for chips, expected in ((16, 0.276), (8, 0.553), (4, 1.105)):
        assert 43 / (0.019 * 512 * chips) == pytest.approx(expected, rel=0.01)
    big = min_topology(LLAMA70, V5E, "bf16", 8192)
    free = 2 * big["slice_chips"] * V5E.hbm_bytes - big["param_bytes"]
    assert free == pytest.approx(372e9, rel=0.01)
    # 327,680 bytes a token in bf16 (the book uses 324e3): 138 caches
    assert free / (8192 * kv_bytes_per_token(LLAMA70, "bf16")) == pytest.approx(140, rel=0.015)


def test_prefill_and_disaggregation():
    """applied-inference.prefill_time / prefill_generate_ratio / kv_eviction: 8192 tokens on 16 v5e at
    40% MFU take 0.91 s counting 2 x params FLOPs a token (the book leaves out the attention FLOPs, which
    add 15% over the whole prompt, 7.5% with the causal mask the book's note says halves them); with 19 ms steps, batch 32 and 512 generated tokens that needs 3 prefill servers per
    generate server; a step frees B (P + G) / G = 96 KV tokens."""
    s = Serving(LLAMA70, V5E, chips=16, dtype="int8")
    no_att = s.prefill(8192, 0.4, attention=False).seconds
    assert no_att == pytest.approx(0.91, rel=0.01)
    assert s.prefill(8192, 0.4, causal=False).seconds == pytest.approx(no_att * 1.15, rel=0.01)
    assert s.prefill(8192, 0.4).seconds == pytest.approx(no_att * 1.075, rel=0.01)
    assert prefill_generate_ratio(0.91, 0.019, 32, 512) == pytest.approx(3, rel=0.01)
    assert kv_evicted_per_step(32, 8192, 4096) == 96


def test_flops_per_dollar():
    """applied-inference.flops_per_dollar: FLOPs/s per $/hour at the book's prices."""
    for name, price, expected in (("h100", 10.8, 91e12), ("tpu-v5p", 4.2, 109e12), ("tpu-v5e", 1.2, 164e12)):
        assert symcost.hardware(name).C / price == pytest.approx(expected, rel=0.01)


def test_speculative_decoding():
    """Part 7, speculative sampling: checking k drafted tokens costs about one memory-bound step, so with a
    cheap drafter and a good acceptance rate tokens/s rise; with nothing accepted they fall."""
    from symcost.models.estimates import speculative_decode
    target = Serving(LLAMA70, V5E, chips=8, dtype="int8")
    drafter = Serving(load_model_config("llama3-8b"), V5E, chips=8, dtype="int8")
    plain = target.decode(4, 8192).step_time
    good = speculative_decode(target, drafter, 4, 8192, draft=4, acceptance=0.8)
    assert good["check_step"] < 1.1 * plain
    assert good["tokens_per_round"] == pytest.approx((1 - 0.8 ** 5) / 0.2)
    assert good["speedup"] > 1.5
    assert speculative_decode(target, drafter, 4, 8192, draft=4, acceptance=0.0)["speedup"] < 1
