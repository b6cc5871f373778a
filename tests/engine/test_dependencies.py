"""A step is hidden only under work it does not depend on: the step time is at least the time of every
pair of steps where one reads what the other wrote (the plan's dependency graph, ``dependencies.depends_on``).

Under the book's ``program`` policy an einsum is split into chunks (collective matmul, Part 3), so the
collectives that feed it or read its result overlap with it; collectives that feed each other do not.
Under ``step`` every dependency counts, a collective next to an einsum with its latency (no chunking hides
a collective's latency; its bandwidth term may run beside the chunks): a tensor-parallel AllReduce at
decode, latency-bound, adds to the einsums around it.
"""
import pytest
from hypothesis import HealthCheck, given, settings

import symcost
from symcost.dependencies import depends_on
from symcost.testing import einsum_cases, reshard_cases

from conftest import examples

CHAIN = "A[I_X, J] * B[J, K] -> C[I_Y, K]"


def _reaches(costs, deps, j, through_views: bool):
    """The steps ``j`` depends on: directly, or (``through_views``) through views (a local slice)."""
    out, todo = set(), list(deps[j])
    while todo:
        i = todo.pop()
        if i in out:
            continue
        out.add(i)
        if through_views and costs[i].kernel == "":
            todo.extend(deps[i])
    return out


def _pairs(plan, policy):
    costs = [s.cost for s in plan.steps]
    deps = depends_on(costs)
    for j, c in enumerate(costs):
        for i in _reaches(costs, deps, j, policy == "program"):
            if policy == "program" and (c.kernel != "collective" or costs[i].kernel != "collective"):
                continue
            yield plan.steps[i], plan.steps[j]


def _weight(plan, step, other):
    """What of ``step`` cannot hide under ``other`` when one depends on the other."""
    if step.is_collective and not other.is_collective:
        return plan.evaluate(step.cost.latency)
    return plan.evaluate(step.seconds)


def _check(plan, policy):
    t = plan.evaluate(plan.t_step)
    for a, b in _pairs(plan, policy):
        assert t >= (_weight(plan, a, b) + _weight(plan, b, a)) * (1 - 1e-9), (a.signature(), b.signature())


@given(einsum_cases())
@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_no_step_is_hidden_under_a_step_it_depends_on(case):
    text, mesh, sizes = case
    for policy in ("program", "step"):
        _check(symcost.derive(text, mesh=mesh, dims=sizes, hw="tpu-v5p", overlap=policy), policy)


@given(reshard_cases())
@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_reshards_collectives_feeding_each_other_add_up(case):
    text, mesh, sizes = case
    _check(symcost.derive(text, mesh=mesh, dims=sizes, hw="tpu-v5p"), "program")


def test_a_chain_of_collectives_is_a_sum():
    """AllToAll_XY -> AllToAll_Y -> AllGather_X, each reading the one before, is the sum of the three. On the
    16-chip v5p slice (X spans two torus dimensions' links, neither wraps) they cost 93 + 93 + 140 us by
    link loads (on a one-link ring they were 140 + 140 + 280 us, priced 419 us as overlapping, and chosen
    over plans of 559 us); the best plan gathers less: AllToAll_X -> AllToAll_XY -> AllGather_X, 280 us."""
    plan = symcost.derive(CHAIN, mesh="X=4,Y=4", dims="I=8192,J=8192,K=8192", hw="tpu-v5p")
    chain = next(a for a in plan.alternatives
                 if [s.label for s in a.steps if s.is_collective] == ["AllToAll_XY", "AllToAll_Y", "AllGather_X"])
    colls = [plan.evaluate(s.seconds) for s in chain.steps if s.is_collective]
    assert [round(c * 1e6) for c in colls] == [93, 93, 140]
    assert plan.evaluate(chain.t_step) == pytest.approx(sum(colls), rel=1e-9)
    assert plan.evaluate(plan.t_step) == pytest.approx(279.6e-6, rel=1e-3)   # no plan of this einsum is cheaper
    assert plan.evaluate(plan.t_step) <= plan.evaluate(chain.t_step) + 1e-12


def test_a_tensor_parallel_allreduce_adds_to_the_einsums_around_it():
    """``step`` policy: the AllReduce of Out reads the einsum's partial sums, and at decode (8 tokens) it is
    latency-bound: its time adds to the einsums'."""
    plan = symcost.derive("In[B, D] *_D Win[D, F_Y] *_F Wout[F_Y, D] -> Out[B, D]", mesh="Y=8",
                          dims="B=8,D=8192,F=28672", hw="h100", overlap="step")
    ar = next(s for s in plan.steps if s.kind == "AllReduce")
    assert plan.evaluate(ar.cost.latency) == pytest.approx(plan.evaluate(ar.seconds))     # latency-bound
    local = sum(plan.evaluate(s.seconds) for s in plan.steps if s.is_compute)
    assert plan.evaluate(plan.t_step) == pytest.approx(local + plan.evaluate(ar.seconds), rel=1e-9)


@given(reshard_cases())
@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_chains_are_traced_where_a_group_of_collectives_could_exceed_the_step(case):
    """``totals`` traces chains of collectives only where a group of collectives that feed each other sums
    to more than the step: the step time is the same, to the bit, as when every chain is traced."""
    from symcost import dependencies, pricing
    from symcost.env import Env
    text, mesh, sizes = case
    plan = symcost.derive(text, mesh=mesh, dims=sizes, hw="tpu-v5p")
    costs = plan.step_costs()
    env = Env.numeric(plan.mesh)
    t = pricing.totals(costs, env).t_step
    every = max([t, *dependencies.collective_chains(costs, depends_on(costs), env)])
    assert t == every


def test_a_group_of_collectives_that_feed_each_other_is_summed():
    from symcost.dependencies import chains_may_exceed
    from symcost.pricing import OpCost

    def coll(reads, writes, t):
        return OpCost(0, 0, 0, 0, t, t, ("X",), False, t, t, reads=reads, writes=writes, kernel="collective")
    fed = [coll(("a",), ("b",), 1.0), coll(("b",), ("c",), 1.5)]              # one feeds the other: 2.5
    apart = [coll(("a",), ("b",), 1.0), coll(("x",), ("y",), 1.5)]            # each on its own: 1.5 at most
    assert chains_may_exceed(fed, 2.0) and not chains_may_exceed(fed, 2.5)
    assert not chains_may_exceed(apart, 2.0)
    einsum = OpCost(1, 1, 1, 1, 0, 0, (), True, 0, 1, reads=("b",), writes=("b2",), kernel="einsum")
    broken = [fed[0], einsum, coll(("b2",), ("c",), 1.5)]                      # an einsum between them
    assert not chains_may_exceed(broken, 2.0)
