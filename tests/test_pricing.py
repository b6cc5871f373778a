"""One pricing function: the ranker's total of a plan and the plan's own T_step are the same number."""
import pytest
from hypothesis import HealthCheck, given, settings

import symcost
from symcost.binding import bind
from symcost.planner import ranker_for
from symcost.pricing import OVERLAPS
from symcost.testing import chain_cases, einsum_cases


def _check(case, overlap):
    text, mesh, sizes = case
    plan = symcost.derive(text, mesh=mesh, dims=sizes, hw="tpu-v5p", overlap=overlap)
    ranker = ranker_for(bind(text, mesh, sizes, "tpu-v5p"), overlap=overlap)
    assert ranker.total([s.op for s in plan.steps]) == pytest.approx(plan.evaluate(plan.t_step), rel=1e-9)


@given(einsum_cases())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
