"""Model configurations: presets, JSON round trips, HuggingFace import, and the errors bad input gets."""
import dataclasses
import json

import pytest

from symcost.errors import UsageError
from symcost.models import ModelConfig, load_model_config, model_presets
from symcost.models.config import from_hf_config
from symcost.models.transformer import param_counts

# name: (L, D, F, N, K, H, V, tied_embeddings)
DENSE = {
    "llama2-13b": (40, 5120, 13824, 40, 40, 128, 32000, False),
    "llama3-8b": (32, 4096, 14336, 32, 8, 128, 128256, False),
    "llama3-70b": (80, 8192, 28672, 64, 8, 128, 128256, False),
    "llama3-405b": (126, 16384, 53248, 128, 8, 128, 128256, False),
    "part4-example": (64, 4096, 16384, 32, 32, 128, 32000, False),
    "part7-example": (64, 4096, 16384, 32, 8, 256, 32128, True),
    # Korthikanti et al. 2022, Table 3 (GPT: FFN 4 x hidden, vocabulary 51,200)
    "megatron-22b": (48, 6144, 24576, 64, 64, 96, 51200, True),
    "gpt3-175b": (96, 12288, 49152, 96, 96, 128, 51200, True),
    "mt-nlg-530b": (105, 20480, 81920, 128, 128, 160, 51200, True),
    "megatron-1t": (128, 25600, 102400, 160, 160, 160, 51200, True),
}

LLAMA_HF = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
            "num_hidden_layers": 32, "vocab_size": 128256, "hidden_act": "silu", "tie_word_embeddings": False}
GPT2_HF = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 768, "n_head": 12,
           "n_layer": 12, "n_inner": None, "vocab_size": 50257, "activation_function": "gelu_new"}
DEEPSEEK_HF = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
               "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
               "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 3,
               "num_attention_heads": 128, "num_key_value_heads": 128, "num_hidden_layers": 61,
               "vocab_size": 129280, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
               "qk_rope_head_dim": 64, "v_head_dim": 128, "hidden_act": "silu", "tie_word_embeddings": False}


def dims(cfg: ModelConfig) -> tuple:
    return cfg.L, cfg.D, cfg.F, cfg.N, cfg.K, cfg.H, cfg.V


GPT = ("megatron-22b", "gpt3-175b", "mt-nlg-530b", "megatron-1t")


@pytest.mark.parametrize("name", sorted(DENSE))
def test_dense_presets_hold_the_published_numbers(name):
    cfg = load_model_config(name)
    assert cfg.name == name
    assert dims(cfg) + (cfg.tied_embeddings,) == DENSE[name]
    assert cfg.gated == (name not in GPT) and not cfg.is_moe and (cfg.E, cfg.k) == (1, 1)   # GPT: GeLU MLP
    assert cfg.source


def test_deepseek_preset_is_moe_with_latent_attention():
    cfg = load_model_config("deepseek-v3")
    assert dims(cfg) == (61, 7168, 18432, 128, 128, 128, 129280)
    assert (cfg.E, cfg.k, cfg.shared_experts, cfg.F_expert, cfg.dense_layers) == (256, 8, 1, 2048, 3)
    assert (cfg.kv_lora, cfg.q_lora, cfg.rope_dim) == (512, 1536, 64) and cfg.is_mla
    assert cfg.is_moe and not cfg.tied_embeddings
    assert "latent attention" in cfg.notes and "KV cache" in cfg.notes
    assert "deepseek-ai/DeepSeek-V3" in cfg.source


def test_mixtral_preset_is_moe():
    """Mixtral 8x7B's published config: 8 experts of width 14336, 2 a token, every layer; 46.7e9 parameters,
    12.9e9 active (the paper: 47B and 13B)."""
    cfg = load_model_config("mixtral-8x7b")
    assert dims(cfg) == (32, 4096, 14336, 32, 8, 128, 32000)
    assert (cfg.E, cfg.k, cfg.shared_experts, cfg.F_expert, cfg.dense_layers) == (8, 2, 0, 14336, 0)
    p = param_counts(cfg)
    assert p["total"] == pytest.approx(47e9, rel=0.01) and p["active"] == pytest.approx(13e9, rel=0.01)
    assert "mistralai/Mixtral-8x7B" in cfg.source


def test_preset_list():
    assert model_presets() == tuple(sorted(set(DENSE) | {"deepseek-v3", "mixtral-8x7b"}))


