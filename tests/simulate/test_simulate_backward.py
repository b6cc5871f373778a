"""Backward plans on the simulator: every gradient a plan computes equals the gradient of the forward program
(read from its notation by symcost.reference), laid out as the tensor is, with the sharded parameter and its
gathered copy held side by side."""
import dataclasses
import glob
import os

import numpy as np
import pytest
from hypothesis import given, settings

import symcost
from symcost import arrays, reference
from symcost.simulate import SimulationError, check_plan
from symcost.testing import training_cases
from conftest import MLP_BLOCK as LAYER    # the MLP block with a norm, dropout and a residual

DERIVATIONS = sorted(glob.glob("derivations/*.sc"))


def _grid(text):
    """Each mesh axis the program names at 2 devices, each dimension at 8."""
    plan = symcost.derive(text)
    mesh = {a: 2 for a in plan.mesh.names}
    dims = {d for s in plan.steps for t in (s.op.inputs if hasattr(s.op, "inputs") else (s.op.before,))
            for d in t.dims} | {d for t in plan.layouts for d in t.dims}
    return mesh, {d: 8 for d in dims if not d.isdigit()}


@pytest.mark.parametrize("path", DERIVATIONS, ids=lambda p: os.path.basename(p)[:-3])
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_every_derivation_runs_on_the_simulator(path, backward):
    text = open(path).read()
    mesh, dims = _grid(text)
    plan = symcost.derive(text, mesh=mesh, dims=dims, backward=backward)
    out = check_plan(plan, dims)
    program = symcost.parse(text)
    if backward:   # a gradient for every input and parameter, each checked against the reference inside
        assert {"d" + n for n in reference.inputs(program)} <= set(out)
    else:
        assert reference.results(program) <= set(out)


def test_fsdp_keeps_the_sharded_weight_and_its_gathered_copy():
    """The failure this fixes: FSDP's backward gathers W_out[F, D_X] again while the forward's gathered
    W_out[F, D] is still held; the gradient is reduce-scattered back to W_out's layout."""
    plan = symcost.derive(open("derivations/fsdp.sc").read(), mesh={"X": 2}, dims=dict(B=8, D=8, F=8),
                          backward=True)
    gathers = [s for s in plan.steps if s.kind == "AllGather" and s.tensor == "W_out"]
    assert [s.phase for s in gathers] == ["forward", "backward"]
    rng = np.random.default_rng(3)
    x, w_in, w_out, g = (rng.standard_normal(s) for s in [(8, 8), (8, 8), (8, 8), (8, 8)])
    out = check_plan(plan, dict(B=8, D=8, F=8), inputs={"In": x, "W_in": w_in, "W_out": w_out, "dOut": g})
    h = x @ w_in
    assert np.allclose(out["Out"], h @ w_out)
    assert np.allclose(out["dW_out"], h.T @ g)                    # dW_out = T1^T dOut
    assert np.allclose(out["dW_in"], x.T @ (g @ w_out.T))         # dW_in = In^T (dOut W_out^T)
    assert np.allclose(out["dIn"], (g @ w_out.T) @ w_in.T)



ATTENTION = """
param Wq[D, H], Wk[D, H]
Q[B, S, H] = X[B, S, D] *_D Wq[D, H]
K[B, S, H] = X[B, S, D] *_D Wk[D, H]
A[B, S, T] = Q[B, S, H] *_H Kt[B, T, H]
P = Softmax_T(A[B, S, T])
R = RMSNorm_S(P[B, S, T])
M = Mul(R[B, S, T], P[B, S, T])
N = SiLU(M[B, S, T])
L = CrossEntropy_T(N[B, S, T])
"""

GATED = """
param W1[D, F_Y], W2[D, F_Y], W3[F_Y, D]
U1[B, F_Y] = X[B, D] *_D W1[D, F_Y]
U2[B, F_Y] = X[B, D] *_D W2[D, F_Y]
S = SiLU(U1[B, F])
M = Mul(S[B, F], U2[B, F])
Out[B, D] = M[B, F] *_F W3[F_Y, D]
"""

RESIDUALS = """
param W1[D, F_Y], W2[F_Y, D]
H[B, F_Y] = X[B, D] *_D W1[D, F_Y]
Z[B, D] = H[B, F_Y] *_F W2[F_Y, D]
A = Add(X[B, D], Z[B, D])
N = RMSNorm_D(A[B, D])
Out = Add(A[B, D], N[B, D])
"""

VIEW = """
param W1[D, F_Y], W2[G_Y, D]
H[B, F_Y] = X[B, D] *_D W1[D, F_Y]
V[B, G] = View(H[B, F])
R[B, G] = Rotary(V[B, G])
Out[B, D] = R[B, G] *_G W2[G_Y, D]
"""

SIZES = dict(B=8, T=8, D=8, F=8, S=8, H=8, G=8)


@pytest.mark.parametrize("text, mesh", [(LAYER, "Y=4"), (ATTENTION, "X=2,Y=2"), (GATED, "X=2,Y=2"),
                                        (RESIDUALS, "X=2,Y=2"), (VIEW, "Y=2")],
                         ids=["mlp-block", "attention", "gated-mlp", "two-residuals", "view-and-rotary"])
