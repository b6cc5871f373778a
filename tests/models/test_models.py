"""Model configurations, HuggingFace import, the layer program, and `symcost model`."""
import json

import pytest

import symcost
from symcost.cli import main
from symcost.errors import UsageError
from symcost.models.config import from_hf_config, load_model_config, model_presets
from symcost.models.inference import Serving
from symcost.models.transformer import layer_program, param_counts

LLAMA_HF = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
            "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
            "vocab_size": 128256, "tie_word_embeddings": False}


def _closed_form_params(cfg) -> int:
    """Parameters by the textbook count (book Part 4), independent of the layer program: Q and O are
    D x N H, K and V are D x K H, the MLP 3 (gated) or 2 matrices of D x F, embeddings V x D (twice untied)."""
    attn = 2 * cfg.D * cfg.N * cfg.H + 2 * cfg.D * cfg.K * cfg.H
    mlp = (3 if cfg.gated else 2) * cfg.D * cfg.F
    return cfg.L * (attn + mlp) + (1 if cfg.tied_embeddings else 2) * cfg.V * cfg.D


def test_every_preset_loads_and_cites_its_source():
    assert set(model_presets()) >= {"llama2-13b", "llama3-8b", "llama3-70b", "llama3-405b", "deepseek-v3",
                                    "part7-example"}
    for n in model_presets():
        cfg = load_model_config(n)
        assert "http" in cfg.source or "Scale Your Model" in cfg.source, n
        if not cfg.is_moe:
            assert param_counts(cfg)["total"] == _closed_form_params(cfg), n


def test_aliases_and_unknown_names():
    assert load_model_config("Llama-3-70B").name == "llama3-70b"
    with pytest.raises(UsageError, match="unknown model 'llama9'"):
        load_model_config("llama9")


def test_hf_import_llama(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(LLAMA_HF))
    cfg = load_model_config(str(p))
    assert (cfg.L, cfg.D, cfg.F, cfg.N, cfg.K, cfg.H, cfg.V) == (32, 4096, 14336, 32, 8, 128, 128256)
    assert param_counts(cfg)["total"] == param_counts(load_model_config("llama3-8b"))["total"]


def test_hf_import_gpt2_and_moe():
    gpt2 = from_hf_config({"n_embd": 768, "n_head": 12, "n_layer": 12, "vocab_size": 50257}, "gpt2")
    assert (gpt2.F, gpt2.H, gpt2.gated, gpt2.tied_embeddings) == (3072, 64, False, True)
    moe = from_hf_config({**LLAMA_HF, "n_routed_experts": 64, "num_experts_per_tok": 6,
                          "moe_intermediate_size": 1408, "n_shared_experts": 2, "first_k_dense_replace": 1,
                          "model_type": "deepseek_v2"}, "moe")
    assert (moe.E, moe.k, moe.F_expert, moe.shared_experts, moe.dense_layers) == (64, 6, 1408, 2, 1)


@pytest.mark.parametrize("bad, words", [
    ({k: v for k, v in LLAMA_HF.items() if k != "hidden_size"}, "missing field 'hidden_size'"),
    ({**LLAMA_HF, "num_hidden_layers": -2}, "field 'num_hidden_layers' must be a positive integer, not -2"),
    ({**LLAMA_HF, "num_key_value_heads": 5}, "do not divide"),
])
def test_hf_import_errors_name_the_field(bad, words):
    with pytest.raises(UsageError, match=words):
        from_hf_config(bad, "bad")


def test_layer_program_is_a_valid_program_on_the_engine():
    cfg = load_model_config("llama3-70b")
    text = layer_program(cfg, {"model": ("Y",), "heads": ("Y",), "kv_batch": ("Z",)}, dtype="int8")
    assert "Kc:int8[B_Z, S, K_Y, H]" in text and "KV" not in text
    dims = "B=16,T=1,S=8192,D=8192,F=28672,K=8,G=8,H=128"
    assert symcost.derive(text, mesh="Y=8,Z=2", moves="all", dims=dims).collectives
    # on one chip the layer's FLOPs are the book's: 2 x parameters x tokens, plus 4 B T S N H of attention
    one = symcost.derive(text, mesh="Y=1,Z=1", moves="all", dims=dims)
    params = 2 * 8192 * 64 * 128 + 2 * 8192 * 8 * 128 + 3 * 8192 * 28672
    assert one.evaluate(one.flops) == 2 * params * 16 + 4 * 16 * 8192 * 64 * 128


def test_sharding_and_dtype_change_costs_by_derivation():
    cfg, v5e = load_model_config("llama3-70b"), symcost.hardware("tpu-v5e")
    bf16 = Serving(cfg, v5e, chips=16, dtype="bf16").decode(8, 2048)
    int8 = Serving(cfg, v5e, chips=16, dtype="int8").decode(8, 2048)
    # weights and KV halve; the activations stay bf16
    assert 0.5 < int8.t_hbm / bf16.t_hbm < 0.6
    more = Serving(cfg, v5e, chips=32, dtype="int8").decode(8, 2048)
    assert more.t_hbm < int8.t_hbm


