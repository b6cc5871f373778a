"""Multi-head latent attention (DeepSeek-V2/V3): the counts come out of the layer program, and agree with
what the DeepSeek papers publish."""
import dataclasses

import pytest

from symcost.cli import main
from symcost.errors import UsageError
from symcost.hardware import hardware
from symcost.models.config import from_hf_config, load_model_config
from symcost.models.inference import Serving
from symcost.models.transformer import Sharding, layer_program, param_counts, sizes
from symcost.models.counts import kv_bytes_per_token
from symcost.program import derive_program

DS = load_model_config("deepseek-v3")
# DeepSeek-V2-Lite (huggingface.co/deepseek-ai/DeepSeek-V2-Lite config.json): no query latent
V2_LITE = {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "vocab_size": 102400,
           "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
           "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1,
           "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16, "kv_lora_rank": 512,
           "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
           "tie_word_embeddings": False}


def test_deepseek_v3_parameters_are_the_reports():
    p = param_counts(DS)
    per_layer = (7168 * 1536 + 1536 * 128 * (128 + 64) + 7168 * 512 + 7168 * 64 + 512 * 128 * 2 * 128
                 + 128 * 128 * 7168)   # Wqa, Wq up (nope + rope), Wkv, Wkr, Wk up + Wv up, Wo
    assert p["attention"] == 61 * per_layer == 11_413_422_080
    assert p["total"] == pytest.approx(671e9, rel=0.001)        # DeepSeek-V3 report: 671B
    assert p["active"] == pytest.approx(37e9, rel=0.015)        # 37B activated (37.6e9: both embeddings, the routers)


def test_kv_cache_is_the_latent_and_the_rotary_key():
    assert kv_bytes_per_token(DS) == 61 * (512 + 64) * 2 == 70_272
    assert kv_bytes_per_token(DS, "fp8") == 35_136
    mha = dataclasses.replace(DS, kv_lora=0, q_lora=0, rope_dim=0)
    assert kv_bytes_per_token(mha) / kv_bytes_per_token(DS) == pytest.approx(56.9, rel=0.01)   # the old 57x


def test_deepseek_v2_lite_without_a_query_latent():
    cfg = from_hf_config(V2_LITE, "deepseek-v2-lite")
    assert (cfg.kv_lora, cfg.q_lora, cfg.rope_dim, cfg.K) == (512, 0, 64, 16)
    p = param_counts(cfg)
    assert p["total"] == pytest.approx(15.7e9, rel=0.005)       # DeepSeek-V2 paper, appendix: 15.7B
    # 2.4B activated: the paper leaves out the input embedding (a lookup, no FLOPs)
    assert p["active"] - p["embedding"] / 2 == pytest.approx(2.4e9, rel=0.03)
    assert "Wqa" not in layer_program(cfg, {})


def test_decoding_runs_attention_in_the_latent():
    """The absorbed form reads only the latent: attention FLOPs a key are 2 N (kv_lora + rope_dim) for the
    scores and 2 N kv_lora for the context, where the training form spends 2 N (H + rope_dim) + 2 N H."""
    def context_flops(absorbed, names):
        plan = derive_program(layer_program(DS, {}, moe=True, absorbed=absorbed), mesh="X=1", moves="none",
                              dims=sizes(DS, batch=1, seq=1, context=1000))
        return sum(plan.evaluate(s.flops) for s in plan.steps if s.is_einsum and s.tensor in names)
    assert context_flops(True, ("An", "Ar", "Cl")) == 2 * 128 * (512 + 64 + 512) * 1000
    assert context_flops(False, ("An", "Ar", "Ctx")) == 2 * 128 * (128 + 64 + 128) * 1000


def test_split_heads_copy_the_latent():
    h100 = hardware("h100")
    tp = Serving(DS, h100, chips=64)
    mixed = Serving(DS, h100, chips=64, mesh="Y=8,Z=8",
                    sharding=Sharding(model=("Y", "Z"), heads=("Y",), kv_batch=("Z",)))
    assert (tp.kv_copies, mixed.kv_copies) == (64, 8)
    per_seq = 4096 * 70_272
    assert 64 * tp.decode(64, 4096).memory_bytes - tp.held_param_bytes == pytest.approx(64 * per_seq * 64)
    assert mixed.max_batch(4096) == int((64 * h100.hbm_bytes - mixed.held_param_bytes) // (per_seq * 8))
    # the latent and query projections (D x (q_lora + kv_lora + rope_dim)) are not split by the heads:
    # every device holds them, and the router of each of the 58 MoE layers (D x E, too small to split)
    proj = 61 * 7168 * (1536 + 512 + 64) * 2 + 58 * 7168 * 256 * 2
    assert tp.held_param_bytes - tp.param_bytes == pytest.approx(63 * proj, rel=1e-6)
    assert Serving(load_model_config("llama3-70b"), h100, chips=8).kv_copies == 1


def test_model_prints_the_latent_and_the_copies(capsys):
    code = main(["model", "deepseek-v3", "--decode", "--hw", "h100", "--chips", "64", "--batch", "64",
                 "--mesh", "Y=8,Z=8"])
    out = capsys.readouterr().out
    assert code == 0
    assert "latent attention: kv_lora=512 q_lora=1536 rope_dim=64" in out
    assert "KV cache per token: 70,272 bytes" in out and "held 8 times" in out


@pytest.mark.parametrize("bad, words", [
    ({"q_lora": 1536}, "give 'kv_lora' too"),
    ({"kv_lora": 512, "K": 8}, "field 'K' (8) must equal field 'N' (128)"),
    ({"kv_lora": -1}, "field 'kv_lora' must be a non-negative integer"),
])
def test_bad_latent_fields_name_the_field(bad, words):
    d = {**dataclasses.asdict(DS), "kv_lora": 0, "q_lora": 0, "rope_dim": 0, **bad}
    with pytest.raises(UsageError) as e:
        dataclasses.replace(DS, **{k: d[k] for k in ("kv_lora", "q_lora", "rope_dim", "K")})
    assert words in str(e.value)
