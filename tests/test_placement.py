"""Where a run's groups sit: inside the fast domain (a GPU node's NVLink, a TPU pod's ICI) where they fit,
over the data-centre network otherwise; and what a collective costs on each."""
import pytest

from symcost.hardware import hardware
from symcost.models.config import load_model_config
from symcost.models.execution import Run
from symcost.models.placement import collective, link

V5P, H100 = hardware("tpu-v5p"), hardware("h100")
LLAMA = load_model_config("llama3-8b")


def test_groups_stay_in_the_fast_domain_where_they_fit():
    assert (link(H100, 8), link(H100, 9)) == ("nvlink", "dcn")
    pod = 16 * 20 * 28                                     # a v5p pod: 8,960 chips on ICI
    assert (link(V5P, pod), link(V5P, pod + 1)) == ("ici", "dcn")


def test_a_tpu_ring_runs_both_ways_round_one_axis():
    """Book Part 3: an AllGather of V bytes over an ICI axis takes V / W_ici (W_ici both directions)."""
    v = 1e9
    assert collective(V5P, "AllGather", v, 16, "ici") == pytest.approx(v * 15 / 16 / V5P.ici_bandwidth)
    assert collective(V5P, "AllReduce", v, 16, "ici") == pytest.approx(2 * v * 15 / 16 / V5P.ici_bandwidth)
    eta, latency = H100.efficiency.net("nvlink")          # the preset's achieved NVLink fraction
    assert collective(H100, "AllGather", v, 8, "nvlink") == pytest.approx(latency + v * 7 / 8 / (eta * H100.ici_one_way))
    assert collective(V5P, "AllGather", v, 1, "ici") == 0


def test_tensor_parallelism_on_a_tpu_slice_uses_ici():
    run = Run(LLAMA, V5P, tp=4, dp=4, sequences=16, seq=4096)
    assert (run.tp_link, run.dp_link) == ("ici", "ici")
    v = 2 * 4096 * 1 * LLAMA.D                             # one microbatch's [s, D] in bf16
    assert run.layer_cost.tp_comms() == pytest.approx(2 * 2 * v * 3 / 4 / V5P.ici_bandwidth)
