"""MoE models in the execution model and expert parallelism (``--ep``): a token's MLP is its k routed
experts and the shared ones; the routed experts' weights split over the EP ranks; tokens go to their
experts and back with AllToAlls. Each figure is derived and checked against its closed form."""
import dataclasses

import pytest

from symcost.cli import main
from symcost.errors import UsageError
from symcost.hardware import hardware
from symcost.models.config import load_model_config
from symcost.models.execution import Run
from symcost.models.experts import routed_params
from symcost.models.runs import candidates
from symcost.models.transformer import param_counts
from symcost.pricing import op_cost

H100 = hardware("h100")
DS = load_model_config("deepseek-v3")
MIXTRAL_LIKE = dataclasses.replace(load_model_config("llama3-8b"), name="moe-8x", E=8, k=2, F_expert=14336)


def _run(cfg=DS, **kw):
    base = dict(tp=8, dp=8, sequences=64, seq=4096, recompute="full", attention="flash", zero=1)
    return Run(cfg, H100, **{**base, **kw})


def test_a_token_sees_k_experts_and_the_shared_ones():
    """The MoE layer's plan: a token's k copies go to their experts, each expert's gated MLP of width F_expert
    runs on the tokens it receives, and the shared expert on every token; its matmul FLOPs are a dense
    layer's with F = (k + shared) F_expert, plus the router's gate logits (2 s b D E FLOPs) and the
    weighted sum of a token's k results (2 s b k D FLOPs; the permutation before the experts copies, it
    does no arithmetic), whatever the expert
    parallelism. The model's FLOPs count the active parameters (6N with N = 37.6e9 for DeepSeek-V3, the
    router's 58 x 7168 x 256 among them, not 671e9)."""
    fl = _run().flops()
    tokens = 64 * 4096
    assert fl["6N"] == pytest.approx(6 * param_counts(DS)["active"] * tokens)
    dense_layer = dataclasses.replace(DS, E=1, k=1, shared_experts=0, F_expert=None, dense_layers=0,
                                      F=(8 + 1) * 2048)
    same = Run(dense_layer, H100, tp=8, dp=8, sequences=64, seq=4096, recompute="full", attention="flash", zero=1)
    moe_part = _run(ep=1).kinds()[1][1]
    routing = 2 * moe_part.microbatch * 4096 * 8 * 7168 + 2 * moe_part.microbatch * 4096 * 7168 * 256
    assert moe_part.einsum_flops_all()[0] == pytest.approx(same.layer_cost.einsum_flops_all()[0] + routing)
    assert _run(ep=8).kinds()[1][1].einsum_flops_all() == pytest.approx(moe_part.einsum_flops_all())


def test_a_rank_streams_the_experts_it_holds():
    """Without expert parallelism each TP rank holds an eighth of all 256 experts' F and reads them for the
    128 tokens each expert receives (4096 x 8 / 256): the first expert matmul streams 256 x 7168 x 2048 / 8
    bf16 weights (940 MB), far below the critical batch, so the MoE layer's matmuls take longer than the
    dense layer of the same FLOPs; with EP 8 a rank holds 32 experts and reads an eighth of that."""
    eta = H100.efficiency.hbm
    weights = 256 * 7168 * 2048 / 8 * 2
    assert weights == pytest.approx(0.94e9, rel=0.001)
    for ep, held in ((1, weights), (8, weights / 8)):
        lay = _run(ep=ep).kinds()[1][1]
        plan = lay.plan()
        u1 = next(s for s in plan.steps if s.phase == "forward" and s.tensor == "U1" and s.is_einsum)
        assert op_cost(u1.op, lay.env(plan)).t_hbm >= held / (H100.hbm_bandwidth * eta)
    dense_layer = dataclasses.replace(DS, E=1, k=1, shared_experts=0, F_expert=None, dense_layers=0,
                                      F=(8 + 1) * 2048)
    same = Run(dense_layer, H100, tp=8, dp=8, sequences=64, seq=4096, recompute="full", attention="flash", zero=1)
    assert _run(ep=1).kinds()[1][1].figures()["matmul"] > same.layer()["matmul"]


def test_expert_parallelism_splits_the_routed_experts():
    one, eight = _run(ep=1), _run(ep=8)
    routed = routed_params(DS)
    assert routed == 58 * 256 * 3 * 7168 * 2048
    total = param_counts(DS)["total"]
    assert one.params_per_device() == pytest.approx(total / 8)
    assert eight.params_per_device() == pytest.approx((total - routed + routed / 8) / 8)
    assert eight.memory()["weights"] < one.memory()["weights"] / 6


