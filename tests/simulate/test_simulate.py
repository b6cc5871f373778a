"""The simulator is the ground truth: every plan the rewriter emits must reproduce numpy.einsum."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import symcost
from symcost.collectives import Grid, Move, rule
from symcost.layout import Layout
from symcost.mesh import parse_mesh
from symcost.simulate import SimulationError, check_plan, collect, distribute, reference
from symcost.testing import chain_cases, einsum_cases, reshard_cases
from symcost.trace import Step


def run_move(kind, blocks, move, mesh):
    return rule(kind).simulate(blocks, move, Grid(mesh))


def sizes_of(text):
    return {k: int(v) for k, v in (kv.split("=") for kv in text.split(","))}


# ----------------------------------------------------------------- collectives on hand-made blocks


def test_all_gather_gives_every_device_the_array():
    mesh = parse_mesh("X=4")
    a = Layout.of("A", "I", [("X",)])
    x = np.arange(8.0)
    blocks = run_move("AllGather", distribute(x, a, mesh), Move("AllGather", ("X",), a, Layout.of("A", "I")), mesh)
    assert all(np.array_equal(b, x) for b in blocks.values())


def test_all_to_all_moves_the_split():
    mesh = parse_mesh("X=2")
    a, b = Layout.of("A", "IJ", [("X",), ()]), Layout.of("A", "IJ", [(), ("X",)])
    x = np.arange(16.0).reshape(4, 4)
    blocks = run_move("AllToAll", distribute(x, a, mesh), Move("AllToAll", ("X",), a, b), mesh)
    assert np.array_equal(blocks[(0,)], x[:, :2]) and np.array_equal(blocks[(1,)], x[:, 2:])


def test_reduce_scatter_sums_then_splits():
    mesh = parse_mesh("X=2")
    a, b = Layout.of("A", "I", [()], unreduced="X"), Layout.of("A", "I", [("X",)])
    x = np.arange(4.0)
    blocks = run_move("ReduceScatter", distribute(x, a, mesh, np.random.default_rng(3)),
                      Move("ReduceScatter", ("X",), a, b), mesh)
    assert np.allclose(blocks[(0,)], x[:2]) and np.allclose(blocks[(1,)], x[2:])


def test_permute_reorders_major_and_minor():
    mesh = parse_mesh("X=2,Y=2")
    a, b = Layout.of("A", "I", [("X", "Y")]), Layout.of("A", "I", [("Y", "X")])
    x = np.arange(4.0)
    blocks = run_move("Permute", distribute(x, a, mesh), Move("Permute", ("X", "Y"), a, b), mesh)
    assert np.array_equal(collect(blocks, b, mesh, (4,)), x)
    assert blocks[(0, 1)][0] == 2.0  # device x=0, y=1 holds block y*2 + x = 2


def test_a_wrong_move_is_caught():
    mesh = parse_mesh("X=2,Y=2")
    a = Layout.of("A", "I", [("X", "Y")])
    wrong = Layout.of("A", "I", [("Y",)])   # gathering the major axis without a permute
    x = np.arange(8.0)
    blocks = run_move("AllGather", distribute(x, a, mesh), Move("AllGather", ("X",), a, wrong), mesh)
    assert not np.array_equal(collect(blocks, wrong, mesh, (8,)), x)
    plan = symcost.derive("A[I_XY] -> A[I_Y]", mesh="X=2,Y=2", dims="I=8")
    bad = plan.steps[0].op
    forged = type(plan)(plan.expression, plan.mesh, (Step(Move("AllGather", ("X",), a, wrong), plan.mesh),))
    with pytest.raises(SimulationError, match="leaves A wrong"):
        check_plan(forged, {"I": 8})
    assert bad.kind in ("AllGather", "Permute")


# -------------------------------------------------------------------------------- the book's plans


BOOK_PLANS = [
    ("A[I_X, J] * B[J, K_Y] -> C[I_X, K_Y]", "X=2,Y=2", "I=4,J=4,K=4"),                    # Case 1
    ("A[I, J_X] * B[J, K] -> C[I, K]", "X=4", "I=4,J=8,K=4"),                              # Case 2
    ("A[I, J_X] * B[J, K] -> C[I, K]", "X=8", "I=16,J=64,K=8"),                            # Case 2, sliced
    ("A[I, J_X] * B[J_X, K] -> C[I, K]", "X=4", "I=4,J=8,K=4"),                            # Case 3
    ("A[I, J_X] * B[J_X, K] -> C[I, K_X]", "X=4", "I=4,J=8,K=8"),                          # Case 3, RS
    ("A[I_X, J] * B[J, K_X] -> C[I_X, K]", "X=4", "I=8,J=4,K=8"),                          # Case 4
    ("In[B_X, D_Y] *_D Win[D, F_Y] *_F Wout[F_Y, D] -> Out[B_X, D_Y]", "X=2,Y=2", "B=4,D=8,F=8"),
    ("In[B_X, D_Y] *_D Win[D, F_Y] *_F Wout[F_Y, D] -> Out[B_X, D_Y]", "X=2,Y=2,Z=2", "B=8,D=8,F=8"),
    ("A[I_XY, J] -> A[I, J]", "X=2,Y=3", "I=12,J=2"),
    ("A[I_XY, J] -> A[I_Y, J]", "X=2,Y=2", "I=8,J=2"),
    ("AllGather_X(A[I_XY, J]) -> A[I_Y, J]", "X=2,Y=3", "I=12,J=2"),
    ("A[I_X, J] -> A[I, J_X]", "X=4", "I=8,J=8"),
    ("A[I, J]{U_X} * B[J, K] -> C[I, K]", "X=4", "I=4,J=8,K=4"),
    ("In[B_X, D_Y] -> In[B, D]", "X=2,Y=3", "B=4,D=6"),
]


@pytest.mark.parametrize("text, mesh, dims", BOOK_PLANS)
def test_book_plans_reproduce_numpy(text, mesh, dims):
    plan = symcost.derive(text, mesh=mesh, dims=dims)
    sizes = sizes_of(dims)
    rng = np.random.default_rng(0)
    out = check_plan(plan, sizes, rng)
    if "(" not in text:
        stmt = symcost.parse(text).statements[0]
        values = {k: v for k, v in out.items() if k in {t.name for t in stmt.operands}}
        final = stmt.output.name if stmt.output is not None else plan.layouts[-1].name
        assert np.allclose(out[final], reference(text, values))


@pytest.mark.parametrize("path", ["dp", "fsdp", "tp", "fsdp_tp", "dcn_dp", "moe", "context_parallel",
                                  "pipeline", "weight_stationary_2d"])
def test_strategy_programs_run_on_the_simulator(path):
    text = open(f"derivations/{path}.sc").read()
    mesh = {"dcn_dp": "S=2:dcn,X=2", "pipeline": "Z=2", "weight_stationary_2d": "X=2,Y=2,Z=2",
            "context_parallel": "X=2", "moe": "X=2"}.get(path, "X=2,Y=2")
    plan = symcost.derive(text, mesh=mesh, dims="B=8,D=8,F=8,E=2,T=4,N=2,H=2,S=4,L=2")
    sizes = dict(B=8, D=8, F=8, E=2, T=4, N=2, H=2, S=4, L=2)
    check_plan(plan, sizes, np.random.default_rng(1))


# ------------------------------------------------------------------------------------ properties


def _run(case, seed=0):
    text, mesh, sizes = case
    plan = symcost.derive(text, mesh=mesh, dims=sizes)
    out = check_plan(plan, sizes, np.random.default_rng(seed))
    stmt = symcost.parse(text).statements[0]
    names = {t.name for t in stmt.operands}
    final = plan.layouts[-1].name
    assert np.allclose(out[final], reference(text, {k: v for k, v in out.items() if k in names}))
    return plan


@pytest.mark.slow
@given(einsum_cases(oracle=True))
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_einsum_plan_reproduces_numpy(case):
    """The expected result comes from the subscripts the generator drew (an oracle that shares no code
    with the planner or with simulate.reference)."""
    text, mesh, sizes, subscripts = case
    plan = symcost.derive(text, mesh=mesh, dims=sizes)
    out = check_plan(plan, sizes, np.random.default_rng(0))
    expected = np.einsum(subscripts, out["A"], out["B"])
    assert np.allclose(out[plan.layouts[-1].name], expected)
    assert np.allclose(reference(text, {"A": out["A"], "B": out["B"]}), expected)


@pytest.mark.slow
@given(chain_cases())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_chain_plan_reproduces_numpy(case):
    _run(case)


@pytest.mark.slow
@given(reshard_cases())
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_reshard_reproduces_the_array(case):
    _run(case)


@pytest.mark.slow
@given(einsum_cases(oracle=True, uneven=True))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_padded_plans_reproduce_numpy(case):
    """Sizes that do not divide by their axes: blocks are padded (zeros at the end) and plans stay exact."""
    text, mesh, sizes, subscripts = case
    plan = symcost.derive(text, mesh=mesh, dims=sizes)
    out = check_plan(plan, sizes, np.random.default_rng(0))
    assert np.allclose(out[plan.layouts[-1].name], np.einsum(subscripts, out["A"], out["B"]))


@pytest.mark.slow
@given(reshard_cases(uneven=True))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_padded_reshards_reproduce_the_array(case):
    _run(case)


def test_a_padded_gather_on_three_devices():
    plan = symcost.derive("A[I_X, J] -> A[I, J]", mesh="X=3", dims="I=10,J=2")
    x = np.arange(20.0).reshape(10, 2)
    out = check_plan(plan, {"I": 10, "J": 2}, inputs={"A": x})
    assert np.array_equal(out["A"], x) and plan.padding[0].padded == 12


def test_replicas_agree_as_allclose_says():
    """The simulator's check that two replicas of a block agree is ``np.allclose`` at 1e-9 (a NaN disagrees)."""
    from symcost.simulate import _agree
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 5))
    for delta in (0.0, 1e-12, 5e-10, 2e-9, 1e-6, 1.0):
        for b in (a + delta, a - delta * np.abs(a), a * (1 + delta)):
            assert _agree(a, b) == np.allclose(a, b, rtol=1e-9, atol=1e-9)
    b = a.copy()
    b[1, 2] = np.nan
    assert not _agree(a, b) and not _agree(b, b) and not np.allclose(b, b, rtol=1e-9, atol=1e-9)
    assert _agree(a, a.copy()) and not _agree(a, a + 1e-3)
