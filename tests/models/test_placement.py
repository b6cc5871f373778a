"""Where a run's groups sit: inside the fast domain (a GPU node's NVLink, a TPU pod's ICI) where they fit,
over the data-centre network otherwise; and what a collective costs on each, priced by the collectives
registry on the placed mesh."""
import pytest

from symcost.hardware import hardware
from symcost.models.config import load_model_config
from symcost.models.execution import Run
from symcost.models.layer_cost import collective_seconds

V5P, H100 = hardware("tpu-v5p"), hardware("h100")
LLAMA = load_model_config("llama3-8b")


def test_groups_stay_in_the_fast_domain_where_they_fit():
    run = Run(LLAMA, H100, tp=8, dp=2, sequences=2, seq=4096)
    assert (run.link(8), run.link(9), run.tp_link, run.dp_link) == ("nvlink", "dcn", "nvlink", "dcn")


def test_a_collective_is_the_registrys_on_the_placed_axis():
    """An AllGather of V bytes over 8 NVLink GPUs: (n - 1) / n V at the preset's achieved NVLink bandwidth,
    plus its fixed latency and, being a kernel, the preset's per-kernel floor; over one device nothing."""
    v = 1e9
    eta, latency = H100.efficiency.net("nvlink", "AllGather")
    got = collective_seconds(H100, "AllGather", v, 8, "A=8", "A")
    assert got == pytest.approx(latency + v * 7 / 8 / (eta * H100.ici_one_way) + H100.efficiency.t_kernel, rel=1e-6)
    assert collective_seconds(H100, "AllReduce", v, 8, "A=8", "A") > got
    assert collective_seconds(V5P, "AllGather", v, 1, "A=1", "A") == 0


def test_tensor_parallelism_on_a_tpu_slice_uses_ici():
    run = Run(LLAMA, V5P, tp=4, dp=4, sequences=16, seq=4096)
    assert (run.tp_link, run.dp_link) == ("ici", "ici")
    assert run.layer()["tp_comms"] > 0
