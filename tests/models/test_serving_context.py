"""Context parallelism when serving (``serve --context AXES``): the tokens split over mesh axes, a
prompt's and the KV cache's, read off the layer program the engine derives."""
import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from symcost.cli import main
from symcost.hardware import hardware
from symcost.models.config import load_model_config
from symcost.models.counts import kv_bytes_per_token
from symcost.models.inference import Serving
from symcost.models.serving_search import search_serving
from symcost.models.transformer import Sharding, layer_program, sizes
from symcost.program import derive_program
from symcost.simulate import check_plan

from conftest import examples

H100 = hardware("h100")
LLAMA70 = load_model_config("llama3-70b")
TOKENS_OVER_Z = Sharding(model=("Y",), heads=("Y",), context=("Z",))


def _collectives(prompt: bool) -> list[str]:
    text = layer_program(LLAMA70, TOKENS_OVER_Z, prompt=prompt)
    dims = sizes(LLAMA70, batch=1, seq=32768 if prompt else 1, context=32768)
    plan = derive_program(text, mesh="Y=4,Z=4", dims=dims, hw=H100, moves="all")
    return [str(s.op) for s in plan.steps if s.is_collective]


def test_a_prompt_gathers_the_keys_and_values_a_decode_step_reduces_its_partial_sums():
    """A prompt's device projects its own tokens and gathers every token's keys and values over Z to attend
    to them; a decode step's token attends to each device's block of the cache, whose partial sums are
    reduced over Z."""
    prefill = _collectives(prompt=True)
    assert "AllGather_Z(Kc[B, S_Z, K_Y, H]) -> Kc[B, S, K_Y, H]" in prefill
    assert "AllGather_Z(Vc[B, S_Z, K_Y, H]) -> Vc[B, S, K_Y, H]" in prefill
    decode = _collectives(prompt=False)
    assert "AllReduce_Z(Ctx[B, T, K_Y, G, H]{U_Z}) -> Ctx[B, T, K_Y, G, H]" in decode
    assert not any("Kc" in c or "Vc" in c for c in decode)          # the cache never moves


@pytest.mark.parametrize("prompt", [True, False])
def test_the_plans_run_on_the_simulator(prompt):
    """A small LLaMA layer (every size divisible by the 4 devices, as the simulator runs elementwise work),
    its tokens over Z: every step's blocks, and the results, are the unsharded layer's."""
    small = dataclasses.replace(load_model_config("llama3-8b"), D=16, F=32, N=16, K=4, H=4, L=1, V=32)
    dims = sizes(small, batch=4, seq=8 if prompt else 4, context=8)
    plan = derive_program(layer_program(small, TOKENS_OVER_Z, prompt=prompt), mesh="Y=2,Z=2", dims=dims,
                          moves="all")
    assert any(s.is_collective and "Z" in s.axes for s in plan.steps)
    check_plan(plan, dims)


def test_latent_attention_gathers_the_latent_not_the_keys_and_values():
    """DeepSeek-V3's attention on Y=8,Z=2, its tokens over Z: a prompt gathers the cached latent (576 values
    a token) and makes every key and value from it, where gathering the keys and values would move 32,768 a
    token; a decode step reduces its latent context's partial sums over Z."""
    cfg, hw = load_model_config("deepseek-v3"), hardware("h200")
    moved = {}
    for prompt in (True, False):
        text = layer_program(cfg, TOKENS_OVER_Z, prompt=prompt, moe=False, absorbed=not prompt)
        dims = sizes(cfg, batch=1, seq=32768 if prompt else 1, context=32768, experts_moe=False)
        plan = derive_program(text, mesh="Y=8,Z=2", dims=dims, hw=hw, moves="all")
        moved[prompt] = [str(s.op) for s in plan.steps if s.is_collective and "Z" in s.axes]
    assert "AllGather_Z(Cc[B, S_Z, Rkv]) -> Cc[B, S, Rkv]" in moved[True]
    assert "AllGather_Z(Rc[B, S_Z, Hr]) -> Rc[B, S, Hr]" in moved[True]
    assert not any(m.startswith(("AllGather_Z(Kc", "AllGather_Z(Vc")) for m in moved[True])
    assert "AllReduce_Z(Cl[B, T, K_Y, G, Rkv]{U_Z}) -> Cl[B, T, K_Y, G, Rkv]" in moved[False]


def test_each_device_holds_the_cache_of_its_own_tokens():
    """327,680 bytes a token (80 layers, 8 key-value heads of 128, keys and values in bf16); the heads over
    Y=8 and the tokens over Z=2 leave a device 1/16 of them; the weights are split over Y alone, whole on
    each Z rank."""
    seq = 131072
    split = Serving(LLAMA70, H100, chips=16, mesh="Y=8,Z=2", sharding=TOKENS_OVER_Z)
    heads = Serving(LLAMA70, H100, chips=8, mesh="Y=8")
    assert kv_bytes_per_token(LLAMA70) == 327680
    assert split.memory_per_device(1, seq) - split.weight_bytes_per_device == pytest.approx(seq * 327680 / 16)
    assert split.weight_bytes_per_device == pytest.approx(heads.weight_bytes_per_device)
    assert split.kv_copies == 1


