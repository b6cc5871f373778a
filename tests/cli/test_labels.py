"""Labels a reader trips on: each says what it names (the link a GPU's intensity is taken over, the axis a
figure sweeps)."""

import pytest

import symcost
from symcost.cli import main

from conftest import ROOT



def test_a_gpu_names_its_nvlink_intensity(capsys):
    assert main(["hardware", "h100"]) == 0
    out = capsys.readouterr().out
    h100 = symcost.hardware("h100")
    assert f"C/W_nvlink = {h100.C / h100.ici_one_way:.0f}" in out and "C/W_ici" not in out
    assert main(["hardware", "tpu-v5p"]) == 0
    v5p = symcost.hardware("tpu-v5p")
    assert f"C/W_ici = {v5p.C / v5p.ici_bandwidth:.0f}" in capsys.readouterr().out


def test_a_figure_over_a_mesh_axis_draws_compute_over_it():
    """Tensor parallelism over Y: forward and backward, T_math = 3 x 4BDF / (C Y) falls as 1/Y (the
    program's rank sizes), the communication does not: the figure has both lines, not 'compute does not
    depend on Y'."""
    pytest.importorskip("matplotlib")
    from symcost.export.plot import strategy_curves
    v5p = symcost.hardware("tpu-v5p")
    xs, comms, math_ = strategy_curves([str(ROOT / "derivations" / "tp.sc")], "Y", v5p, 64)["tp"]
    assert xs == [1, 2, 4, 8, 16, 32, 64]
    B, D, F = 1048576, 8192, 32768
    for y, m in zip(xs, math_):
        assert m == pytest.approx(3 * 4 * B * D * F / (v5p.C * y), rel=1e-9)
    assert len(set(round(c, 12) for c in comms)) == 1


def test_plot_over_a_mesh_axis_writes_the_figure(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "tp.svg"
    assert main(["plot", str(ROOT / "derivations" / "tp.sc"), "--vs", "Y", "--hw", "tpu-v5p", "-o", str(out)]) == 0
    assert out.read_text().lstrip().startswith("<?xml")


def test_a_run_names_links_only_for_axes_it_splits_and_no_schedule_without_a_pipeline(capsys):
    """TP 1 and PP 1 split nothing: no link is named for them, and without stages there is no pipeline
    schedule, only the microbatches a rank accumulates."""
    assert main(["train", "llama3-8b", "--hw", "h100", "--chips", "8", "--sequences", "16", "--seq", "8192"]) in (0, 1)
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "run on" in ln)
    assert "TP 1, PP 1, DP 8 (nvlink)" in line and "no pipeline (2 microbatches)" in line and "1f1b" not in line
    assert main(["train", "gpt3-175b", "--hw", "a100", "--chips", "64", "--tp", "8", "--pp", "8", "--sequences", "64",
                 "--seq", "2048"]) in (0, 1)
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "run on" in ln)
    assert "TP 8 (nvlink), PP 8 (dcn), DP 1;" in line and "1f1b schedule (64 microbatches, interleave 1)" in line