@pytest.mark.parametrize("name", model_presets())
def test_every_preset_round_trips_through_json(name, tmp_path):
    cfg = load_model_config(name)
    p = tmp_path / f"{name}-copy.json"
    p.write_text(json.dumps(cfg.as_dict()))
    back = load_model_config(str(p))
    assert back == cfg
    assert json.loads(p.read_text())["source"] == cfg.source


def test_preset_style_file_without_name_takes_the_file_stem(tmp_path):
    p = tmp_path / "tiny.json"
    p.write_text(json.dumps({"L": 2, "D": 64, "F": 256, "N": 4, "K": 2, "H": 16, "V": 100, "gated": False}))
    cfg = load_model_config(str(p))
    assert (cfg.name, dims(cfg), cfg.gated) == ("tiny", (2, 64, 256, 4, 2, 16, 100), False)


@pytest.mark.parametrize("alias, name", [
    ("llama3-70b", "llama3-70b"), ("LLAMA3-70B", "llama3-70b"), ("llama-3-70b", "llama3-70b"),
    ("Llama3-70B", "llama3-70b"), ("Llama-3-70B", "llama3-70b"), ("meta-llama/Meta-Llama-3-70B", "llama3-70b"),
    ("Llama-3.1-405B", "llama3-405b"), ("meta-llama/Llama-2-13b-hf", "llama2-13b"), ("llama_2_13b", "llama2-13b"),
    ("DeepSeek-V3", "deepseek-v3"), ("deepseek-ai/DeepSeek-V3", "deepseek-v3"), ("Part7-Example", "part7-example"),
])
def test_aliases_resolve_to_presets(alias, name):
    assert load_model_config(alias).name == name


def test_unknown_preset_lists_the_known_names():
    with pytest.raises(UsageError) as e:
        load_model_config("llama9-1t")
    msg = str(e.value)
    assert "unknown model 'llama9-1t'" in msg
    for n in model_presets():
        assert n in msg


def test_hf_llama_import(tmp_path):
    d = tmp_path / "Meta-Llama-3-8B"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA_HF))
    cfg = load_model_config(str(d / "config.json"))
    assert cfg.name == "Meta-Llama-3-8B" and cfg.source == str(d / "config.json")
    assert dims(cfg) == (32, 4096, 14336, 32, 8, 128, 128256)
    assert cfg.gated and not cfg.tied_embeddings and not cfg.is_moe
    assert dims(load_model_config(str(d))) == dims(cfg)  # a directory reads its config.json
    assert dataclasses.replace(cfg, name="llama3-8b", source="", notes="") == \
        dataclasses.replace(load_model_config("llama3-8b"), source="", notes="")


def test_hf_defaults_and_explicit_head_dim():
    base = {k: v for k, v in LLAMA_HF.items() if k not in ("num_key_value_heads", "tie_word_embeddings")}
    cfg = from_hf_config(base, "mha", "mha/config.json")
    assert (cfg.K, cfg.H, cfg.tied_embeddings) == (32, 128, False)
    nemo = from_hf_config({**LLAMA_HF, "model_type": "mistral", "architectures": ["MistralForCausalLM"],
                           "hidden_size": 5120, "head_dim": 128, "num_key_value_heads": None}, "nemo")
    assert (nemo.D, nemo.N, nemo.K, nemo.H, nemo.gated) == (5120, 32, 32, 128, True)
    gemma = from_hf_config({**base, "model_type": "gemma", "architectures": ["GemmaForCausalLM"],
                            "hidden_act": "gelu_pytorch_tanh", "head_dim": 256}, "gemma")
    assert (gemma.gated, gemma.tied_embeddings, gemma.H) == (True, True, 256)
    neox = from_hf_config({**base, "model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"],
                           "hidden_act": "gelu"}, "neox")
    assert not neox.gated


def test_hf_gpt2_import(tmp_path):
    p = tmp_path / "gpt2.json"
    p.write_text(json.dumps(GPT2_HF))
    cfg = load_model_config(str(p))
    assert cfg.name == "gpt2"
    assert dims(cfg) == (12, 768, 3072, 12, 12, 64, 50257)
    assert (cfg.gated, cfg.tied_embeddings, cfg.is_moe) == (False, True, False)
    wide = from_hf_config({**GPT2_HF, "n_inner": 4000, "tie_word_embeddings": False}, "gpt2-wide")
    assert (wide.F, wide.tied_embeddings) == (4000, False)