def test_the_alltoalls():
    """Expert parallelism is the layer plan's mesh axis X: each MoE layer sends its tokens to their experts
    and back with two AllToAlls over X, and the backward pass runs their transposes; with sequence
    parallelism each TP rank sends its own s b / tp tokens, each as k copies of D bf16 values, (ep - 1) / ep
    of them leaving the rank, and gathers the experts' tokens over TP on NVLink. Full recomputation runs the
    forward two again. TP 8 x EP 8 leaves the node: X is InfiniBand. Each is a kernel, which pays the
    preset's per-kernel floor."""
    run = _run(ep=8, seq_parallel=True)
    lay = run.kinds()[1][1]
    assert lay.mesh == "X=8,Y=8"
    plan = lay.plan()
    moves = [(s.phase, s.op.kind) for s in plan.steps if s.is_collective and "X" in s.axes
             and not s.tensor.startswith("dW")]
    assert moves == [("forward", "AllToAll")] * 2 + [("backward", "AllToAll")] * 2
    assert [a.kind for a in plan.mesh.axes if a.name == "X"] == ["dcn"]
    eta, lat = H100.efficiency.net("dcn", "AllToAll")
    tokens = 4096 * 1 / 8
    one = 2 * tokens * 8 * 7168 * 7 / 8 / (H100.dcn_bandwidth * eta) + lat + H100.efficiency.t_kernel
    moe_share = (61 - 3) / 61
    assert run.layer()["ep_comms"] == pytest.approx(moe_share * 6 * one)
    assert _run(ep=1).layer()["ep_comms"] == 0


def test_bad_expert_splits_say_why():
    with pytest.raises(UsageError, match="has no experts to split"):
        Run(load_model_config("llama3-8b"), H100, dp=2, ep=2)
    with pytest.raises(UsageError, match="does not divide deepseek-v3's 256 experts"):
        _run(ep=3, dp=3, sequences=3)
    with pytest.raises(UsageError, match=r"must divide the data-parallel replicas \(--dp x --cp = 8\)"):
        _run(ep=16)


def test_the_run_search_tries_expert_parallelism_on_moe_models():
    eps = {c["ep"] for c in candidates(MIXTRAL_LIKE, H100, 16, 16, 4096)}
    assert eps == {1, 2, 4, 8}
    assert {c["ep"] for c in candidates(load_model_config("llama3-8b"), H100, 16, 16, 4096)} == {1}


def test_command_line(capsys):
    code = main(["model", "deepseek-v3", "--train", "--hw", "h100", "--chips", "512", "--tp", "8", "--pp", "1",
                 "--dp", "64", "--ep", "64", "--sequences", "512", "--seq", "4096", "--recompute", "full",
                 "--attention", "flash", "--zero", "1"])
    out = capsys.readouterr().out
    assert "DP 64 (dcn, ZeRO 1), EP 64" in out and "ep comms" in out
    assert code in (0, 1)


def test_serve_splits_the_experts_over_the_axes_experts_names(capsys):
    """``serve --experts Y``: the routed experts split whole over the mesh's Y (expert parallelism), each
    device holding E / |Y| of them, as ``Sharding(experts=("Y",))`` lays them out: the same step, named in
    the text and in JSON (``experts_over``). At a batch of one a chip that holds a reached expert reads all
    of it (tests/searching/test_serving_search.py), so the step is slower than each expert split over Y."""
    import json

    from symcost.models.inference import Serving
    from symcost.models.transformer import Sharding
    cfg = load_model_config("mixtral-8x7b")
    args = ["serve", "mixtral-8x7b", "--decode", "--hw", "h100", "--chips", "8", "--seq", "4096", "--batch", "1"]
    assert main(args + ["--experts", "Y", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["decode"]
    ep = Serving(cfg, H100, chips=8, mesh="Y=8", sharding=Sharding(model=("Y",), heads=("Y",), experts=("Y",)))
    assert got["experts_over"] == ["Y"] and got["step_time"] == pytest.approx(ep.decode(1, 4096).step_time, rel=1e-12)
    assert main(args + ["--json"]) == 0
    plain = json.loads(capsys.readouterr().out)["decode"]
    assert plain["experts_over"] == [] and plain["step_time"] < got["step_time"]
    assert main(args + ["--experts", "Z", "--mesh", "Y=2,Z=4"]) == 0
    assert "(mesh Y=2, Z=4; experts over Z), batch 1" in capsys.readouterr().out


@pytest.mark.parametrize("argv, says", [
    (["mixtral-8x7b", "--experts", "Q"], "--experts Q: name axes of the mesh Y=8 once each (Q is not one)"),
    (["mixtral-8x7b", "--experts", "Z", "--mesh", "Y=2,Z=3", "--chips", "6"],
     "3 groups cannot split the 8 routed experts evenly"),
    (["llama3-8b", "--experts", "Y"], "llama3-8b has no experts to split"),
    (["mixtral-8x7b", "--experts", "Y", "--search"], "drop --batch, --mesh, --experts and --context"),
])
def test_serve_experts_errors_name_the_axes(capsys, argv, says):
    base = ["serve", argv[0], "--decode", "--hw", "h100", "--seq", "4096"]
    rest = argv[1:]
    if "--chips" not in rest:
        rest += ["--chips", "8"]
    if "--search" not in rest:
        rest += ["--batch", "1"]
    assert main(base + rest) == 2
    assert says in capsys.readouterr().err
