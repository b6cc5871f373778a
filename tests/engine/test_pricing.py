"""One pricing function: the ranker's total of a plan and the plan's own T_step are the same number."""
import pytest
import sympy as sp
from hypothesis import HealthCheck, given, settings

import symcost
from symcost.binding import bind
from symcost.planner import ranker_for
from symcost.pricing import OVERLAPS
from symcost.testing import chain_cases, einsum_cases

from conftest import examples


def _check(case, overlap):
    text, mesh, sizes = case
    plan = symcost.derive(text, mesh=mesh, dims=sizes, hw="tpu-v5p", overlap=overlap)
    ranker = ranker_for(bind(text, mesh, sizes, "tpu-v5p"), overlap=overlap)
    assert ranker.total([s.op for s in plan.steps]) == pytest.approx(plan.evaluate(plan.t_step), rel=1e-9)


@given(einsum_cases())
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_rankers_total_is_the_plans_step_time(case):
    for overlap in (True, False, "step"):
        _check(case, overlap)


@pytest.mark.slow
@given(chain_cases())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_rankers_total_is_the_plans_step_time_for_chains(case):
    _check(case, True)


def test_overlap_policies_on_a_known_plan():
    """Megatron on 4x4 v5p at B=1024: the book's policy overlaps everything, 'step' runs the einsums one
    after another beside the collectives, 'none' adds every step."""
    text = "In[B_X, D_Y] *_D Win[D, F_Y] *_F Wout[F_Y, D] -> Out[B_X, D_Y]"
    times = {o: symcost.derive(text, mesh="X=4,Y=4", dims="B=1024,D=8192,F=32768", hw="tpu-v5p", overlap=o)
             for o in OVERLAPS}
    flops = 2 * 2 * 1024 * 8192 * 32768 / 16
    math_ = flops / 4.59e14
    comms = 2 * 2 * 1024 * 8192 / 4 / 1.8e11       # AllGather_Y(In) + ReduceScatter_Y(Out), V = 2BD/X
    t = {o: p.evaluate(p.t_step) for o, p in times.items()}
    assert t["program"] == pytest.approx(max(math_, comms, times["program"].evaluate(times["program"].t_hbm)))
    assert t["program"] <= t["step"] <= t["none"]
    assert t["none"] == pytest.approx(sum(times["none"].evaluate(s.seconds) for s in times["none"].steps))


def test_critical_policy_runs_off_path_collectives_beside_the_critical_path():
    """FSDP backward: the weight gathers and gradient reductions (off the critical path) run beside the
    einsums; every policy's step time comes from the one pricing function."""
    plan = symcost.derive(open("derivations/fsdp.sc").read(), mesh="X=8", dims="B=65536,D=8192,F=32768",
                          hw="tpu-v5p", backward=True, overlap="critical")
    path = sum(plan.evaluate(s.seconds) for s in plan.steps if s.critical)
    beside = sum(plan.evaluate(s.seconds) for s in plan.steps if not s.critical)
    assert plan.evaluate(plan.t_step) == pytest.approx(max(path, beside))
    assert any(not s.critical for s in plan.steps) and any(s.critical for s in plan.steps)


MEGATRON = "In[B_X, D_Y] *_D Win[D, F_Y] *_F Wout[F_Y, D] -> Out[B_X, D_Y]"


def test_achieved_efficiency_is_kept_as_symbols_and_bound_from_the_preset():
    import sympy as sp
    from symcost import symbols
    ideal = symcost.derive(MEGATRON, mesh="X=2,Y=4", dims="B=2048,D=12288,F=49152", hw="a100")
    real = symcost.derive(MEGATRON, mesh="X=2,Y=4", dims="B=2048,D=12288,F=49152", hw="a100", efficiency=True)
    names = {s.name for s in real.t_step.free_symbols}
    assert {"eta_math", "eta_hbm", "eta_net_nvlink", "T_net_nvlink"} <= names
    assert not {s.name for s in ideal.t_step.free_symbols} & set(symbols.EFFICIENCY_SYMBOLS)
    # every matmul here is larger than the preset's table (85.9 % of peak), and each device's two matmuls
    # have a [1024, 12288] output: 4 x 96 tiles of 256 x 128, 384 tiles in 4 waves of 108 SMs
    assert real.evaluate(real.t_math) == pytest.approx(ideal.evaluate(ideal.t_math) / (0.859 * 384 / 432))
    # a collective: bandwidth term over 0.68 of NVLink (nccl-tests' bus bandwidth on 8 x A100), plus 10 us
    ag = next(s for s in real.steps if s.kind == "AllGather")
    ag0 = next(s for s in ideal.steps if s.kind == "AllGather")
    assert real.evaluate(ag.seconds) == pytest.approx(ideal.evaluate(ag0.seconds) / 0.68 + 1e-5)
    assert sp.Symbol("eta_net_nvlink", positive=True) in ag.seconds.free_symbols
    assert real.to_dict()["efficiency"] == "achieved" and ideal.to_dict()["efficiency"] == "ideal"


@pytest.mark.parametrize("efficiency", [False, True])
def test_a_collective_over_an_axis_of_one_device_costs_nothing(efficiency):
    """Over a mesh axis of one device nothing is sent and no kernel runs: the closed form prices such a
    collective at zero, as the numbers do (with the h100 preset's achieved figures it carried the NVLink
    fixed latency, 26 us, and a per-kernel floor, 4.1 us)."""
    plan = symcost.derive("Xn[B, T, D] = Xn[B, T_Y, D]\nY[B, T_Y, D] = Xn[B, T, D] *_D W[D, F] *_F V[F, D]",
                          mesh="Y=1", dims="B=4,T=2048,D=4096,F=4096", hw="h100", efficiency=efficiency)
    moves = [s for s in plan.steps if s.is_collective]
    assert moves and all(sp.sympify(s.cost.seconds) == 0 and sp.sympify(s.cost.t_comms) == 0 for s in moves)
    num = plan.numeric()
    assert num["t_comms"] == 0
    assert num["t_step"] == pytest.approx(plan.numbers().t_step, rel=1e-12)    # the closed form and the numbers


def test_a_preset_without_efficiency_data_is_the_ideal_machine():
    a = symcost.derive(MEGATRON, mesh="X=4,Y=4", dims="B=1024,D=8192,F=32768", hw="tpu-v5p")
    b = symcost.derive(MEGATRON, mesh="X=4,Y=4", dims="B=1024,D=8192,F=32768", hw="tpu-v5p", efficiency=True)
    assert b.evaluate(b.t_step) == pytest.approx(a.evaluate(a.t_step))
