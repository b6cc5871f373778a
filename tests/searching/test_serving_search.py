"""Choosing how to serve (``model --decode --search``, ``model --prefill --search``): meshes over the heads
and the KV cache's batch, batches that fit, a latency target, ranked by tokens a second per chip."""
import dataclasses
import json

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from symcost.cli import main
from symcost.hardware import hardware
from symcost.hardware.efficiency import Efficiency
from symcost.models.config import load_model_config
from symcost.models.inference import Serving, split_mesh, touched_experts
from symcost.models.serving_search import meshes, price, search_serving
from symcost.models.transformer import Sharding, param_counts

from conftest import ROOT, examples

V5E = hardware("tpu-v5e")


def test_meshes_split_the_key_value_heads():
    assert [m for m, _ in meshes(load_model_config("llama3-70b"), 16)] == ["Y=1,Z=16", "Y=2,Z=8", "Y=4,Z=4",
                                                                           "Y=8,Z=2"]
    # latent attention: every head has its own keys, so the heads (128) may split further
    assert "Y=64" in [m for m, _ in meshes(load_model_config("deepseek-v3"), 64)]


def test_the_best_meets_the_target_and_beats_the_default_layout():
    cfg = load_model_config("llama3-70b")
    res = search_serving(cfg, V5E, 16, 8192, latency=0.04, dtype="int8", top=50)
    runs = [r.step for r in res.rows]
    assert runs and all(r.step_time <= 0.04 and r.memory_bytes <= V5E.hbm_bytes for r in runs)   # a chip's
    rates = [r.tokens_per_s_per_chip for r in runs]
    assert rates == sorted(rates, reverse=True)
    default = Serving(cfg, V5E, chips=16, dtype="int8")       # heads over Y=8, batch over Z=2
    best_default = max(f.tokens_per_s_per_chip for f in default.frontier(8192)
                       if f.fits and f.step_time <= 0.04)
    assert rates[0] >= best_default * (1 - 1e-9)


def test_a_tight_target_trades_throughput_for_latency():
    cfg = load_model_config("llama3-8b")
    loose = search_serving(cfg, hardware("h100"), 8, 4096, top=1)          # the best of each, read alone
    tight = search_serving(cfg, hardware("h100"), 8, 4096, latency=0.004, top=1)
    assert tight.rows[0].step.step_time <= 0.004 < loose.rows[0].step.step_time
    assert tight.rows[0].step.tokens_per_s_per_chip < loose.rows[0].step.tokens_per_s_per_chip
    assert tight.rows[0].batch < loose.rows[0].batch


@pytest.mark.slow
@pytest.mark.slow          # DeepSeek-V3's 24 layouts on 64 chips, its best rows derived again: about 9 s
def test_latent_attention_prefers_to_split_the_cache():
    res = search_serving(load_model_config("deepseek-v3"), hardware("h100"), 64, 4096, latency=0.05, top=1)
    assert res.rows[0].step.kv_copies < 64          # splitting all heads would copy the latent 64 times


