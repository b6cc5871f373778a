"""Closed forms as NumPy functions (symcost.numeric): the same numbers as SymPy, for every closed form a
search produces and for each kind of node."""
import numpy as np
import pytest
import sympy as sp

from symcost.searching import search
from symcost.searching.price import curve
from symcost.numeric import numpy_function, over

B, D, W = sp.symbols("B D W_ici", positive=True)
XS = np.array([3.0, 1000.0, 65536.0, 2.5e8])


def _sympy(expr, x):
    return float(expr.xreplace({B: x, D: 8192, W: 9e10}))


@pytest.mark.parametrize("expr", [
    sp.Max(2 * B * D / W, 16 * sp.Rational(1, 10 ** 6)) + 3 * sp.Max(D / W, B / 7),
    sp.Min(B, D) / (B + 1),
    sp.ceiling(B / 3) * D + sp.floor(D / (B + 2)),
    sp.sqrt(B) * D ** sp.Rational(3, 2) / W,
    B ** -2 + B ** 3 / W ** 2,
    -B / D + 5,
    sp.log(B) * sp.exp(1 / B),
    B,
    sp.sin(B / D) + 1,                  # no node of its own: compiled by lambdify, the same numbers
])
def test_each_kind_of_node_evaluates_as_sympy(expr):
    names, fn = numpy_function(expr)
    assert list(names) == sorted(s.name for s in expr.free_symbols)
    values = {"B": XS, "D": 8192.0, "W_ici": 9e10}
    got = np.broadcast_to(fn(*(values[n] for n in names)), XS.shape)
    assert list(got) == pytest.approx([_sympy(expr, x) for x in XS], rel=1e-12)


def test_a_constant_is_broadcast_over_the_values():
    assert list(curve(sp.Integer(7), {}, "B", XS)) == [7.0] * 4


def test_a_symbol_without_a_number_is_named():
    assert over(B * D, {"W_ici": 1.0}, "B", XS) is None
    with pytest.raises(ValueError, match="unbound symbol D"):
        curve(B * D / W, {W: 9e10}, "B", XS)


@pytest.mark.slow
def test_every_closed_form_of_a_search_evaluates_as_sympy():
    """Step time, communication and memory of every candidate of a forward + backward search, at four
    values of B (latency floors at the small ones), equal SymPy's substitution (rel 1e-12)."""
    r = search("param W_in[D, F], W_out[F, D]\nOut[B, D] = In[B, D] *_D W_in[D, F] *_F W_out[F, D]",
               "X=4,Y=2", "B=65536,D=8192,F=32768", "tpu-v5p", backward=True)
    checked = 0
    for p in r.ranked:
        subs = p.plan.bindings()
        others = {k: v for k, v in subs.items() if k.name != "B"}
        for expr in (p.plan.t_step, p.plan.t_comms, p.memory_expr):
            e = sp.sympify(expr).xreplace(others)
            want = [float(e.xreplace({s: x for s in e.free_symbols})) for x in XS]
            assert list(curve(expr, subs, "B", XS)) == pytest.approx(want, rel=1e-12)
            checked += 1
    assert checked == 3 * r.priced and r.priced == 81      # 9 roles an axis, X and Y not interchangeable


@pytest.mark.parametrize("hw, efficiency", [("tpu-v5p", False), ("h100", True), ("a100", True)])
@pytest.mark.parametrize("backward", [False, True])
def test_a_plans_numeric_totals_are_its_closed_forms_at_its_numbers(hw, efficiency, backward):
    """``Plan.numeric()`` (the ``numeric`` key of ``derive --json``) is taken from the plan's numbers where
    every size is bound; it is each closed form of ``Plan.totals`` evaluated by SymPy, and says nothing of
    the totals where a size is unbound (no SymPy rebuild of the closed form to find that out)."""
    from symcost.program import derive_program
    text = "param W1[D, F_Y], W2[F_Y, D]\nH[B_X, F_Y] = In[B_X, D] *_D W1[D, F_Y]\nOut[B_X, D] = H[B_X, F_Y] *_F W2[F_Y, D]"
    plan = derive_program(text, mesh="X=4,Y=2", dims="B=65536,D=8192,F=32768", hw=hw, backward=backward,
                          efficiency=efficiency)
    numeric = plan.numeric()
    assert set(numeric) == {"flops", "t_math", "t_hbm", "t_comms", "t_step"}
    for k, expr in plan.totals.as_dict().items():
        assert numeric[k] == pytest.approx(float(expr.xreplace(plan.bindings())), rel=1e-12)
    unbound = derive_program(text, mesh="X=4,Y=2", dims="B=65536", hw=hw, backward=backward, efficiency=efficiency)
    assert unbound.numeric() == {} and unbound.evaluate(unbound.t_step) is None
