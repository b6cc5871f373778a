"""Per-kernel floors: every kernel pays the preset's ``t_kernel`` beside its work, kernels are counted from
the plan's steps under the fusion policy, and a collective's latency is never hidden; the presets' achieved
figures carry their sources; and the LLaMA 3 8B decode point is predicted from them.
"""
import pytest

import symcost
from symcost.env import Env
from symcost.hardware import hardware
from symcost.mesh import parse_mesh
from symcost.pricing import kernel_starts, op_cost, totals

LAYER = open("examples/llama3_8b_decode_layer.sc").read()
DIMS_8B = "B=1,T=1,S=1024,D=4096,K=8,G=4,H=128,F=14336"
HEAD = "Logits[B, T, V] = X[B, T, D] *_D Wu[D, V]"


def _decode_8b(hw: str) -> float:
    """LLaMA 3 8B decode, batch 1, context 1024, one chip: 32 layers and the unembedding, each derived
    by the engine and priced with the preset's achieved figures and its per-kernel floor."""
    layer = symcost.derive(LAYER, hw=hw, dims=DIMS_8B, efficiency=True)
    head = symcost.derive(HEAD, hw=hw, dims="B=1,T=1,D=4096,V=128256", efficiency=True)
    return 32 * layer.numeric()["t_step"] + head.numeric()["t_step"]


def test_llama3_8b_decode_on_one_h100_is_within_ten_percent_of_the_measured_7_04_ms():
    """Measured: 7.04 ms a token (bf16, batch 1, context 1024, one H100 SXM, CUDA graphs). The stock h100
    preset: HBM at 2.90 TB/s (Azure's published STREAM copy) and 4.1 us a kernel (the intercept of a chain
    of matrix-vector kernels measured by symcost calibrate on an H100, docs/devices-measured.md); neither
    figure was taken from this point. The datasheet alone says 4.52 ms."""
    t = _decode_8b("h100")
    assert t == pytest.approx(7.04e-3, rel=0.10)
    assert t == pytest.approx(7.33e-3, rel=0.01)      # the derived value: 32 x 16 kernels + the head


def test_the_decode_layer_has_sixteen_kernels_under_the_fusion_policy():
    """Nine matmuls and seven elementwise kernels: the second norm joins the residual add before it and
    the gate's product joins SiLU; the add after the down projection waits on a matmul, so it is its own."""
    plan = symcost.derive(LAYER, hw="h100", dims=DIMS_8B, efficiency=True)
    starts = kernel_starts([s.cost for s in plan.steps])
    assert sum(starts) == 16
    assert [s.kind for s, k in zip(plan.steps, starts) if not k] == ["RMSNorm", "Mul"]


def test_every_kernel_pays_the_floor_beside_its_work():
    plan = symcost.derive(LAYER, hw="h100", dims=DIMS_8B, efficiency=True)
    work = sum(plan.evaluate(s.seconds) for s in plan.steps)
    assert plan.numeric()["t_step"] == pytest.approx(work + 16 * 4.1e-6, rel=1e-9)
    ideal = symcost.derive(LAYER, hw="h100", dims=DIMS_8B)            # the book's machine: no floor
    assert ideal.numeric()["t_step"] == pytest.approx(ideal.numeric()["t_hbm"], rel=1e-9)


def test_a_collectives_latency_is_not_hidden_under_compute():
    """Tensor-parallel decode on 8 H100s: each AllReduce is latency-bound (26 us, Azure's nccl-tests), and
    under the book's policy its latency still adds to the einsums' stream instead of hiding under it."""
    text = "In[B, D] *_D W1[D, F_Y] *_F W2[F_Y, D] -> Out[B, D]"
    plan = symcost.derive(text, mesh="Y=8", dims="B=1,D=8192,F=28672", hw="h100", efficiency=True)
    ar = next(s for s in plan.steps if s.kind == "AllReduce")
    lat = plan.evaluate(ar.cost.latency)
    assert lat >= 26e-6
    local = sum(plan.evaluate(s.seconds) + 4.1e-6 for s in plan.steps if s.is_compute)
    assert plan.numeric()["t_step"] >= local + lat + 4.1e-6 - 1e-12


def test_a_collective_over_one_device_costs_nothing():
    from symcost.collectives import Move
    from symcost.layout import Layout
    env = Env.numeric(parse_mesh("Y=1"), {"B": 8, "D": 4096}, efficiency=hardware("h100").efficiency)
    a = Layout.of("A", "BD", unreduced=("Y",))
    c = op_cost(Move("AllReduce", ("Y",), a, Layout.of("A", "BD")), env)
    assert c.seconds == 0 and c.kernel == ""
    assert totals([c], env, "step").t_step == 0


@pytest.mark.parametrize("name,hbm", [("h100", 2.90e12), ("h200", 4.01e12), ("a100", 1.80e12)])
def test_gpu_presets_carry_an_achieved_hbm_bandwidth_with_its_source(name, hbm):
    hw = hardware(name)
    assert hw.hbm_bandwidth * hw.efficiency.hbm == pytest.approx(hbm, rel=0.01)
    src = dict(hw.sources)
    assert "HBM" in src["efficiency"]
    if hw.efficiency.t_kernel:
        assert "symcost calibrate" in src["efficiency.t_kernel"]


def test_a_preset_with_a_bad_floor_names_the_field(tmp_path):
    from symcost.errors import UsageError
    from symcost.hardware.efficiency import parse_efficiency
    with pytest.raises(UsageError, match="efficiency.t_kernel"):
        parse_efficiency({"t_kernel": -1.0}, "x.toml")
