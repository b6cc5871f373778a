"""Flash attention in the execution model (``--attention flash``): the attention core as one kernel whose
scores never reach HBM. Each figure is derived and checked against its closed form."""
from dataclasses import replace

import pytest

from symcost.cli import main
from symcost.errors import UsageError
from symcost.hardware import hardware
from symcost.hardware.efficiency import Efficiency
from symcost.models.config import load_model_config
from symcost.models.execution import Run
from symcost.models.layer_cost import LayerCost

H100 = replace(hardware("h100"), efficiency=Efficiency())   # the ideal H100: every figure at its peak
GPT3 = load_model_config("gpt3-175b")


def _run(attention, **kw):
    base = dict(tp=8, sequences=4, microbatch=1, seq=8192, recompute="none", seq_parallel=True)
    return Run(GPT3, H100, attention=attention, **{**base, **kw})


def test_the_scores_never_reach_hbm():
    """The core's steps are priced with the scores and probabilities on chip: the unfused layer's forward
    reads and writes them through HBM, the flash one does not."""
    assert _run("flash").layer()["forward"] < _run("unfused").layer()["forward"]


def test_the_kernel_is_causal_half_the_cores_flops_forward_backward_and_recomputed():
    """LLaMA 3-8B, one sequence of 8192 on the ideal H100, nothing recomputed: every einsum is math-bound,
    so the layer's matmul seconds are its FLOPs at the peak. The projections and the MLP do 2 x S x their
    weights a token; the attention core's two products 2 x (2 S^2 N H), of which a causal kernel does half;
    the backward pass twice the forward's, and flash's backward kernel computes the scores again (half of
    one product)."""
    cfg = load_model_config("llama3-8b")
    S, D, F, N, K, H = 8192, cfg.D, cfg.F, cfg.N, cfg.K, cfg.H
    t = LayerCost(cfg, H100, tp=1, microbatch=1, seq=S, recompute="none", attention="flash").timings()
    projections = 2 * S * (2 * D * N * H + 2 * D * K * H + 3 * D * F)
    core = 2 * (2 * S * S * N * H)
    assert t["matmul"] == pytest.approx((3 * (projections + core / 2) + core / 4) / H100.C, rel=1e-9)
    # the figure docs/step-model.md quotes: 8 sequences of 8192 on 8 H100s (the preset's achieved figures), TP 8
    run = Run(cfg, hardware("h100"), tp=8, sequences=8, seq=8192, recompute="selective", attention="flash")
    assert run.iteration()["iteration"] == pytest.approx(1.12, abs=0.005)


def test_no_scores_in_memory():
    """Korthikanti et al.'s 5as^2b/t (scores, probabilities, dropout mask) is gone: the core keeps Q, K, V
    and the lse, what selective recomputation keeps plus 4asb/t."""
    flash, unfused, selective = (_run(att, recompute=rec).memory()["activations"] for att, rec in
                                 (("flash", "none"), ("unfused", "none"), ("unfused", "selective")))
    layers = GPT3.L
    per_layer_sel = LayerCost(GPT3, H100, tp=8, microbatch=1, seq=8192, recompute="selective",
                              seq_parallel=True).saved_bytes()
    assert per_layer_sel == pytest.approx(34 * 8192 * GPT3.D / 8)
    assert selective == pytest.approx(per_layer_sel * layers)
    assert flash == pytest.approx(selective + layers * 4 * GPT3.N * 8192 / 8)
    assert unfused > 4 * flash


def test_selective_recomputation_has_nothing_left_to_redo():
    """The backward kernel computes the scores again whatever the policy; selective adds nothing to that."""
    one, two = _run("flash", recompute="selective"), _run("flash", recompute="none")
    assert one.layer()["recompute"] == pytest.approx(two.layer()["recompute"])
    assert one.layer()["recompute"] > 0
    assert one.iteration()["iteration"] == pytest.approx(two.iteration()["iteration"])
    assert _run("flash", recompute="full").layer()["recompute"] > one.layer()["recompute"]


def test_the_hardware_flops_count_the_scores_again():
    run = _run("flash")
    fl = run.flops()
    scores = 2 * 8192 * 8192 * GPT3.D          # one sequence, every head
    assert fl["hardware"] - fl["model"] == pytest.approx(4 * GPT3.L * scores)     # 4 microbatches


def test_faster_than_unfused_at_long_sequences():
    assert _run("flash").iteration()["iteration"] < 0.8 * _run("unfused").iteration()["iteration"]


def test_command_line_and_errors(capsys):
    args = ["model", "gpt3-175b", "--train", "--hw", "h100", "--chips", "8", "--tp", "8", "--sequences", "4",
            "--seq", "8192", "--seq-parallel", "--attention", "flash"]
    assert main(args) in (0, 1)
    assert "sequence parallel, flash attention" in capsys.readouterr().out
    with pytest.raises(UsageError, match="--attention must be one of unfused, flash"):
        _run("paged")
