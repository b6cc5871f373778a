"""Choosing how to serve (``model --decode --search``, ``model --prefill --search``): meshes over the heads
and the KV cache's batch, batches that fit, a latency target, ranked by tokens a second per chip."""
import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest

from symcost.cli import main
from symcost.hardware import hardware
from symcost.hardware.efficiency import Efficiency
from symcost.models.config import load_model_config
from symcost.models.inference import Serving
from symcost.models.serving_search import meshes, search_serving
from symcost.models.transformer import param_counts

ROOT = Path(__file__).resolve().parent.parent
V5E = hardware("tpu-v5e")


def test_meshes_split_the_key_value_heads():
    assert [m for m, _ in meshes(load_model_config("llama3-70b"), 16)] == ["Z=16", "Y=2,Z=8", "Y=4,Z=4", "Y=8,Z=2"]
    # latent attention: every head has its own keys, so the heads (128) may split further
    assert "Y=64" in [m for m, _ in meshes(load_model_config("deepseek-v3"), 64)]


def test_the_best_meets_the_target_and_beats_the_default_layout():
    cfg = load_model_config("llama3-70b")
    res = search_serving(cfg, V5E, 16, 8192, latency=0.04, dtype="int8", top=50)
    runs = res["runs"]
    assert runs and all(r["step_time"] <= 0.04 and r["memory_bytes"] <= 16 * V5E.hbm_bytes for r in runs)
    rates = [r["tokens_per_s_per_chip"] for r in runs]
    assert rates == sorted(rates, reverse=True)
    default = Serving(cfg, V5E, chips=16, dtype="int8")       # heads over Y=8, batch over Z=2
    best_default = max(f["tokens_per_s_per_chip"] for f in default.frontier(8192)
                       if f["fits"] and f["step_time"] <= 0.04)
    assert rates[0] >= best_default * (1 - 1e-9)


def test_a_tight_target_trades_throughput_for_latency():
    cfg = load_model_config("llama3-8b")
    loose = search_serving(cfg, hardware("h100"), 8, 4096)
    tight = search_serving(cfg, hardware("h100"), 8, 4096, latency=0.004)
    assert tight["runs"][0]["step_time"] <= 0.004 < loose["runs"][0]["step_time"]
    assert tight["runs"][0]["tokens_per_s_per_chip"] < loose["runs"][0]["tokens_per_s_per_chip"]
    assert tight["runs"][0]["batch"] < loose["runs"][0]["batch"]


@pytest.mark.slow
def test_latent_attention_prefers_to_split_the_cache():
    res = search_serving(load_model_config("deepseek-v3"), hardware("h100"), 64, 4096, latency=0.05, top=1)
    assert res["runs"][0]["kv_copies"] < 64          # splitting all heads would copy the latent 64 times


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
    (["--batch", "8"], "drop --batch and --mesh"),
])
def test_errors(capsys, extra, says):
    code = main(["model", "llama3-8b", "--decode", "--search", "--hw", "h100", "--chips", "8"] + extra)
    assert code == 2 and says in capsys.readouterr().err


def test_nothing_qualifies_exits_one(capsys):
    code = main(["model", "llama3-70b", "--decode", "--search", "--hw", "h100", "--chips", "1", "--seq", "8192"])
    assert code == 1 and "NONE QUALIFIES" in capsys.readouterr().out


def test_a_prefill_step_is_the_derived_layer_program_with_the_last_tokens_logits():
    """LLaMA 3-8B, one 4096-token prompt on 8 H100s at the datasheet's peaks (no efficiency data): every
    weight once a token (embeddings excepted), attention over the whole prompt (QK^T and AV, not halved for
    causality), and the logits of the last token only -- split evenly over the 8 chips."""
    cfg, hw = load_model_config("llama3-8b"), dataclasses.replace(hardware("h100"), efficiency=Efficiency())
    r = Serving(cfg, hw, chips=8, mesh="Y=8,Z=1").prefill_step(1, 4096)
    p, T = param_counts(cfg), 4096
    flops = 2 * (p["total"] - p["embedding"]) * T + cfg.L * 2 * (2 * T * T * cfg.N * cfg.H) + 2 * cfg.D * cfg.V
    assert r["t_math"] == pytest.approx(flops / (8 * hw.C), rel=1e-9)
    assert r["tokens_per_s"] == pytest.approx(4096 / r["step_time"])
    decode = Serving(cfg, hw, chips=8, mesh="Y=8,Z=1").decode(1, 4096)
    assert r["memory_bytes"] == decode["memory_bytes"]          # the prompt's KV cache, the same weights


def test_the_prefill_search_meets_the_time_to_first_token():
    cfg = load_model_config("llama3-70b")
    res = search_serving(cfg, V5E, 16, 2048, latency=0.5, top=50, phase="prefill")
    runs = res["runs"]
    assert res["phase"] == "prefill" and runs
    assert all(r["step_time"] <= 0.5 and r["memory_bytes"] <= 16 * V5E.hbm_bytes for r in runs)
    rates = [r["tokens_per_s_per_chip"] for r in runs]
    assert rates == sorted(rates, reverse=True)
    for r in runs:                                    # prompt tokens a second, per chip
        assert r["tokens_per_s_per_chip"] == pytest.approx(r["batch"] * 2048 / r["step_time"] / 16)
    # every qualifying pair is there: a tighter target keeps a subset, and the best of it is no better
    tight = search_serving(cfg, V5E, 16, 2048, latency=0.25, top=50, phase="prefill")
    assert {(r["mesh"], r["batch"]) for r in tight["runs"]} <= {(r["mesh"], r["batch"]) for r in runs}
    assert tight["runs"][0]["tokens_per_s_per_chip"] <= rates[0]


def test_prefill_search_command_line_and_json(capsys):
    args = ["model", "llama3-70b", "--prefill", "--search", "--hw", "tpu-v5e", "--chips", "16", "--seq", "2048",
            "--latency", "1s", "--top", "2"]
    out, data = _text_and_json(capsys, args)
    assert "serving search on 16 x tpu-v5e, prefill of 2048-token prompts, a first token in at most 1 s" in out
    assert "    1. mesh " in out and "first token" in out
    assert data["prefill"]["phase"] == "prefill" and len(data["search"]["top"]) == 2
    assert data["search"]["top"][0]["step_time"] == data["prefill"]["runs"][0]["step_time"] <= 1.0


@pytest.mark.parametrize("extra, says", [
    (["--decode"], "one phase: --decode or --prefill"),
    (["--mfu", "0.5"], "drop --mfu"),
    (["--batch", "2"], "--prefill --search chooses the mesh and the batch itself"),
])
def test_prefill_search_errors(capsys, extra, says):
    code = main(["model", "llama3-8b", "--prefill", "--search", "--hw", "h100", "--chips", "8"] + extra)
    assert code == 2 and says in capsys.readouterr().err
