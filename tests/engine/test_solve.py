"""The compute-bound condition's fast path (two times whose balance is linear in the solved size ``s``, as
most of a plan's are: ``a s = b``, ``a s = b s + c``, ``a / s = b``) agrees with SymPy's ``solve``, in the
form printed."""
import sympy as sp
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from symcost import solve as S

from conftest import examples

B, D, F, C, W, X, Y = sp.symbols("B D F C W X Y", positive=True)
TERMS = [D / (C * X), F / (W * Y), D * F / W, 2 * D * F / (C * X * Y), D / W, F * X / C, 1 / W]
RELATIONS = [sp.Ge, sp.Gt, sp.Le, sp.Lt]


def _by_solve(ineq, sym):
    """The general path of :func:`symcost.solve._at_root`: SymPy's root of ``lhs / rhs = 1`` and the sign of
    the ratio's slope."""
    ratio = sp.cancel(ineq.lhs / ineq.rhs)
    (root,) = [r for r in sp.solve(sp.Eq(ratio, 1), sym) if r.is_positive is not False]
    growing = sp.cancel(sp.diff(ratio, sym) / ratio).is_positive
    up = growing == isinstance(ineq, (sp.GreaterThan, sp.StrictGreaterThan))
    strict = isinstance(ineq, (sp.StrictGreaterThan, sp.StrictLessThan))
    root = sp.factor(root)
    return (sp.Gt if strict else sp.Ge)(sym, root) if up else (sp.Lt if strict else sp.Le)(sym, root)


@st.composite
def balances(draw):
    """A size ``B`` times (or over) a sum of a plan's kind of terms, against another such sum, or against
    ``B`` times a sum plus a sum (a time with a part that does not grow with ``B``)."""
    pick = st.lists(st.tuples(st.integers(1, 4), st.sampled_from(TERMS)), min_size=1, max_size=3)
    top, bottom, fixed = (sp.Add(*(k * t for k, t in draw(pick))) for _ in range(3))
    shape = draw(st.sampled_from(["times", "over", "affine"]))
    top = top / B if shape == "over" else top * B
    if shape == "affine":
        bottom = bottom * B + fixed
    relation = draw(st.sampled_from(RELATIONS))
    return relation(top, bottom) if draw(st.booleans()) else relation(bottom, top)


SIZES = st.sampled_from([sp.Rational(n, d) for n in (1, 3, 7, 64, 1000) for d in (1, 8, 97)])


@given(balances(), st.lists(SIZES, min_size=7, max_size=7), st.lists(SIZES, min_size=3, max_size=3))
@settings(max_examples=examples(40), deadline=None)
def test_a_balance_linear_in_the_size_holds_where_its_solution_says(ineq, sizes, batches):
    """Whatever the other sizes, the solved condition holds exactly where the balance does: at every size
    drawn (exact rationals). ``B >= root`` alone read "always" for ``a B >= b B + c`` with ``a < b`` (the
    root negative): T_math against T_hbm grows with the batch towards a ratio below 1 and never reaches it."""
    assume(isinstance(ineq, sp.core.relational.Relational))     # not a comparison SymPy settles at once
    ratio = sp.cancel(ineq.lhs / ineq.rhs)
    assume(S._linear_root(*sp.fraction(ratio), B) is not None)   # not where B cancels out of the balance
    cond = S._at_root(ineq, B)
    others = dict(zip((D, F, C, W, X, Y), sizes))
    for b in batches:
        at = {**others, B: b}
        assert bool(cond.subs(at)) == bool(ineq.subs(at)), (cond, at)


@given(balances())
@settings(max_examples=examples(40), deadline=None)
def test_a_balance_with_a_slope_of_known_sign_is_solved_as_sympy_solves_it(ineq):
    """Where the balance's slope in the size has a known sign, the fast path's answer is SymPy's root on the
    side the ratio's growth gives, in the form printed."""
    assume(isinstance(ineq, sp.core.relational.Relational))
    num, den = sp.fraction(sp.cancel(ineq.lhs / ineq.rhs))
    assume(S._linear_root(num, den, B) is not None)
    slope = sp.expand(num - den).diff(B)
    assume(slope.is_positive or slope.is_negative)
    try:
        expected = _by_solve(ineq, B)
    except ValueError:                           # no positive root: the condition is settled
        assert S._at_root(ineq, B) in (sp.true, sp.false)
        return
    assert str(S._at_root(ineq, B)) == str(expected)


def test_a_balance_whose_slope_depends_on_the_other_sizes_says_so():
    """T_math = B D F / C against T_hbm = (B D + B F + D F) / W: compute-bound only where D F W > C (D + F),
    and then above the root."""
    cond = S._at_root(sp.Ge(B * D * F / C, (B * D + B * F + D * F) / W), B)
    assert str(cond) == "(D*F*W > C*D + C*F) & (B >= -C*D*F/(C*D + C*F - D*F*W))"
    small = {D: 16, F: 16, C: 990, W: 3}
    assert cond.subs(small) == sp.false and sp.Ge(B * D * F / C, (B * D + B * F + D * F) / W).subs(
        {**small, B: 10 ** 9}) == sp.false


def test_a_balance_of_another_shape_is_left_to_sympy():
    assert S._linear_root(B * B, C, B) is None and S._linear_root(C, D, B) is None
    assert S._at_root(sp.Ge(B * B / C, D / W), B) == sp.Ge(B, sp.sqrt(C) * sp.sqrt(D) / sp.sqrt(W))


def test_compute_bound_when_a_ratio_is_a_size_times_a_constant():
    """t_math = 2BDF/(CXY) against t_comms = 2DF/(W Y): compute-bound where B >= C X / W (book Part 3)."""
    assert S.solve_inequality(sp.Ge(2 * B * D * F / (C * X * Y), 2 * D * F / (W * Y)), B) == sp.Ge(B, C * X / W)
    assert S.solve_inequality(sp.Ge(D * F / (W * B), D / C), B) == sp.Le(B, C * F / W)
