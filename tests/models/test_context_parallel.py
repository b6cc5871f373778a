"""Context parallelism (``--cp``): each sequence split over ``cp`` ranks, keys and values passed round a
ring beside attention. Every figure below is derived, then checked against its closed form."""
from dataclasses import replace

import pytest

from symcost.cli import main
from symcost.errors import UsageError
from symcost.hardware import hardware
from symcost.hardware.efficiency import Efficiency
from symcost.models.config import load_model_config
from symcost.models.execution import Run
from symcost.models.runs import candidates

H100 = replace(hardware("h100"), efficiency=Efficiency())   # the ideal H100: every figure at its peak, so shares are exact
A100 = hardware("a100")
LLAMA = load_model_config("llama3-8b")


def _run(cp, **kw):
    base = dict(tp=4, pp=1, dp=1, sequences=8, seq=32768, recompute="selective", seq_parallel=True)
    return Run(LLAMA, kw.pop("hw", H100), cp=cp, **{**base, **kw})


def test_a_rank_does_one_cp_th_of_every_layer():
    one, two = _run(1).layer(), _run(2).layer()
    for part in ("forward", "backward", "recompute", "matmul"):     # the plan's own blocks: to 0.1 %
        assert two[part] == pytest.approx(one[part] / 2, rel=1e-3), part


def test_activations_split_weights_do_not_and_zero_shards_over_cp():
    """Every saved tensor is halved, the keys and values too: a rank keeps only its own block of them and
    gathers them again for the backward pass, as Megatron-Core's context parallelism does (Transformer
    Engine's AttnFuncWithCPAndKVP2P saves one rank's block of K and V, ``p2p_comm_buffers[-1]``, and passes
    them round the ring again in its backward)."""
    one, two = _run(1).memory(), _run(2).memory()
    assert two["activations"] == pytest.approx(one["activations"] / 2, rel=1e-6)
    assert (two["weights"], two["gradients"], two["optimizer"]) == (one["weights"], one["gradients"], one["optimizer"])
    assert _run(2, zero=1).memory()["optimizer"] == pytest.approx(one["optimizer"] / 2)


def test_model_flops_do_not_depend_on_how_the_sequence_is_split():
    assert _run(2).flops()["model"] == pytest.approx(_run(1).flops()["model"])
    assert _run(2).chips == 8 and _run(2).replicas == 2


def test_context_parallel_collectives_come_from_the_plan():
    """TP 8 x CP 4 leaves the NVLink node: the keys and values each rank gathers over the CP axis (Z) (and
    their gradients reduce-scattered back) cross InfiniBand; they are steps of the layer's plan on axis Z."""
    gpt3 = load_model_config("gpt3-175b")
    run = Run(gpt3, A100, tp=8, cp=4, sequences=4, seq=2048, recompute="selective", seq_parallel=True)
    assert run.cp_link == "dcn"
    plan = run.layer_cost.plan()
    on_c = [s for s in plan.steps if s.is_collective and "Z" in s.axes]
    gathered = {"Ks", "Vs"}
    assert {s.tensor for s in on_c if s.phase == "forward" and s.op.kind == "AllGather"} == gathered
    assert {s.tensor for s in on_c if s.phase == "backward" and s.op.kind == "AllGather"} >= gathered
    kept = {t.name: t for t in run.layer_cost.saved()}
    assert kept["Ks"].axes_of("S") == ("Z",) and kept["Vs"].axes_of("S") == ("Z",)
    assert run.layer()["cp_comms"] > 0
    assert Run(gpt3, A100, tp=4, cp=2, sequences=4, seq=2048).cp_link == "nvlink"


def test_bad_splits_name_the_flag():
    with pytest.raises(UsageError, match="--seq 1000 does not split over --cp 3"):
        _run(3, seq=1000)
    with pytest.raises(UsageError, match="--cp must be at least 1"):
        _run(0)


def test_command_line(capsys):
    args = ["model", "llama3-8b", "--train", "--hw", "h100", "--chips", "8", "--tp", "4", "--cp", "2",
            "--sequences", "8", "--seq", "32768", "--recompute", "selective", "--seq-parallel"]
    assert main(args) == 0
    assert "DP 1, CP 2 (nvlink)" in capsys.readouterr().out
    assert main(args[:6] + ["16"] + args[7:] + ["--dp", "1"]) == 2
    assert "--chips 16 is not --tp 4 x --pp 1 x --dp 1 x --cp 2 = 8" in capsys.readouterr().err


def test_the_run_search_tries_context_parallelism_when_asked():
    assert {c["cp"] for c in candidates(LLAMA, H100, 16, 16, 32768)} == {1}
    assert {c["cp"] for c in candidates(LLAMA, H100, 16, 16, 32768, max_cp=4)} == {1, 2, 4}
