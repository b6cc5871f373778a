"""Elementwise work in the notation and the engine: norms, activations, softmax, residual adds, dropout --
priced as HBM bytes and vector FLOPs, differentiated by rule, and the activations their backward reads."""
import pytest
import sympy as sp

import symcost
from symcost import symbols
from symcost.cli import main
from symcost.errors import NotationError, ShardingError, SymcostError

from conftest import MLP_BLOCK

B, T, D, F, Y = (sp.Symbol(n, positive=True, integer=True) for n in "BTDFY")


def test_layernorm_is_priced_as_bytes_and_vector_flops():
    plan = symcost.derive("Xn[B, T_Y, D] = LayerNorm_D(X[B, T_Y, D])", mesh="Y")
    (step,) = plan.steps
    assert step.is_elementwise and not step.is_einsum and not step.is_collective
    assert sp.simplify(step.bytes - 4 * B * T * D / Y) == 0           # reads X, writes Xn, 2 bytes each
    assert sp.simplify(step.cost.vector_flops - 8 * B * T * D / Y) == 0
    assert step.seconds == sp.Max(8 * B * T * D / (Y * symbols.C_vec), 4 * B * T * D / (Y * symbols.W_hbm))
    assert plan.flops == 0                                              # matmul FLOPs only


def test_a_norm_needs_its_dimension_whole():
    plan = symcost.derive("P[B, S] = Softmax_S(A[B, S_Y])", mesh="Y=4")
    assert [s.kind for s in plan.steps] == ["AllGather", "Softmax"]
    with pytest.raises(ShardingError, match="needs S whole on each device"):
        symcost.derive("P = Softmax_S(A[B, S_Y])", mesh="Y=4")


@pytest.mark.parametrize("text, words", [
    ("P = Softmux_S(A[B, S])", "unknown operation 'Softmux'"),
    ("P = Add(A[B, S])", "Add takes 2 operands, not 1"),
    ("P = GeLU_S(A[B, S])", "GeLU works on each element; it takes no dimension"),
    ("P = LayerNorm_Q(A[B, S])", "has no dimension Q"),
    ("P[B, Q] = GeLU(A[B, S])", "only View, Rotary and TopK rename dimensions"),
])
def test_bad_elementwise_statements_say_why(text, words):
    with pytest.raises(SymcostError, match=words):
        symcost.derive(text)


def test_bad_syntax_points_at_the_text():
    with pytest.raises(NotationError) as e:
        symcost.derive("P = Softmax_{S,T}(A[B, S, T])")
    assert "one dimension" in str(e.value) and "^" in str(e.value)


def test_partial_sums_are_reduced_before_nonlinear_work_and_pass_through_linear_work():
    prog = "Z[B, D]{U_Y} = G[B, F_Y] *_F W[F_Y, D]\nZg = GeLU(Z[B, D])"
    assert [s.kind for s in symcost.derive(prog, mesh="Y=4").steps] == ["Einsum", "AllReduce", "GeLU"]
    lin = symcost.derive("Z[B, D]{U_Y} = G[B, F_Y] *_F W[F_Y, D]\nZd = Dropout(Z[B, D])", mesh="Y=4")
    assert [s.kind for s in lin.steps] == ["Einsum", "Dropout"] and lin.steps[-1].op.output.unreduced == {"Y"}


LAYER = MLP_BLOCK


def test_backward_reads_what_each_rule_saves():
    """The MLP block of Korthikanti et al. 2022 (section 4.1): LayerNorm input 2sbh, linear inputs 2sbh and
    8sbh, GeLU input 8sbh, dropout mask sbh = 21 sbh bytes, with F = 4 D."""
    plan = symcost.derive(LAYER, mesh="Y=1", backward=True, dims={"F": 4 * 1024, "D": 1024})
    saved = {l.name: l for l in plan.residuals}
    assert set(saved) == {"X", "Xn", "U", "G", "Zd_mask"}
    acts = dict(plan.memory)["activations"]
    assert sp.simplify(acts - 21 * B * T * 1024) == 0
    kinds = [s.kind for s in plan.steps if s.phase == "backward"]
    assert kinds.count("Dropout") == 1 and kinds.count("GeLU") == 1 and kinds.count("LayerNorm") == 1
    assert "Add" not in kinds                       # a residual add passes the gradient through


def test_a_tensor_read_twice_reduces_its_gradient_once():
    """Megatron's g operator: the gradient contributions of a tensor feeding two tensor-parallel matmuls
    add up as partial sums and are all-reduced once."""
    prog = """
    param Wa[D, F_Y], Wb[D, F_Y]
    Xn[B, D] = LayerNorm_D(X[B, D])
    A[B, F_Y] = Xn[B, D] *_D Wa[D, F_Y]
    C[B, F_Y] = Xn[B, D] *_D Wb[D, F_Y]
    Out = Add(A[B, F_Y], C[B, F_Y])
    """
    plan = symcost.derive(prog, mesh="Y=8", backward=True)
    back = [s for s in plan.steps if s.phase == "backward" and s.is_collective]
    assert [(s.kind, s.tensor) for s in back] == [("AllReduce", "dXn")]


def test_elementwise_statements_print_and_render():
    plan = symcost.derive(LAYER, mesh="Y=4", backward=True)
    text = str(plan)
    assert "GeLU(U[B, T, F_Y]) -> G[B, T, F_Y]" in text and "vector flops" in text
    assert r"\mathrm{LayerNorm}_{D}" in plan.to_latex()
    from symcost.simulate import check_plan     # forward and backward run on the simulator, gradients checked
    out = check_plan(plan, {"B": 8, "T": 8, "D": 8, "F": 8})
    assert {"dX", "dW1", "dW3"} <= set(out)


def test_cli_derives_elementwise(capsys):
    assert main(["derive", "Xn[B, T_Y, D] = LayerNorm_D(X[B, T_Y, D])", "--mesh", "Y=4", "--json"]) == 0
    assert '"kind": "LayerNorm"' in capsys.readouterr().out


def test_tpu_vector_units_are_the_books_and_elementwise_work_stays_hbm_bound():
    """Book Part 2 (pop quiz, VPU throughput): a v5p TensorCore issues 4 vector instructions a cycle over
    8 x 128 ALUs, two cores at 1.75 GHz: 1.4e13 FLOPs/s, about 5 FLOPs per HBM byte. A LayerNorm does 8 an
    element over 4 bytes, so it is priced at its bytes; the vector time is there and smaller."""
    v5p = symcost.hardware("tpu-v5p")
    assert v5p.vector_flops == pytest.approx(8 * 128 * 4 * 2 * 1.75e9, rel=0.03)   # the book rounds 1.43e13
    assert symcost.hardware("tpu-v5e").vector_flops == pytest.approx(8 * 128 * 4 * 1.5e9, rel=0.01)
    plan = symcost.derive("Xn[B, T_Y, D] = LayerNorm_D(X[B, T_Y, D])", mesh="Y=4", dims="B=8,T=4096,D=8192",
                          hw="tpu-v5p")
    n = 8 * 4096 * 8192 / 4
    (step,) = plan.steps
    subs = plan.bindings()
    assert float(step.cost.vector_flops.xreplace(subs)) / v5p.vector_flops == pytest.approx(8 * n / 1.4e13, rel=0.01)
    assert float(step.seconds.xreplace(subs)) == pytest.approx(4 * n / v5p.hbm_bandwidth)
