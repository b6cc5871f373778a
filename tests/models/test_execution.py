"""Training as it is launched: pipeline schedules, the activation memory of each recomputation policy
derived from the layer's operations, model and hardware FLOPs, and the measured iterations of Korthikanti
et al. 2022 (arXiv 2205.05198), Table 5."""
import json

import pytest

from symcost.cli import main
from symcost.errors import UsageError
from symcost.hardware import hardware
from symcost.models.config import load_model_config
from symcost.models.execution import Run
from symcost.models.schedule import Schedule

A100 = hardware("a100")


# ---------------------------------------------------------------- pipeline schedules
def test_schedules_bubble_and_activations_in_flight():
    gpipe = Schedule("gpipe", stages=4, microbatches=16)
    one = Schedule("1f1b", stages=4, microbatches=16)
    inter = Schedule("interleaved", stages=4, microbatches=16, interleave=2)
    assert gpipe.bubble_fraction == one.bubble_fraction == 3 / 16
    assert inter.bubble_fraction == 3 / 32                      # (p - 1) / (v m)
    assert (gpipe.in_flight, one.in_flight) == (16, 4)          # GPipe keeps every microbatch, 1F1B p
    assert inter.in_flight == pytest.approx(4 * (1 + 3 / 8))    # p (1 + (p - 1) / (p v))
    assert (one.sends_per_microbatch, inter.sends_per_microbatch) == (2, 4)


@pytest.mark.parametrize("kwargs", [dict(name="zigzag", stages=2, microbatches=2),
                                    dict(name="1f1b", stages=2, microbatches=2, interleave=2),
                                    dict(name="interleaved", stages=4, microbatches=6, interleave=2),
                                    dict(name="1f1b", stages=0, microbatches=2)])
def test_bad_schedules_are_usage_errors(kwargs):
    with pytest.raises(UsageError):
        Schedule(**kwargs)


# ---------------------------------------------------------------- FLOPs and memory of a run
def _gpt3(**kw):
    base = dict(tp=8, pp=8, dp=1, sequences=64, microbatch=1, seq=2048, interleave=3)
    return Run(load_model_config("gpt3-175b"), A100, **{**base, **kw})


def test_model_and_hardware_flops_follow_megatron_formulas():
    run = _gpt3(recompute="full")
    B, S, L, H, V = 64, 2048, 96, 12288, 51200
    fl = run.flops()
    # Narayanan et al. 2021, eq. (3): 72 B s L h^2 (1 + s / 6h + V / 12hL) without recomputation, 96 ... with
    assert fl["model"] == pytest.approx(72 * B * S * L * H ** 2 * (1 + S / (6 * H) + V / (12 * H * L)))
    assert fl["hardware"] == pytest.approx(96 * B * S * L * H ** 2 * (1 + S / (6 * H) + V / (16 * H * L)))
    assert fl["6N"] == pytest.approx(6 * 174.58e9 * B * S, rel=1e-3)


def test_memory_of_a_run_is_the_derived_formula_times_layers_in_flight():
    run = _gpt3(recompute="selective", seq_parallel=True)
    per_layer = 34 * 2048 * 1 * 12288 / 8          # Korthikanti's 34 sbh / t, read off the plan
    in_flight = 8 * (1 + 7 / 24)
    assert run.memory()["activations"] == pytest.approx(per_layer * 96 / 8 * in_flight)
    none = _gpt3(recompute="none").memory()["activations"]
    assert none > run.memory()["activations"] * 2     # the attention core's 5as^2b dominates at s = 2048


def test_recomputation_costs_time_and_sequence_parallelism_splits_elementwise_work():
    full, sel, no = (_gpt3(recompute=r).iteration() for r in ("full", "selective", "none"))
    assert full["recompute"] > 10 * sel["recompute"] > 0 == no["recompute"]
    plain, split = _gpt3(recompute="none").layer(), _gpt3(recompute="none", seq_parallel=True).layer()
    assert split["elementwise"] < plain["elementwise"]


def test_tp_overlap_takes_tp_collectives_off_the_critical_path():
    assert _gpt3(tp_overlap=True).iteration()["tp_comms"] == 0 < _gpt3().iteration()["tp_comms"]


