"""The ZB-H1 pipeline schedule (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): each backward pass
split into its input gradients (B) and its weights' gradients (W), a stage's W run in what would have been
its bubble. W is read off the layer's plan: the backward einsums that make a weight's gradient."""
import json
from dataclasses import replace

import pytest

from symcost.cli import main
from symcost.hardware import hardware
from symcost.hardware.efficiency import Efficiency
from symcost.models.config import load_model_config
from symcost.models.execution import Run
from symcost.models.layer_cost import LayerCost
from symcost.models.schedule import Schedule

A100 = hardware("a100")
GPT3 = load_model_config("gpt3-175b")


def test_the_bubble_shrinks_by_twice_the_weights_gradients():
    """1F1B idles (p - 1)(F + B + W); ZB-H1 (p - 1)(F + B - W); the interleaved schedule (p - 1)/v
    microbatch-times. Never below zero."""
    one, zb = Schedule("1f1b", stages=8, microbatches=64), Schedule("zb-h1", stages=8, microbatches=64)
    assert one.bubble(3.0, 1.0) == pytest.approx(7 * 3.0)
    assert zb.bubble(3.0, 1.0) == pytest.approx(7 * 1.0)
    assert zb.bubble(1.0, 0.75) == 0.0
    assert Schedule("interleaved", stages=8, microbatches=64, interleave=2).bubble(3.0, 1.0) == pytest.approx(10.5)
    assert zb.in_flight == one.in_flight == 8                  # 1F1B's memory
    with pytest.raises(Exception, match="needs the interleaved schedule"):
        Schedule("zb-h1", stages=8, microbatches=64, interleave=2)


def test_the_weights_gradients_are_the_plans_weight_gradient_einsums():
    """LLaMA 3-8B, one sequence of 8192 on the ideal H100 (every einsum math-bound): the weights' gradients
    dW = X^T dY do the forward projections' FLOPs, 2 x S x the layer's weights."""
    cfg = load_model_config("llama3-8b")
    h100 = replace(hardware("h100"), efficiency=Efficiency())
    S, D, F, N, K, H = 8192, cfg.D, cfg.F, cfg.N, cfg.K, cfg.H
    t = LayerCost(cfg, h100, tp=1, microbatch=1, seq=S, recompute="none", attention="flash").timings()
    weights = 2 * D * N * H + 2 * D * K * H + 3 * D * F
    assert t["weight_grads"] == pytest.approx(2 * S * weights / h100.C, rel=1e-9)
    assert 0 < t["weight_grads"] < t["backward_compute"]


def test_a_run_on_zb_h1_saves_twice_its_stages_weights_gradients_per_bubble_microbatch(capsys):
    """GPT-3 175B on 64 A100s as Korthikanti et al. ran it (TP 8, PP 8, 64 microbatches, selective
    recomputation, sequence parallelism) but without its interleaving, on 1F1B and on ZB-H1: the same work and memory, the bubble
    (p - 1)(F + B + W - 2 W) for a stage's 12 layers."""
    kw = dict(tp=8, pp=8, sequences=64, microbatch=1, seq=2048, recompute="selective", seq_parallel=True)
    one, zb = Run(GPT3, A100, schedule="1f1b", **kw), Run(GPT3, A100, schedule="zb-h1", **kw)
    a, b = one.iteration(), zb.iteration()
    w = 12 * one.layer()["weight_grads"]
    assert b["bubble"] == pytest.approx(a["bubble"] - 2 * 7 * w, rel=1e-12)
    assert b["iteration"] == pytest.approx(a["iteration"] - 2 * 7 * w, rel=1e-12) and b["bubble"] < 0.6 * a["bubble"]
    assert zb.memory() == one.memory()
    assert (a["bubble"], b["bubble"]) == (pytest.approx(1.31, abs=0.005), pytest.approx(0.69, abs=0.005))  # the docs
    args = ["train", "gpt3-175b", "--hw", "a100", "--chips", "64", "--tp", "8", "--pp", "8", "--dp", "1", "--sequences",
            "64", "--seq", "2048", "--recompute", "selective", "--seq-parallel", "--schedule", "zb-h1"]
    assert main(args) == 0
    assert "zb-h1 schedule (64 microbatches" in capsys.readouterr().out
    assert main(args + ["--json"]) == 0
    schedule = json.loads(capsys.readouterr().out)["train"]["schedule"]
    # the bubble it leaves over the 64 microbatch-times (1F1B's would be 7 / 64)
    assert schedule["bubble_fraction"] == pytest.approx(b["bubble"] / (64 * a["bubble"] / 7), rel=1e-12)


@pytest.mark.slow    # run searches: the full tier
def test_the_run_search_takes_zb_h1_as_the_frameworks(capsys):
    """``train --search --schedule zb-h1``: every pipeline whose stages hold one chunk runs ZB-H1 (the
    interleaved ones keep theirs), so the best is no slower; any other schedule is the search's to choose."""
    from symcost.models.runs import candidates, search_runs
    space = list(candidates(GPT3, A100, 64, 64, 2048, zero_bubble=True))
    assert all(c.get("schedule") == "zb-h1" for c in space if c["pp"] > 1 and c["interleave"] == 1)
    assert not any("schedule" in c for c in space if c["pp"] == 1 or c["interleave"] > 1)
    zb, plain = (search_runs(GPT3, A100, 64, 64, 2048, top=1, zero_bubble=z).rows[0] for z in (True, False))
    assert zb.step_time <= plain.step_time
    args = ["train", "gpt3-175b", "--hw", "a100", "--chips", "64", "--sequences", "64", "--seq", "2048", "--search"]
    assert main(args + ["--schedule", "zb-h1", "--top", "1"]) == 0
    assert ", ZB-H1 where a stage holds one chunk:" in capsys.readouterr().out
    assert main(args + ["--schedule", "gpipe"]) == 2
    assert "drop --schedule" in capsys.readouterr().err