def test_hf_deepseek_moe_import():
    cfg = from_hf_config(DEEPSEEK_HF, "DeepSeek-V3", "https://huggingface.co/deepseek-ai/DeepSeek-V3")
    assert dims(cfg) == (61, 7168, 18432, 128, 128, 128, 129280)  # H from v_head_dim, not 7168 // 128
    assert (cfg.E, cfg.k, cfg.shared_experts, cfg.F_expert, cfg.dense_layers) == (256, 8, 1, 2048, 3)
    assert cfg.gated and cfg.is_moe and (cfg.kv_lora, cfg.q_lora, cfg.rope_dim) == (512, 1536, 64)
    preset = load_model_config("deepseek-v3")
    keys = ("L", "D", "F", "N", "K", "H", "V", "E", "k", "shared_experts", "F_expert", "dense_layers",
            "kv_lora", "q_lora", "rope_dim", "gated", "tied_embeddings")
    assert [getattr(cfg, k) for k in keys] == [getattr(preset, k) for k in keys]


def test_hf_mixtral_and_qwen_moe_import():
    mixtral = from_hf_config({**LLAMA_HF, "model_type": "mixtral", "num_local_experts": 8,
                              "num_experts_per_tok": 2}, "mixtral")
    assert (mixtral.E, mixtral.k, mixtral.F_expert, mixtral.shared_experts, mixtral.dense_layers) == (8, 2, 14336, 0, 0)
    qwen = from_hf_config({**LLAMA_HF, "model_type": "qwen2_moe", "num_experts": 60, "num_experts_per_tok": 4,
                           "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632}, "qwen")
    assert (qwen.E, qwen.k, qwen.F_expert, qwen.shared_experts) == (60, 4, 1408, 4)


def test_missing_hidden_size_names_the_field_and_file(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({k: v for k, v in LLAMA_HF.items() if k != "hidden_size"}))
    with pytest.raises(UsageError, match="missing field 'hidden_size'") as e:
        load_model_config(str(p))
    assert str(p) in str(e.value)
    # several missing: every one named at once (it named one a try)
    p.write_text(json.dumps({"hidden_size": 4096, "num_attention_heads": 32}))
    with pytest.raises(UsageError, match="missing fields 'num_hidden_layers', 'intermediate_size', 'vocab_size'"):
        load_model_config(str(p))


@pytest.mark.parametrize("field, value", [("num_hidden_layers", -2), ("vocab_size", 0),
                                          ("intermediate_size", 14336.5), ("num_key_value_heads", "8"),
                                          ("head_dim", True)])
def test_bad_hf_values_name_the_field_and_value(field, value):
    with pytest.raises(UsageError, match=f"field '{field}' must be a positive integer, not {value!r}"):
        from_hf_config({**LLAMA_HF, field: value}, "bad", "bad/config.json")


@pytest.mark.parametrize("field, value", [("n_routed_experts", -4), ("num_experts_per_tok", 0)])
def test_bad_moe_values_name_the_hf_field(field, value):
    with pytest.raises(UsageError, match=f"'{field}'"):
        from_hf_config({**DEEPSEEK_HF, field: value}, "bad")


def test_bad_preset_style_values_name_the_field_and_file(tmp_path):
    good = load_model_config("llama3-8b").as_dict()
    for field, value, words in [("L", -1, "field 'L' must be a positive integer, not -1"),
                                ("K", 5, "do not divide"),
                                ("k", 3, "field 'k'"),
                                ("gated", "yes", "field 'gated' must be true or false"),
                                ("colour", "red", "unknown field 'colour'")]:
        p = tmp_path / f"bad-{field}.json"
        p.write_text(json.dumps({**good, field: value}))
        with pytest.raises(UsageError, match=words) as e:
            load_model_config(str(p))
        assert p.name in str(e.value)
    with pytest.raises(UsageError, match="field 'D' must be a positive integer, not -5"):
        ModelConfig("m", L=1, D=-5, F=1, N=1, K=1, H=1, V=1)


@pytest.mark.parametrize("text", ["[1, 2, 3]", "{not json", '"llama"'])
def test_unreadable_or_non_object_files(tmp_path, text):
    p = tmp_path / "config.json"
    p.write_text(text)
    with pytest.raises(UsageError, match="config.json"):
        load_model_config(str(p))


def test_missing_file_and_non_dict_input(tmp_path):
    with pytest.raises(UsageError, match="no model config file"):
        load_model_config(str(tmp_path / "absent.json"))
    with pytest.raises(UsageError, match="JSON object"):
        from_hf_config([1, 2], "bad", "bad.json")