# ---------------------------------------------------------------- Korthikanti et al. 2022, Table 5
# (model, GPUs, PP, sequences, microbatch, interleave, measured full recompute, measured seq-par + selective)
TABLE5 = [("megatron-22b", 8, 1, 4, 4, 1, 1.42, 1.10), ("gpt3-175b", 64, 8, 64, 1, 3, 18.13, 13.75),
          ("mt-nlg-530b", 280, 35, 280, 1, 3, 49.05, 37.83), ("megatron-1t", 512, 64, 512, 1, 1, 94.42, 71.49)]

# The same a100 preset and defaults serve every row, each layer the engine's plan. The preset's efficiency
# figures: the best matmul shape's 85.9 % (a shape whose tiles fill whole waves), each matmul's tile and wave
# quantization on 108 SMs in 256x128 tiles (NVIDIA's Matrix Multiplication Background guide), nccl-tests'
# NVLink bus bandwidth (0.68), 88 % of HBM. Every row comes out 3-9 % fast, the selective rows most: kernel
# launches, the data loader, the embedding and synchronisation are not modelled, and nothing is tuned to the
# table. Mean error 6.0 % (target 5 %), max 8.8 %.
ROWS = [(m, g, pp, n, mb, v, rec, sp_, meas) for (m, g, pp, n, mb, v, full, sel) in TABLE5
        for rec, sp_, meas in (("full", False, full), ("selective", True, sel))]
ERRORS = {("megatron-22b", "full"): -0.032, ("megatron-22b", "selective"): -0.046,
          ("gpt3-175b", "full"): -0.067, ("gpt3-175b", "selective"): -0.087,
          ("mt-nlg-530b", "full"): -0.052, ("mt-nlg-530b", "selective"): -0.088,
          ("megatron-1t", "full"): -0.051, ("megatron-1t", "selective"): -0.057}


def _predict(model, gpus, pp, seqs, mb, v, rec, sp_):
    run = Run(load_model_config(model), A100, tp=8, pp=pp, dp=1, sequences=seqs, microbatch=mb, seq=2048,
              interleave=v, recompute=rec, seq_parallel=sp_)
    assert run.chips == gpus
    return run.iteration()["iteration"]


def _row_id(r):
    return f"{r[0]}-{r[6]}"


@pytest.mark.parametrize("row", ROWS, ids=_row_id)
def test_table5_iteration_error_is_as_recorded(row):
    *args, measured = row
    err = (_predict(*args) - measured) / measured
    assert err == pytest.approx(ERRORS[row[0], row[6]], abs=0.005)


@pytest.mark.parametrize("row", [pytest.param(r, marks=pytest.mark.xfail(
    abs(ERRORS[r[0], r[6]]) > 0.10, reason=f"predicted {ERRORS[r[0], r[6]]:+.1%} from the measurement", strict=True))
    for r in ROWS], ids=[_row_id(r) for r in ROWS])
def test_table5_iteration_within_ten_percent(row):
    *args, measured = row
    assert _predict(*args) == pytest.approx(measured, rel=0.10)


@pytest.mark.xfail(reason="mean error 6.0 % (target 5 %): see ERRORS", strict=True)
def test_table5_mean_error_within_five_percent():
    errs = [abs(_predict(*r[:-1]) - r[-1]) / r[-1] for r in ROWS]
    assert sum(errs) / len(errs) <= 0.05


def test_selective_recompute_with_sequence_parallelism_is_faster_on_every_row():
    for r in TABLE5:
        full = _predict(*r[:6], "full", False)
        sel = _predict(*r[:6], "selective", True)
        assert sel / full == pytest.approx(r[7] / r[6], rel=0.06)   # measured ratios 0.76-0.78


# ---------------------------------------------------------------- command line
def test_model_train_prints_the_iteration_mfu_and_memory(capsys):
    code = main(["model", "gpt3-175b", "--train", "--hw", "a100", "--chips", "64", "--tp", "8", "--pp", "8",
                 "--dp", "1", "--sequences", "64", "--seq", "2048", "--microbatch", "1", "--interleave", "3",
                 "--recompute", "selective", "--seq-parallel"])
    out = capsys.readouterr().out
    assert code == 0
    assert "iteration 12.6 s" in out and "interleaved schedule" in out
    assert "MFU 56.3%" in out and "HFU 56.8%" in out and "6N alone" in out and "DOES NOT FIT" not in out
    assert "10.3 microbatches in flight" in out