def _text_and_json(capsys, args):
    """The command's text, then its ``--json`` checked against the schema."""
    assert main(args) == 0
    out = capsys.readouterr().out
    assert main(args + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    jsonschema.validate(data, json.loads((ROOT / "symcost" / "schemas" / "model.json").read_text()))
    return out, data


def test_command_line_and_json(capsys):
    args = ["model", "llama3-70b", "--decode", "--search", "--hw", "tpu-v5e", "--chips", "16", "--seq", "8192",
            "--dtype", "int8", "--latency", "40ms", "--top", "2"]
    out, data = _text_and_json(capsys, args)
    assert "serving search on 16 x tpu-v5e, decode, context 8192, steps of at most 40 ms" in out
    assert "    1. mesh " in out and "tokens/s per chip, hbm-bound" in out
    assert len(data["decode"]["runs"]) == 2 and data["decode"]["latency"] == pytest.approx(0.04)
    top = data["search"]["top"]                          # DESIGN's contract
    assert data["search"]["candidates"] == data["decode"]["searched"] and len(top) == 2
    for run, full in zip(top, data["decode"]["runs"]):
        assert (run["mesh"], run["batch"], run["step_time"]) == (full["mesh"], full["batch"], full["step_time"])
        assert run["mfu"] == pytest.approx(full["t_math"] / full["step_time"])
        assert run["dominant"] == full["bound"] and run["compute_bound"] == (full["bound"] == "math")


@pytest.mark.parametrize("extra, says", [
    (["--latency", "fast"], "write a duration such as 40ms"),
    (["--latency", "0"], "--latency must be positive"),
    (["--batch", "8"], "drop --batch, --mesh, --experts and --context"),
])
def test_errors(capsys, extra, says):
    code = main(["model", "llama3-8b", "--decode", "--search", "--hw", "h100", "--chips", "8"] + extra)
    assert code == 2 and says in capsys.readouterr().err


def test_nothing_qualifies_exits_one(capsys):
    code = main(["model", "llama3-70b", "--decode", "--search", "--hw", "h100", "--chips", "1", "--seq", "8192"])
    assert code == 1 and "NONE QUALIFIES" in capsys.readouterr().out


def test_a_prefill_step_is_the_derived_layer_program_with_the_last_tokens_logits():
    """LLaMA 3-8B, one 4096-token prompt on 8 H100s at the datasheet's peaks (no efficiency data): every
    weight once a token (embeddings excepted), attention over the prompt (QK^T and AV: each token attends to
    the ones before it, half of them all, as a causal flash-attention kernel skips the masked blocks; or, with
    ``causal=False``, to every one), and the logits of the last token only -- split evenly over the 8 chips;
    and the elementwise work on the vector units (the preset has no vector figure: at the matmul rate):
    RMSNorm 4 FLOPs an element and the residual add 1, twice each on the replicated [T, D] activations,
    rotary 3 on each device's queries and keys, SiLU 4 and the gate's product 1 on its F / 8."""
    cfg, hw = load_model_config("llama3-8b"), dataclasses.replace(hardware("h100"), efficiency=Efficiency())
    server = Serving(cfg, hw, chips=8, mesh="Y=8,Z=1")
    r, full = server.prefill_step(1, 4096), server.prefill_step(1, 4096, causal=False)
    p, T = param_counts(cfg), 4096
    attention = cfg.L * 2 * (2 * T * T * cfg.N * cfg.H)
    flops = 2 * (p["total"] - p["embedding"]) * T + 2 * cfg.D * cfg.V
    vector = cfg.L * ((4 + 1) * 2 * T * cfg.D + 3 * T * (cfg.N + cfg.K) * cfg.H / 8 + (4 + 1) * T * cfg.F / 8)
    assert r.t_math == pytest.approx((flops + attention / 2) / (8 * hw.C) + vector / hw.C, rel=1e-9)
    assert full.t_math == pytest.approx((flops + attention) / (8 * hw.C) + vector / hw.C, rel=1e-9)
    assert full.t_hbm == r.t_hbm            # the keys and values are read whole either way
    assert r.tokens_per_s == pytest.approx(4096 / r.step_time)
    decode = Serving(cfg, hw, chips=8, mesh="Y=8,Z=1").decode(1, 4096)
    assert r.memory_bytes == decode.memory_bytes          # the prompt's KV cache, the same weights


def test_the_prefill_search_meets_the_time_to_first_token():
    cfg = load_model_config("llama3-70b")
    res = search_serving(cfg, V5E, 16, 2048, latency=0.5, top=50, phase="prefill")
    runs = [r.as_dict() for r in res.rows]
    assert res.get("phase") == "prefill" and runs
    assert all(r["step_time"] <= 0.5 and r["memory_bytes"] <= V5E.hbm_bytes for r in runs)
    rates = [r["tokens_per_s_per_chip"] for r in runs]
    assert rates == sorted(rates, reverse=True)
    for r in runs:                                    # prompt tokens a second, per chip
        assert r["tokens_per_s_per_chip"] == pytest.approx(r["batch"] * 2048 / r["step_time"] / 16)
    # every qualifying pair is there: a tighter target keeps a subset, and the best of it is no better
    tight = search_serving(cfg, V5E, 16, 2048, latency=0.3, top=50, phase="prefill")
    assert {(r.mesh, r.batch) for r in tight.rows} <= {(r["mesh"], r["batch"]) for r in runs}
    assert tight.rows[0].step.tokens_per_s_per_chip <= rates[0]


def test_prefill_search_command_line_and_json(capsys):
    args = ["model", "llama3-70b", "--prefill", "--search", "--hw", "tpu-v5e", "--chips", "16", "--seq", "2048",
            "--latency", "1s", "--top", "2"]
    out, data = _text_and_json(capsys, args)
    assert ("serving search on 16 x tpu-v5e, prefill of 2048-token prompts (causal attention), a first token in at "
            "most 1 s") in out
    assert "    1. mesh " in out and "first token" in out
    assert data["prefill"]["phase"] == "prefill" and data["prefill"]["mask"] == "causal" and len(data["search"]["top"]) == 2
    assert data["search"]["top"][0]["step_time"] == data["prefill"]["runs"][0]["step_time"] <= 1.0


@pytest.mark.parametrize("extra, says", [
    (["--decode"], "one phase: --decode or --prefill"),
    (["--mfu", "0.5"], "drop --mfu"),
    (["--batch", "2"], "--prefill --search chooses the mesh and the batch itself"),
])
def test_prefill_search_errors(capsys, extra, says):
    code = main(["model", "llama3-8b", "--prefill", "--search", "--hw", "h100", "--chips", "8"] + extra)
    assert code == 2 and says in capsys.readouterr().err


# --------------------------------------------------------------------------- a device reads what it holds
H100 = hardware("h100")
MODELS = ("llama3-8b", "llama3-70b", "llama2-13b", "mixtral-8x7b")


@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(MODELS), split=st.sampled_from([(1, 8), (2, 4), (4, 2), (8, 1), (1, 4), (2, 2), (1, 2)]),
       batch=st.sampled_from([1, 8, 64]), written=st.booleans())