def test_elementwise_layers_train_on_the_simulator(text, mesh):
    """Activations, norms, softmax, cross-entropy, dropout, a gate, residual adds and views (whose gradients
    pass through without a step) forward and backward."""
    plan = symcost.derive(text, mesh=mesh, dims=SIZES, backward=True)
    assert any(s.is_elementwise and s.phase == "backward" for s in plan.steps)
    out = check_plan(plan, SIZES)
    assert {"d" + n for n in reference.inputs(symcost.parse(text))} <= set(out)


def _without(plan, i):
    return dataclasses.replace(plan, steps=plan.steps[:i] + plan.steps[i + 1:])


@pytest.mark.parametrize("text, mesh, dropped, message", [
    (LAYER, "Y=2", "Einsum dU", "gradient dX"),                       # a contribution to dXn lost
    (LAYER, "Y=2", "LayerNorm", "gradient dX"),                       # the residual's pass-through alone
    (LAYER, "Y=2", "Einsum dZ[B, T, D] * G", "no gradient of W3"),
    (open("derivations/fsdp.sc").read(), "X=2", "ReduceScatter_X(dW_out", "leaves the gradient of W_out"),
    (open("derivations/tp.sc").read(), "Y=2", "ReduceScatter_Y(dIn", "leaves the gradient of In"),
    (ATTENTION, "X=2,Y=2", "Softmax", "gradient d"),
])
def test_a_backward_plan_missing_a_step_is_caught(text, mesh, dropped, message):
    plan = symcost.derive(text, mesh=mesh, dims=SIZES, backward=True)
    i = next(i for i, s in enumerate(plan.steps) if s.phase == "backward" and
             (f"{s.kind} {s.signature()}".startswith(dropped) or s.signature().startswith(dropped)))
    with pytest.raises(SimulationError, match=message):
        check_plan(_without(plan, i), SIZES)


@pytest.mark.parametrize("kind, operands, axis", [
    ("LayerNorm", 1, 1), ("RMSNorm", 1, 0), ("Softmax", 1, 1), ("CrossEntropy", 1, 1), ("GeLU", 1, None),
    ("SiLU", 1, None), ("ReLU", 1, None), ("Mul", 2, None), ("Add", 2, None), ("View", 1, None),
])
def test_each_rules_gradient_is_its_finite_difference(kind, operands, axis):
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((3, 4)) for _ in range(operands)]
    y = arrays.forward(kind, xs, axis)
    g = rng.standard_normal(y.shape)
    saves = symcost.elementwise.RULES[kind].saves
    saved = xs if saves == "inputs" else [y] if saves == "output" else []
    for which in range(operands):
        grad = arrays.backward(kind, g, saved, which, axis)
        numeric = np.zeros_like(xs[which])
        for idx in np.ndindex(*xs[which].shape):
            up = [x.copy() for x in xs]
            down = [x.copy() for x in xs]
            up[which][idx] += 1e-6
            down[which][idx] -= 1e-6
            numeric[idx] = np.sum((arrays.forward(kind, up, axis) - arrays.forward(kind, down, axis)) * g) / 2e-6
        assert np.allclose(grad, numeric, rtol=1e-5, atol=1e-6)


def test_the_reference_gradient_of_a_chain_is_its_finite_difference():
    text = "param W1[J, K], W2[K, L]\nOut[I, L] = In[I, J] *_J W1[J, K] *_K W2[K, L]"
    rng = np.random.default_rng(1)
    values = {"In": (("I", "J"), rng.standard_normal((2, 3))), "W1": (("J", "K"), rng.standard_normal((3, 4))),
              "W2": (("K", "L"), rng.standard_normal((4, 2)))}
    seed = rng.standard_normal((2, 2))
    grads = reference.gradients(reference.run(text, values), {"Out": (("I", "L"), seed)})
    assert np.allclose(grads["W1"][1], values["In"][1].T @ seed @ values["W2"][1].T)
    assert np.allclose(grads["In"][1], seed @ (values["W1"][1] @ values["W2"][1]).T)


@given(training_cases())
@settings(settings.get_profile(os.environ.get("SYMCOST_HYPOTHESIS", "fast")))
def test_every_backward_plan_computes_the_gradients(case):
    """Random layers (products with parameters, activations, norms, softmax, dropout, residual adds, random
    layouts on up to two axes) derived with their backward pass: 25 examples in the fast tier, 500 under
    `make test` (SYMCOST_HYPOTHESIS=ci)."""
    text, mesh, sizes = case
    plan = symcost.derive(text, mesh=mesh, dims=sizes, backward=True)
    out = check_plan(plan, sizes, np.random.default_rng(0))
    params = [t.name for st in symcost.parse(text).statements if st.__class__.__name__ == "Declaration"
              for t in st.tensors]
    assert {"d" + p for p in params} <= set(out)


def test_the_simulator_page_runs():
    """docs/simulator.md's Python blocks run as written, one after the other."""
    import re
    text = open("docs/simulator.md").read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 4
    scope: dict = {}
    for block in blocks:
        exec(compile(block, "docs/simulator.md", "exec"), scope)