def test_model_train_json(capsys):
    code = main(["model", "megatron-1t", "--train", "--hw", "a100", "--chips", "512", "--tp", "8", "--pp", "64",
                 "--sequences", "512", "--seq", "2048", "--recompute", "none", "--json"])
    data = json.loads(capsys.readouterr().out)
    train = data["train"]
    assert code == 1 and data["fits"] is False and train["fits"] is False   # no recomputation: too big
    assert train["config"]["pp_link"] == "dcn" and train["schedule"]["schedule"] == "1f1b"
    assert train["step_time"] == pytest.approx(sum(train["breakdown"].values()))
    assert train["model_flops_per_token"]["with_attention"] > train["model_flops_per_token"]["params_only"]
    assert train["hfu"] == pytest.approx(train["mfu"])          # nothing recomputed


@pytest.mark.parametrize("argv", [
    ["--chips", "16", "--tp", "8", "--pp", "1", "--dp", "1", "--sequences", "8"],       # chips != tp x pp x dp
    ["--tp", "8", "--pp", "8", "--interleave", "13", "--sequences", "64"],                # 96 layers in 104 chunks
    ["--tp", "7", "--sequences", "8"],                                                    # 96 heads over 7
    ["--tp", "8", "--sequences", "6", "--microbatch", "4"],                               # not whole microbatches
    ["--tp", "8", "--pp", "8", "--sequences", "60", "--interleave", "3"],                 # interleaved needs m % p
    ["--tp", "8"],                                                                        # neither --sequences nor --batch
])
def test_bad_runs_are_usage_errors(capsys, argv):
    assert main(["model", "gpt3-175b", "--train", "--hw", "a100", "--seq", "2048", *argv]) == 2
    assert "Traceback" not in capsys.readouterr().err


# ---------------------------------------------------------------- JAX policies, ZeRO, other layers
def test_zero_stages_split_optimizer_gradients_and_weights_over_replicas():
    cfg = load_model_config("llama3-8b")
    mem = [Run(cfg, A100, tp=1, dp=8, sequences=8, seq=4096, zero=z, recompute="full").memory() for z in range(4)]
    p = 8.03e9
    assert mem[0]["optimizer"] == pytest.approx(12 * p, rel=0.01) and mem[1]["optimizer"] == pytest.approx(12 * p / 8, rel=0.01)
    assert mem[1]["gradients"] == mem[0]["gradients"] and mem[2]["gradients"] == pytest.approx(mem[0]["gradients"] / 8)
    assert mem[2]["weights"] == mem[0]["weights"] and mem[3]["weights"] == pytest.approx(mem[0]["weights"] / 8)
    with pytest.raises(UsageError):
        Run(cfg, A100, dp=8, sequences=8, zero=4)


def test_optimizer_step_is_megatrons_passes_over_hbm_on_each_replicas_shard():
    # zero the fp32 gradients (4 B), unscale and check them (8), their norm (4), FusedAdam (16 read, 12
    # written), master -> bf16 (6): 50 B a parameter, each at the preset's achieved HBM bandwidth (a100: 0.88 x
    # 2.039 TB/s)
    cfg = load_model_config("megatron-22b")
    bw = A100.hbm_bandwidth * A100.efficiency.hbm
    step = [Run(cfg, A100, tp=8, dp=8, sequences=8, microbatch=1, zero=z, recompute="full").iteration()["optimizer"]
            for z in (0, 1, 2)]
    p = Run(cfg, A100, tp=8).params_per_device()
    assert step[0] == pytest.approx(50 * p / bw, rel=1e-9)
    assert step[1] == pytest.approx((46 * p / 8 + 4 * p) / bw, rel=1e-9)   # ZeRO-1: Adam on a shard
    assert step[2] == pytest.approx(50 * p / 8 / bw, rel=1e-9)             # ZeRO-2: the gradients too