def test_a_step_streams_at_least_the_weights_a_chip_holds(name, split, batch, written):
    """Step time and memory are two readings of one set of layouts: whatever the mesh (both roles, one of
    them 1, written by the user or not), a chip reads every weight block it holds (the embedding table,
    looked up a row a token, aside; routed experts only where a token reaches them), so the step is no
    shorter than those bytes at the chip's HBM bandwidth."""
    cfg = load_model_config(name)
    y, z = split
    chips = y * z
    if cfg.K % y:
        return
    if written:        # as --mesh writes it: the first axis splits the heads, the second the cache's batch
        s = Serving(cfg, H100, chips=chips, mesh=f"Y={y},Z={z}")
    else:              # as the search lays it out (an axis of one chip left out)
        mesh, sharding = split_mesh(y, z)
        s = Serving(cfg, H100, chips=chips, mesh=mesh, sharding=sharding)
    step = s.decode(batch, 1024)
    assert step.step_time >= step.weight_bytes_read / H100.hbm_bandwidth * (1 - 1e-9)
    assert dict(step.mesh) == {"Y": y, "Z": z}
    embedding = cfg.D * cfg.V * 2 / chips      # split with the vocabulary over every axis
    held = s.weight_bytes_per_device - embedding
    if cfg.is_moe:     # each chip holds 1/chips of every routed expert (their F split over every model axis)
        reached = min(cfg.E, touched_experts(cfg.E, cfg.k, s.padded(batch)))   # and reads its slice of those
        expert = 3 * cfg.D * cfg.F_expert * 2
        held -= (cfg.L - cfg.dense_layers) * (cfg.E - reached) * expert / chips
    assert step.weight_bytes_read == pytest.approx(held, rel=1e-9)


def test_replicated_attention_weights_are_read_whole():
    """LLaMA 3-70B on 8 H100s with the heads over Y=1 and the KV cache's batch over Z=8: every chip holds
    all 24.2 GB of attention weights and reads them each step (the MLP is split 8 ways): about 11.9 ms at
    the datasheet's figures, twice the step where the heads are split (Y=8)."""
    cfg = load_model_config("llama3-70b")
    attention = param_counts(cfg)["attention"] * 2
    assert attention == pytest.approx(24.2e9, rel=0.01)
    peak = dataclasses.replace(H100, efficiency=Efficiency())     # the datasheet's figures: bytes alone
    one = Serving(cfg, peak, chips=8, mesh="Y=1,Z=8").decode(8, 4096)
    split = Serving(cfg, peak, chips=8, mesh="Y=8").decode(8, 4096)
    assert one.weight_bytes_read >= attention
    assert one.step_time >= attention / H100.hbm_bandwidth
    assert one.step_time == pytest.approx(11.9e-3, rel=0.02)
    assert split.step_time < one.step_time / 2 + 1e-4
    assert one.memory_bytes - split.memory_bytes == pytest.approx(attention * 7 / 8, rel=0.05)