def test_model_cli_json_keys(capsys):
    code = main(["model", "llama3-70b", "--decode", "--hw", "tpu-v5e", "--chips", "8", "--batch", "32",
                 "--seq", "8192", "--dtype", "int8", "--prefill", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    cfg = load_model_config("llama3-70b")
    assert out["params"]["total"] == param_counts(cfg)["total"] == _closed_form_params(cfg)
    assert out["kv_bytes_per_token"] == 163840                  # 2 L K H bytes in int8
    api = Serving(cfg, symcost.hardware("tpu-v5e"), chips=8, dtype="int8").decode(32, 8192)
    for k in ("step_time", "tokens_per_s", "tokens_per_s_per_chip", "max_batch", "memory_bytes"):
        assert out["decode"][k] == pytest.approx(getattr(api, k))   # the command line is the API plus a printer
    assert out["decode"]["mesh"] == {"Y": 8, "Z": 1} and out["prefill"]["mesh"] == {"Y": 8, "Z": 1}
    # the book's 17 ms counts the matmuls alone; the layer's norms, rotary embedding and residual adds on the
    # replicated [B, T, D] activations stream another 0.7 ms (80 layers at 819 GB/s)
    assert out["decode"]["step_time"] == pytest.approx(0.0185, rel=0.01)


def test_model_cli_train_json(capsys):
    """The one training model under the book's memory policy: 3 [B, D] checkpoints a layer (book Part 5,
    Question 2), bf16 weights and mixed-precision Adam's 16 bytes beside them, split over TP 8."""
    code = main(["model", "llama2-13b", "--train", "--hw", "tpu-v5p", "--chips", "4096", "--tp", "8", "--batch",
                 "4194304", "--tokens", "2e12", "--memory", "book", "--checkpoints-per-layer", "3", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    cfg = load_model_config("llama2-13b")
    n = param_counts(cfg)["total"]
    t = out["train"]
    assert t["memory_policy"] == "book" and t["config"]["dp"] == 512
    assert t["memory_bytes"]["params"] == pytest.approx(2 * n / 8) and t["memory_bytes"]["optimizer"] == pytest.approx(12 * n / 8)
    assert t["memory_bytes"]["activations"] == pytest.approx(3 * 2 * 8192 * cfg.D * cfg.L)
    assert t["flops_total"] == pytest.approx(t["model_flops_per_token"]["with_attention"] * 2e12)
    assert t["seconds"] == pytest.approx(t["step_time"] * 2e12 / 4194304)


def test_model_cli_errors(capsys):
    assert main(["model", "llama3-70b", "--decode", "--batch", "4"]) == 2
    assert "needs --hw" in capsys.readouterr().err
    assert main(["model", "nope"]) == 2
    assert main(["model", "llama3-70b", "--dtype", "int9"]) == 2


def test_model_train_checks_a_strategy(capsys):
    """--strategy derives the strategy on the model's shapes, splitting the chips at X_opt."""
    code = main(["model", "llama3-70b", "--train", "--hw", "tpu-v5p", "--chips", "8960", "--tp", "2", "--pp", "35",
                 "--batch", "4194304", "--tokens", "15e12", "--memory", "book", "--checkpoints-per-layer", "4",
                 "--strategy", "derivations/fsdp_tp.sc", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    s = out["train"]["strategy"]
    assert s["mesh"]["X"] * s["mesh"]["Y"] == 8960
    assert s["compute_bound"] is True and s["t_math"] > s["t_comms"]
    # 6 N D: 6 x 70.55e9 x 15e12 = 6.3e24 (plus attention at 8k context)
    assert out["train"]["flops_total"] == pytest.approx(6 * 70.55e9 * 15e12, rel=0.2)


def test_strategy_memory_names_the_saved_activations_apart(capsys):
    """--strategy's memory line says which part is parameters, gradients and optimizer state and which is
    the activations the strategy's backward pass keeps (it used to call the sum "parameters, gradients,
    optimizer"), and whose: the program's (the book's MLP: W_in and W_out), not "one layer's" of the model
    (LLaMA's gated MLP has three matrices, its attention four)."""
    code = main(["model", "llama3-70b", "--train", "--hw", "tpu-v5p", "--chips", "8960", "--tp", "2", "--pp", "35",
                 "--batch", "4194304", "--memory", "book", "--checkpoints-per-layer", "4", "--strategy",
                 "derivations/fsdp_tp.sc"])
    out = capsys.readouterr().out
    assert code in (0, 1)
    line = next(x for x in out.splitlines() if "its memory per chip" in x)
    assert "its parameters (W_in, W_out), their gradients and optimizer state 1.03 MB" in line
    assert "the activations its backward pass keeps 80.5 MB" in line and "total 81.6 MB" in line
    # the program alone, at the sizes it was derived at, not a layer of the run (which keeps its TP, PP, DP)
    first = next(x for x in out.splitlines() if x.strip().startswith("strategy derivations/fsdp_tp.sc"))
    assert "its program alone at B=4,194,304, D=8,192, F=28,672 (B the batch's tokens)" in first
    assert "the run above keeps its own TP, PP and DP" in first