def test_gated_grouped_layers_count_their_own_matmuls():
    cfg = load_model_config("llama3-70b")
    run = Run(cfg, A100, tp=8, sequences=1, seq=8192, recompute="none")
    from symcost.models.transformer import param_counts
    per_token = run.flops()["model"] / 8192
    attention = 3 * 2 * 2 * 8192 * cfg.N * cfg.H * cfg.L              # scores and context, forward x 3
    logits = 6 * cfg.D * cfg.V
    dense = 6 * (param_counts(cfg)["total"] - 2 * cfg.V * cfg.D)      # untied: both embeddings out of 6N
    assert per_token == pytest.approx(dense + attention + logits, rel=1e-6)


def test_cli_takes_jax_policy_names_and_fsdp(capsys):
    code = main(["model", "llama3-8b", "--train", "--hw", "a100", "--chips", "16", "--tp", "2", "--dp", "8",
                 "--sequences", "16", "--seq", "4096", "--recompute", "dots_with_no_batch_dims_saveable", "--fsdp",
                 "--json"])
    train = json.loads(capsys.readouterr().out)["train"]
    assert code == 0 and train["config"]["zero"] == 3 and train["hfu"] > train["mfu"]
    assert main(["model", "llama3-8b", "--train", "--hw", "a100", "--tp", "2", "--sequences", "4",
                 "--recompute", "some_policy"]) == 2
    assert main(["model", "llama3-8b", "--train", "--hw", "a100", "--tp", "2", "--sequences", "4", "--fsdp",
                 "--zero", "1"]) == 2


# ---------------------------------------------------------------- prefill: an HBM floor, MFU from the preset
def test_prefill_is_no_faster_than_streaming_the_weights_and_takes_its_mfu_from_the_preset():
    from symcost.models.inference import Serving
    cfg = load_model_config("llama3-70b")
    a100 = Serving(cfg, A100, chips=8)
    short = a100.prefill(seq=1)
    assert short.seconds == short.hbm_floor == pytest.approx(a100.param_bytes / (8 * 2.039e12 * 0.88))
    long = a100.prefill(seq=8192)
    assert long.mfu == pytest.approx(0.859) and "efficiency" in long.mfu_source
    assert long.seconds == pytest.approx(long.flops / (8 * 312e12 * 0.859))
    assert Serving(cfg, hardware("h100"), chips=8).prefill(seq=8192).mfu == pytest.approx(0.801)  # Bekman's
    assert Serving(cfg, hardware("h200"), chips=8).prefill(seq=8192).mfu == 0.4   # no efficiency data


def test_each_matmul_of_the_layer_pays_its_tiles_waves():
    """GPT-3 175B, TP 8, one sequence of 2048: the query projection is [2048, 12288] x [12288, 1536] on a GPU
    (8 x 12 tiles of 256 x 128: one wave of 108 SMs, 96/108 useful), priced by the one pricing path."""
    from symcost.models.layer_cost import LayerCost
    from symcost.pricing import op_cost
    lay = LayerCost(load_model_config("gpt3-175b"), A100, tp=8, microbatch=1, seq=2048)
    plan = lay.plan()
    q = next(s for s in plan.steps if s.phase == "forward" and s.tensor == "Q" and s.is_einsum)
    flops, peak = 2 * 2048 * 12288 * 1536, 312e12 * 0.859
    cost = op_cost(q.op, lay.env(plan))
    assert cost.flops == flops
    assert cost.seconds == pytest.approx(flops / (peak * A100.efficiency.wave_fraction(2048, 1536)), rel=0.02)


def test_book_part6_checkpoints_per_layer():
    """Book Part 6: 4 checkpoints a layer at 4M tokens is 2 x 4M x 8192 x 4 x 80 bytes for LLaMA-3 70B."""
    cfg = load_model_config("llama3-70b")
    run = Run(cfg, A100, sequences=512, microbatch=512, seq=8192, checkpoints=4)   # 4M tokens at once
    assert run.memory()["activations"] == pytest.approx(2 * 4 * 2 ** 20 * 8192 * 4 * 80)
    assert run.iteration()["recompute"] == pytest.approx(Run(cfg, A100, sequences=512, microbatch=512, seq=8192,
                                                             recompute="full").iteration()["recompute"])
    with pytest.raises(UsageError):
        Run(cfg, A100, sequences=8, seq=8192, checkpoints=4, recompute="selective")