def test_mixtral_at_batch_one_reads_the_two_experts_it_touches():
    """Each token reaches k = 2 of E = 8 experts; a batch of B tokens reaches E (1 - (1 - k/E)^B) of them.
    On one chip a batch of one reads two experts a layer, not eight, and the router's weights Wr[D, E]
    (4096 x 8 bf16, 64 KiB a layer) that score all eight. On 8 H100s each chip holds an eighth of every
    expert (each expert's F split over Y = 8, as a tensor-parallel MLP) and the whole router (too small to
    split), so a batch of one reads an eighth of the two experts it reaches on every chip:
    (attention + 32 x 2 experts + unembedding) / 8 + 32 routers = 3.19 GB a chip, 1.10 ms at the preset's
    achieved 2.90 TB/s (0.866 of 3.35), where experts split whole over the chips
    (``Sharding(experts=("Y",))``) make a chip holding a reached expert read all of it: 11.6 GB, 4.0 ms. The
    step adds the KV cache (4096 x 131,072 bytes over the 8 KV heads' chips), the per-kernel floors
    (twelve einsums a layer: Q, K, V, the two of attention, O, the router's, the permutation, the experts'
    three, the weighted sum of a token's two results; seven elementwise kernels: the norm, the two rotary
    embeddings, the residual add with the norm after it, the router's softmax and top-k, SiLU with the
    gate, the residual add; the views that deal the tokens to their experts and back launch none) and two
    AllReduces a layer, each latency-bound at batch one. The experts wait for the router, which waits for
    the attention's AllReduce: the layer is one chain, 4.67 ms."""
    cfg = load_model_config("mixtral-8x7b")
    p = param_counts(cfg)
    router = cfg.D * cfg.E * 2                                      # bytes of one layer's router
    expert = ((p["mlp"] / cfg.L - router / 2) / cfg.E) * 2          # bytes of one expert of one layer
    assert expert == 3 * 4096 * 14336 * 2
    head = cfg.D * cfg.V * 2                                        # the unembedding, streamed once
    one = Serving(cfg, hardware("h200"), chips=1).decode(1, 4096)
    assert one.experts_read == pytest.approx(2)
    assert one.weight_bytes_read == pytest.approx(p["attention"] * 2 + cfg.L * (2 * expert + router) + head,
                                                  rel=1e-9)
    eight = Serving(cfg, H100, chips=8).decode(1, 4096)
    read = (p["attention"] * 2 + cfg.L * 2 * expert + head) / 8 + cfg.L * router
    assert read == pytest.approx(3.19e9, rel=1e-3)
    assert eight.weight_bytes_read == pytest.approx(read, rel=1e-9)
    achieved = H100.hbm_bandwidth * H100.efficiency.hbm
    kv = 4096 * 131072 / 8
    assert eight.t_hbm == pytest.approx((read + kv) / achieved, rel=0.01)
    assert eight.t_hbm == pytest.approx(1.12e-3, rel=0.01)
    floors = cfg.L * (12 + 7) * H100.efficiency.t_kernel    # each einsum and elementwise kernel its floor
    assert eight.t_hbm <= eight.step_time <= eight.t_hbm + floors + eight.t_comms
    assert eight.step_time == pytest.approx(4.67e-3, rel=0.01)
    whole = Serving(cfg, H100, chips=8, mesh="Y=8", sharding=Sharding(model=("Y",), heads=("Y",), experts=("Y",)))
    split = whole.decode(1, 4096)
    assert split.weight_bytes_read == pytest.approx((p["attention"] * 2 + cfg.L * expert * 8 + head) / 8
                                                    + cfg.L * router, rel=1e-9)
    assert split.t_hbm > 3.4 * eight.t_hbm and split.step_time > eight.step_time + 1.8e-3
    assert touched_experts(8, 2, 1) == 2 and touched_experts(8, 2, 2) == pytest.approx(8 * (1 - 0.75 ** 2))
    assert Serving(cfg, hardware("h200"), chips=1).decode(64, 4096).experts_read == pytest.approx(8, rel=1e-6)


