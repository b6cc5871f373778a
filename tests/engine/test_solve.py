"""The solver's fast paths agree with SymPy's ``solve`` (a balance linear in the solved size; a ratio
``c * s`` or ``c / s`` of two times), exactly and in the form printed."""
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from symcost import solve as S

from conftest import examples

B, D, F, C, W, X, Y = sp.symbols("B D F C W X Y", positive=True)
TERMS = [B * D / (C * X), B * F / (W * Y), D * F / W, 2 * B * D * F / (C * X * Y), D / W, F * X / C, B / W]


@st.composite
def linear_balances(draw):
    """Two sums of a plan's kind of terms (sizes over rates), each linear in B."""
    pick = st.lists(st.tuples(st.integers(1, 4), st.sampled_from(TERMS)), min_size=1, max_size=3)
    lhs, rhs = (sp.Add(*(k * t for k, t in draw(pick))) for _ in range(2))
    return lhs, rhs


@given(linear_balances())
@settings(max_examples=examples(40), deadline=None)
def test_a_linear_balance_has_the_root_solve_finds(case):
    """As :func:`~symcost.solve.roots` reads them: the positive roots (SymPy's solve, told B is positive,
    drops B = 0 itself)."""
    lhs, rhs = case
    mine = S.linear_root(lhs, rhs, B)
    theirs = sp.solve(sp.Eq(lhs, rhs), B)
    if mine is None:                       # B cancels (the same B terms on both sides) or is absent
        assert sp.diff(lhs - rhs, B) == 0 and theirs == []
        return
    mine = [mine] if mine.is_positive is not False else []
    assert [str(sp.simplify(r)) for r in mine] == [str(sp.simplify(r)) for r in theirs]


def test_a_balance_not_linear_in_the_size_is_left_to_sympy():
    assert S.linear_root(B * B / C, D / W, B) is None
    assert S.linear_root(B / C, D / (W * B), B) is None
    assert S.roots(B * B / C, D / W, B) == [sp.sqrt(C) * sp.sqrt(D) / sp.sqrt(W)]


def test_compute_bound_when_a_ratio_is_a_size_times_a_constant():
    """t_math = 2BDF/(CXY) against t_comms = 2DF/(W Y): compute-bound where B >= C X / W (book Part 3)."""
    cond = S.solve_inequality(sp.Ge(2 * B * D * F / (C * X * Y), 2 * D * F / (W * Y)), B)
    assert cond == sp.Ge(B, C * X / W)
    assert S.solve_inequality(sp.Ge(D * F / (W * B), D / C), B) == sp.Le(B, C * F / W)