@pytest.mark.slow    # run searches: the full tier
def test_a_long_prompt_across_two_nodes_splits_its_tokens_over_them():
    """docs/training-and-serving.md: a 131,072-token prompt on two nodes of 8 H100s, the heads over all 16
    (tensor-parallel collectives over InfiniBand) against the heads over a node and the tokens over the two;
    and the prefill search finds a layout with the tokens split where no other meets 8 s."""
    heads = Serving(LLAMA70, H100, chips=16, mesh="Y=16").prefill_step(1, 131072)
    tokens = Serving(LLAMA70, H100, chips=16, mesh="Y=8,Z=2", sharding=TOKENS_OVER_Z).prefill_step(1, 131072)
    assert (heads.step_time, tokens.step_time) == (pytest.approx(9.22, abs=0.01), pytest.approx(4.69, abs=0.01))
    assert tokens.tokens_over == ("Z",) and heads.tokens_over == ()
    res = search_serving(LLAMA70, H100, 16, 131072, latency=8.0, top=50, phase="prefill")
    assert res.rows and all(r.step.tokens_over == ("Z",) for r in res.rows)
    assert any(m.endswith("; tokens over Z") for m in res.get("meshes"))


def test_the_command_line_names_the_split_and_refuses_what_it_cannot_split(capsys):
    args = ["serve", "llama3-70b", "--hw", "h100", "--chips", "16", "--seq", "131072", "--mesh", "Y=8,Z=2"]
    assert main(args + ["--decode", "--batch", "2", "--context", "Z", "--json"]) == 0
    decode = json.loads(capsys.readouterr().out)["decode"]
    assert decode["tokens_over"] == ["Z"] and decode["mesh"] == {"Y": 8, "Z": 2}
    assert main(args + ["--prefill", "--context", "Z"]) == 0
    assert "(mesh Y=8, Z=2; tokens over Z)" in capsys.readouterr().out
    for extra, says in ((["--context", "Y"], "--context Y: Y splits the heads; name axes that split the batch alone "
                                             "(--mesh Y=8,Z=2: Z)"),
                        (["--context", "W"], "--context W: name axes of the mesh Y=8,Z=2 once each (W is not one)"),
                        (["--context", "Z", "--search"], "drop --batch, --mesh, --experts and --context")):
        assert main(args + ["--prefill", *extra]) == 2
        assert says in capsys.readouterr().err
    assert main(["serve", "mixtral-8x7b", "--hw", "h100", "--chips", "8", "--mesh", "Y=2,Z=4", "--prefill",
                 "--experts", "Z", "--context", "Z"]) == 2
    assert ("--context Z: Z splits the experts; name axes that split the batch alone (--mesh Y=2,Z=4 --experts Z: "
            "none)") in capsys.readouterr().err
    assert main(["train", "llama3-8b", "--hw", "h100", "--chips", "8", "--sequences", "8", "--context", "Z"]) == 2
    assert "--context is read by --decode, --prefill and --frontier" in capsys.readouterr().err


@settings(max_examples=examples(8), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(("llama3-8b", "llama3-70b", "llama2-13b")),
       split=st.sampled_from([(1, 8), (2, 4), (4, 2), (8, 2), (1, 2), (2, 2)]), batch=st.sampled_from([1, 8]))
def test_a_decode_with_its_tokens_over_z_streams_at_least_the_weights_a_chip_holds(name, split, batch):
    """With the tokens over Z the weights are split over Y alone (whole on each Z rank): a decode step
    reads every weight block a chip holds (the input embedding, looked up a row a token, aside), so it is
    no shorter than those bytes at the chip's HBM bandwidth."""
    cfg = load_model_config(name)
    y, z = split
    if cfg.K % y:
        return
    s = Serving(cfg, H100, chips=y * z, mesh=f"Y={y},Z={z}", sharding=TOKENS_OVER_Z)
    step = s.decode(batch, 4096)
    assert step.tokens_over == ("Z",) and dict(step.mesh) == {"Y": y, "Z": z}
    assert step.step_time >= step.weight_bytes_read / H100.hbm_bandwidth * (1 - 1e-9)
    embedding = cfg.D * cfg.V * 2 / y
    assert step.weight_bytes_read == pytest.approx(s.weight_bytes_per_device - embedding, rel=1e-9)


def test_a_mesh_that_pads_the_key_value_heads_says_so(capsys):
    """LLaMA 3-70B's 8 key-value heads over 16 ranks: each rank holds a block of one head, half of them
    padding, and the step is priced so; the text and the JSON say which dimension is padded, and a mesh
    that divides the heads says nothing."""
    assert Serving(LLAMA70, H100, chips=16, mesh="Y=16").decode(8, 8192).padding == (("K", 8, 16, 16),)
    assert Serving(LLAMA70, H100, chips=8, mesh="Y=8").decode(8, 8192).padding == ()
    base = ["serve", "llama3-70b", "--hw", "h100", "--chips", "16", "--seq", "8192", "--mesh", "Y=16"]
    assert main(base + ["--decode", "--batch", "8"]) == 0
    out = capsys.readouterr().out
    assert "padding: K = 8 over 16 ranks is padded to 16 (50.00% of it padding" in out
    assert "--mesh Y=8,Z=2 splits the 8 key-value heads one to a chip" in out
    assert main(base + ["--prefill", "--json"]) == 0
    derived = json.loads(capsys.readouterr().out)["prefill"]["derived"]
    assert derived["padding"] == [{"dim": "K", "size": 8, "devices": 16, "padded": 16}]