def test_shared_experts_are_read_as_they_are_held():
    """DeepSeek-V3 on 64 H100s (Y=8 over the heads, Z=8 over the cache's batch), batch 64: 64 tokens reach
    256 (1 - (1 - 8/256)^64) = 222.4 of the 256 routed experts, and a chip holds 1/64 of every expert,
    the shared one included: it reads its slice of the reached ones and of the shared one, never more
    than it holds."""
    ds = load_model_config("deepseek-v3")
    s = Serving(ds, H100, chips=64, mesh="Y=8,Z=8", dtype="fp8")
    step = s.decode(64, 4096)
    reached = 256 * (1 - (1 - 8 / 256) ** 64)
    assert step.experts_read == pytest.approx(reached + 1)
    unread = (ds.L - ds.dense_layers) * (256 - reached) * 3 * ds.D * ds.F_expert / 64    # fp8: a byte a weight
    embedding = ds.D * ds.V / 64
    assert step.weight_bytes_read == pytest.approx(s.weight_bytes_per_device - embedding - unread, rel=1e-9)


def test_a_mesh_whose_size_is_not_the_chips_is_an_error(capsys):
    code = main(["model", "llama3-70b", "--decode", "--hw", "h100", "--chips", "8", "--seq", "4096", "--batch", "8",
                 "--mesh", "Y=8,Z=2"])
    err = capsys.readouterr().err
    assert code == 2 and "--mesh Y=8,Z=2 has 16 devices but --chips is 8" in err


@pytest.mark.slow     # its best 50 rows: 150 derived again at their own batch
def test_the_search_ranks_by_what_a_chip_holds_and_reads():
    """Y=2,Z=4 holds the attention weights four times over and reads them so: Y=8 serves more tokens a
    chip, and nothing listed holds more than a chip's HBM."""
    res = search_serving(load_model_config("llama3-70b"), H100, 8, 4096, top=50)
    assert res.rows[0].mesh == "Y=8"
    assert all(r.step.memory_bytes <= H100.hbm_bytes for r in res.rows)
    best = {m: max(r.step.tokens_per_s_per_chip for r in res.rows if r.mesh == m) for m in ("Y=8", "Y=2,Z=4")}
    assert best["Y=8"] > best["Y=2,Z=4"]