# ---------------------------------------------------------------- MoE decode: the batch each expert sees
@pytest.mark.parametrize("hw, dtype", [("h100", "bf16"), ("tpu-v5e", "bf16"), ("tpu-v5e", "int8")])
def test_moe_decode_critical_batch_comes_from_the_expert_einsum(hw, dtype):
    from symcost.models.estimates import critical_batch, moe_critical_batch
    from symcost.models.moe import decode_critical_batch
    cfg = load_model_config("deepseek-v3")
    got = decode_critical_batch(cfg, hardware(hw), dtype)
    assert got == pytest.approx(moe_critical_batch(cfg, hardware(hw), dtype), rel=0.01)   # B_crit E / k
    assert got == pytest.approx(critical_batch(hardware(hw), dtype) * 256 / 8, rel=0.01)


def test_model_decode_prints_the_moe_critical_batch(capsys):
    main(["model", "deepseek-v3", "--decode", "--hw", "h100", "--chips", "64", "--batch", "64", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["critical_batch"] == pytest.approx(295.2 * 256 / 8, rel=0.01)   # not 295: B k / E per expert


def test_a_run_that_does_not_fit_says_what_would_shrink_its_largest_part(capsys):
    # LLaMA 3 405B on 8,192 H100s as the issue writes it: 16 microbatches of 8,192 tokens in flight on the
    # first stage, every activation kept, the attention scores through HBM
    base = ["model", "llama3-405b", "--train", "--hw", "h100", "--seq", "8192"]
    assert main(base + ["--chips", "8192", "--tp", "8", "--pp", "16", "--dp", "64", "--batch", "16777216"]) == 1
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out and ("the largest part is the activations: --recompute selective, --recompute "
                                      "full, --seq-parallel, --attention flash, --cp N (each sequence split over its "
                                      "ranks; a microbatch is one sequence already), more --tp would shrink it") in out
    # activations cut down, 8-way data parallelism without ZeRO: the fp32 optimizer state is what is left
    assert main(base + ["--chips", "64", "--tp", "8", "--dp", "8", "--sequences", "8", "--recompute", "full",
                        "--seq-parallel", "--attention", "flash"]) == 1
    assert "the largest part is the optimizer: --zero 1, more --tp or --pp would shrink it" in capsys.readouterr().out


def _advice(capsys, model: str, hw: str, *argv) -> str:
    assert main(["train", model, "--hw", hw, *argv]) == 1
    return next(line.strip() for line in capsys.readouterr().out.splitlines() if "the largest part is" in line)


def test_what_is_said_to_shrink_the_activations_does_and_what_is_not_does_not(capsys):
    """LLaMA 3 405B, TP 8, 16 stages: the first stage holds its layers for the microbatches in flight, as
    many as there are stages where there are that many (1F1B), else all of them. So 32 stages hold as much
    as 16 when 16 microbatches or more run, and half when 8 do; a microbatch of two sequences halved holds
    half where the stages cap the microbatches in flight, and the same where they do not; context
    parallelism halves it; more TP shrinks it. Each is said where, and only where, it holds."""
    cfg = load_model_config("llama3-405b")
    h100 = hardware("h100")

    def acts(**kw):
        run = Run(cfg, h100, **{"tp": 8, "pp": 16, "sequences": 16, "seq": 8192, **kw})
        return run.memory()["activations"]
    base = acts()
    assert acts(pp=32, sequences=32) == pytest.approx(base)                 # more stages: as many in flight
    assert acts(cp=2) == pytest.approx(base / 2, rel=0.01)
    assert acts(tp=16) < base and acts(tp=16, seq_parallel=True) < acts(seq_parallel=True)
    assert acts(sequences=8) == pytest.approx(base / 2)                      # 8 in flight of 16 stages ...
    assert acts(sequences=8, pp=32) == pytest.approx(base / 4)               # ... where more stages shrink it
    assert acts(microbatch=2) == pytest.approx(acts(microbatch=1))           # 8 of 2 or 16 of 1 in flight
    assert acts(sequences=64, microbatch=1) == pytest.approx(acts(sequences=64, microbatch=2) / 2)

    run = ["--seq", "8192", "--chips", "128", "--tp", "8", "--pp", "16"]
    said = _advice(capsys, "llama3-405b", "h100", *run, "--sequences", "16")
    assert "--cp N" in said and "more --tp" in said and "--pp" not in said and "--microbatch" not in said
    said = _advice(capsys, "llama3-405b", "h100", *run, "--sequences", "8")
    assert "more --pp stages (fewer layers a stage) or fewer --sequences a replica" in said
    said = _advice(capsys, "llama3-405b", "h100", *run, "--sequences", "16", "--microbatch", "2")
    assert "--microbatch" not in said
    said = _advice(capsys, "llama3-405b", "h100", *run, "--sequences", "64", "--microbatch", "2")
    assert "a smaller --microbatch (more microbatches of fewer sequences)" in said


def test_the_books_checkpoints_shrink_with_context_parallelism_and_tp_only_with_sequence_parallelism(capsys):
    """Book Part 6's k [B, D] checkpoints a layer are whole on every TP rank: more TP alone leaves them,
    sequence parallelism or context parallelism splits them (LLaMA 3-70B, 8 sequences of 4,096 on 70 v5p
    chips: 6.44 GB at TP 2 and at TP 4, 3.22 GB with sequence parallelism or CP 2)."""
    cfg = load_model_config("llama3-70b")
    v5p = hardware("tpu-v5p")

    def acts(**kw):
        return Run(cfg, v5p, **{"tp": 2, "pp": 35, "sequences": 8, "seq": 4096, "checkpoints": 4, **kw}
                   ).memory()["activations"]
    assert acts(tp=4) == pytest.approx(acts()) and acts(seq_parallel=True) == pytest.approx(acts() / 2)
    assert acts(cp=2) == pytest.approx(acts() / 2) and acts(tp=4, seq_parallel=True) == pytest.approx(acts() / 4)
    said = _advice(capsys, "llama3-70b", "tpu-v5p", "--chips", "8", "--tp", "8", "--sequences", "64", "--seq",
                   "8192", "--memory", "book", "--checkpoints-per-layer", "12")      # 129 GB of activations
    assert said.startswith("the largest part is the activations: fewer --checkpoints-per-layer, --seq-parallel, "
                           "--cp N") and "more --tp with --seq-parallel" in said


def test_uneven_interleaved_chunks_run_at_the_pace_of_the_fullest():
    """LLaMA 3 405B as Meta ran it (Dubey et al. 2024, section 3.3.2): 126 layers on 16 stages, the first and
    the last stage one layer short, interleaved. With 2 chunks a stage each chunk holds at most
    ceil(126 / 32) = 4 layers, so the fullest stage holds 8, as without interleaving; with 3 chunks at most
    ceil(126 / 48) = 3, 9 a stage. The pipeline's parts are that many layers per microbatch."""
    cfg, h100 = load_model_config("llama3-405b"), hardware("h100")
    base = dict(tp=8, pp=16, dp=1, sequences=16, microbatch=1, seq=8192, recompute="full", seq_parallel=True,
                attention="flash")
    runs = {v: Run(cfg, h100, interleave=v, **base) for v in (1, 2, 3)}
    assert {v: r.layers_per_stage for v, r in runs.items()} == {1: 8, 2: 8, 3: 9}
    for r in runs.values():
        it, lay = r.iteration(), r.layer()
        assert it["forward"] == pytest.approx(16 * r.layers_per_stage * lay["forward"], rel=1e-12)
    # the same layers a stage, and the bubble shrinks by the chunks: interleaving 2 is faster than none
    assert runs[2].iteration()["bubble"] == pytest.approx(runs[1].iteration()["bubble"] / 2, rel=1e-9)
    with pytest.raises(UsageError, match="every chunk needs a layer"):
        Run(cfg, h100, interleave=8, **{**base, "pp": 16})