def test_serving_json_and_text_name_the_mesh(capsys):
    args = ["model", "llama3-70b", "--decode", "--hw", "h100", "--chips", "8", "--seq", "4096", "--batch", "8"]
    assert main(args + ["--mesh", "Y=1,Z=8"]) == 0
    assert "decode on 8 x h100 (mesh Y=1, Z=8), batch 8" in capsys.readouterr().out
    assert main(args + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["decode"]["mesh"] == {"Y": 8, "Z": 1}
    assert data["decode"]["memory_bytes"] <= H100.hbm_bytes          # a chip's
    jsonschema.validate(data, json.loads((ROOT / "symcost" / "schemas" / "model.json").read_text()))


def test_decode_frontier_needs_no_batch(capsys):
    assert main(["model", "llama3-8b", "--decode", "--frontier", "--hw", "h100", "--chips", "8", "--seq", "4096",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "decode" not in data and data["frontier"][0]["batch"] == 1
    assert main(["model", "llama3-8b", "--decode", "--hw", "h100", "--chips", "8"]) == 2
    assert "--decode needs --batch (sequences), or --frontier" in capsys.readouterr().err


def test_serve_is_model_with_a_serving_mode(capsys):
    args = ["llama3-8b", "--decode", "--hw", "h100", "--chips", "8", "--seq", "4096", "--batch", "8"]
    assert main(["serve"] + args) == 0
    served = capsys.readouterr().out
    assert main(["model"] + args) == 0
    assert capsys.readouterr().out == served
    assert main(["serve", "llama3-8b", "--hw", "h100"]) == 2
    assert "serve what: --decode" in capsys.readouterr().err


def test_a_sweep_prices_batches_the_caches_batch_axes_divide():
    """On 7 devices that split the KV cache's batch, 1, 2 and 4 sequences are all priced as 7: the sweep
    (the frontier and the serving search alike) takes each power of two padded, once, and the largest batch
    that fits, itself a multiple of 7."""
    cfg = load_model_config("llama3-8b")
    mesh, sharding = split_mesh(1, 7)
    s = Serving(cfg, hardware("h100"), chips=7, mesh=mesh, sharding=sharding)
    top = s.max_batch(8192)
    assert top % 7 == 0 and s.memory_per_device(top, 8192) <= s.hw.hbm_bytes < s.memory_per_device(top + 1, 8192)
    assert s.batches(top) == [7, 14, 21, 35, 70, 133, 259, top]
    assert [p.batch for p in s.frontier(8192)] == s.batches(top)


def test_a_row_of_the_search_is_what_serve_derives_for_its_mesh_and_batch(capsys):
    """Each row shown is derived at its own batch, as ``serve --mesh M [--experts A] --batch B`` derives it:
    the sweep prices a layout's batches with the plan made at 64, which at thousands of sequences can be far
    from the plan made there (DeepSeek-V3's Y=1,Z=8 at 2,608 sequences: 139 ms swept, 103 ms derived). An MoE
    model's layouts include its experts split whole over Y, Z or both."""
    cfg = load_model_config("mixtral-8x7b")
    layouts = {(m, sh.experts) for m, sh in meshes(cfg, 8)}
    assert {("Y=8", ()), ("Y=8", ("Y",)), ("Y=2,Z=4", ("Z",)), ("Y=2,Z=4", ("Y", "Z"))} <= layouts
    assert all(not sh.experts for _, sh in meshes(load_model_config("llama3-8b"), 8))
    res = search_serving(cfg, H100, chips=8, seq=4096, top=3, max_batch=64)
    assert any(r.step.experts_over for r in res.rows)
    for r in res.rows:
        argv = ["serve", "mixtral-8x7b", "--decode", "--hw", "h100", "--chips", "8", "--seq", "4096", "--mesh", r.mesh,
                "--batch", str(r.batch), "--json"] + (["--experts", ",".join(r.step.experts_over)]
                                                      if r.step.experts_over else [])
        assert main(argv) == 0
        got = json.loads(capsys.readouterr().out)["decode"]
        assert got["step_time"] == pytest.approx(r.step.step_time, rel=1e-12)
        assert got["experts_over"] == list(r.step.experts_over)


def test_a_frontier_row_is_what_serve_derives_at_its_batch(capsys):
    """``--frontier`` derives each batch's step at that batch, as ``--decode --batch B`` does (it priced every
    batch with the plan made at 64: LLaMA 3-70B on Y=4,Z=2 at 352 sequences said 39.9 ms, --batch 39.8 ms)."""
    base = ["serve", "llama3-70b", "--hw", "h100", "--chips", "8", "--seq", "4096", "--mesh", "Y=4,Z=2", "--json"]
    assert main(base + ["--frontier"]) == 0
    rows = json.loads(capsys.readouterr().out)["frontier"]
    for row in rows[-2:]:
        assert main(base + ["--decode", "--batch", str(row["batch"])]) == 0
        alone = json.loads(capsys.readouterr().out)["decode"]
        assert row["step_time"] == pytest.approx(alone["step_time"], rel=1e-12)
    assert rows[-1]["batch"] == 352 and rows[-1]["step_time"] == pytest.approx(39.8e-3, rel=2e-3)


@pytest.mark.slow          # LLaMA 3-70B's serving search, its best rows derived again: about 3 s
def test_the_rows_the_sweep_priced_with_another_plan_are_derived_at_their_batch(capsys):
    """LLaMA 3-70B on 8 H100s: the sweep prices Y=4,Z=2 at 352 sequences with the plan made at 64 (39.9 ms);
    the row shown is the plan made at 352, what ``serve --mesh Y=4,Z=2 --batch 352`` says (39.8 ms)."""
    cfg = load_model_config("llama3-70b")
    res = search_serving(cfg, H100, chips=8, seq=4096, top=3)
    swept = {(r.mesh, r.batch): r.step.step_time
             for r in price(Serving(cfg, H100, chips=8, mesh="Y=4,Z=2", sharding=split_mesh(4, 2)[1]), "Y=4,Z=2",
                            [352], 4096, "decode")}
    row = next(r for r in res.rows if (r.mesh, r.batch) == ("Y=4,Z=2", 352))
    assert swept["Y=4,Z=2", 352] > row.step.step_time * (1 + 1e-3)       # the sweep's plan is not the row's
    for r in res.rows:
        assert main(["serve", "llama3-70b", "--decode", "--hw", "h100", "--chips", "8", "--seq", "4096", "--mesh",
                     r.mesh, "--batch", str(r.batch), "--json"]) == 0
        got = json.loads(capsys.readouterr().out)["decode"]
        assert got["step_time"] == pytest.approx(r.step.step_time, rel=1e-12)


# --------------------------------------------------------------------------- worker processes
def _without_time(res) -> dict:
    return {k: v for k, v in res.as_dict().items() if k != "search_seconds"}


def test_meshes_priced_in_worker_processes_are_the_meshes_priced_here():
    """``jobs=2``: each mesh swept, and each layout's best rows derived again, in a worker process (a mesh to
    a worker); the answer is the one this process finds, to the bit."""
    cfg = load_model_config("llama3-8b")
    here, there = (search_serving(cfg, H100, 8, 512, max_batch=16, top=2, jobs=jobs) for jobs in (1, 2))
    assert here.rows and [r.step for r in there.rows] == [r.step for r in here.rows]
    assert [(r.mesh, r.batch) for r in there.rows] == [(r.mesh, r.batch) for r in here.rows]
    assert _without_time(there) == _without_time(here)


@pytest.mark.slow          # Mixtral's decode and prefill searches twice each: about 8 s
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_layouts_that_share_a_mesh_are_told_apart_in_the_workers(phase):
    """An MoE model's meshes come with their experts split over Y, Z or both (and a prefill's with its
    tokens over Z): layouts written with the same mesh, each derived by its own sharding in the workers."""
    cfg = load_model_config("mixtral-8x7b")
    space = meshes(cfg, 8, phase)
    assert len({m for m, _ in space}) < len(space)          # several layouts on one mesh
    here, there = (search_serving(cfg, H100, 8, 1024, max_batch=64, top=2, phase=phase, jobs=jobs) for jobs in (1, 2))
    assert [r.step for r in there.rows] == [r.step for r in here.rows]
    assert _without_time(there) == _without_time(here)


@pytest.mark.parametrize("extra, says", [
    (["--search", "--jobs", "0"], "--jobs must be at least 1 (or 'auto'), not 0"),
    (["--search", "--jobs", "many"], "--jobs must be a number of processes or 'auto', not 'many'"),
    (["--batch", "8", "--jobs", "2"], "--jobs is read by --search (--train, --decode or --prefill)"),
])
def test_serve_jobs_errors(capsys, extra, says):
    code = main(["serve", "llama3-8b", "--decode", "--hw", "h100", "--chips", "8"] + extra)
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err


def test_a_servers_layer_plan_is_the_plan_derive_keeps_runner_ups_for():
    """A server plans its layer without keeping runner-up plans (nothing it prices reads them): the same
    steps and step time as the derivation that keeps them."""
    from symcost.models.transformer import layer_program, sizes
    from symcost.program import derive_program
    cfg = load_model_config("llama3-8b")
    server = Serving(cfg, H100, chips=8, mesh="Y=4,Z=2")
    plan = server._plan("layer", 16, 1, 4096)
    kept = derive_program(layer_program(cfg, server.sharding, dtype=server.dtype, kv_dtype=server.kv_dtype),
                          mesh=server.mesh, dims=sizes(cfg, batch=16, seq=1, context=4096), hw=H100, moves="all",
                          efficiency=True, choose_achieved=True)
    assert plan.alternatives == () and kept.alternatives
    assert [(s.phase, s.op) for s in plan.steps] == [(s.phase, s.op) for s in kept.steps]
    assert plan.numbers().t_step == kept.numbers().t_step > 0
