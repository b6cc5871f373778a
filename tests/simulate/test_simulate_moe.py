"""An MoE layer on the simulator: its router's ``TopK`` (softmax over the routed experts, then each token's
k largest weights, largest first), the permutation (``Dispatch_J``: each token copied, unweighted, to its k
experts), the view that deals the copies to the experts (balanced: each expert receives M x I tokens) and
the weighted sum back, forward and backward, sharded as training and serving lay them out, against the
program's NumPy meaning."""
import dataclasses

import numpy as np
import pytest

import symcost
from symcost import arrays, reference
from symcost.models.config import load_model_config
from symcost.models.transformer import Sharding, layer_program, training_program
from symcost.simulate import SimulationError, check_plan

MIXTRAL = load_model_config("mixtral-8x7b")
#: every size a multiple of the 4 devices (the simulator's elementwise work needs whole blocks): 8 experts,
#: 4 a token, 8 tokens a sequence, so each expert receives I = T k / E = 4 tokens of each of M = B sequences
SIZES = dict(B=4, T=8, S=8, D=8, Er=8, E=8, J=4, M=4, I=4, F=8, K=4, G=4, H=4)


def _finite_difference(f, x, g, h=1e-6):
    out = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        up, down = x.copy(), x.copy()
        up[idx] += h
        down[idx] -= h
        out[idx] = np.sum((f(up) - f(down)) * g) / (2 * h)
    return out


def test_top_k_is_the_softmax_then_the_k_largest_in_descending_order():
    logits = np.log(np.array([[1.0, 4.0, 2.0, 3.0]]))       # softmax: 0.1, 0.4, 0.2, 0.3
    got = arrays.forward("TopK", [logits], axis=1, shape=(1, 2))
    assert np.allclose(got, [[0.4, 0.3]])
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 6))
    g = rng.standard_normal((5, 3))
    grad = arrays.backward("TopK", g, [x], 0, axis=1)
    numeric = _finite_difference(lambda v: arrays.forward("TopK", [v], axis=1, shape=(5, 3)), x, g)
    assert np.allclose(grad, numeric, rtol=1e-5, atol=1e-7)
    # only the chosen entries' probabilities carry gradient in: an unchosen logit's is -p_e sum_j g_j w_j
    p = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)
    w = arrays.forward("TopK", [x], axis=1, shape=(5, 3))
    unchosen = p < w[:, -1:] - 1e-12
    assert np.allclose(grad[unchosen], (-p * (g * w).sum(axis=1, keepdims=True))[unchosen])


def test_a_dispatch_copies_and_its_gradient_sums_the_copies():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 5))
    got = arrays.forward("Dispatch", [x, rng.standard_normal((3, 2))], axis=1, shape=(3, 2, 5))
    assert np.array_equal(got[:, 0], x) and np.array_equal(got[:, 1], x)
    g = rng.standard_normal((3, 2, 5))
    assert np.allclose(arrays.backward("Dispatch", g, [], 0, axis=1), g[:, 0] + g[:, 1])


def test_the_programs_gate_multiplies_once():
    """The notation's meaning of the MoE block: Z = sum_j Gk[j] x expert_e(j)(x), the gate once (a program
    that multiplied the copies by Gk as well would give Gk^2)."""
    text = ("param Wr[D, Er], W[E, D, C]\nLg[B, T, Er] = X[B, T, D] *_D Wr[D, Er]\n"
            "Gk[B, T, J] = TopK_Er(Lg[B, T, Er])\nXk[B, T, J, D] = Dispatch_J(X[B, T, D], Gk[B, T, J])\n"
            "Xr[M, I, E, D] = View(Xk[B, T, J, D])\nYe[M, I, E, C] = Xr[M, I, E, D] *_D W[E, D, C]\n"
            "Zk[B, T, J, C] = View(Ye[M, I, E, C])\nZ[B, T, C] = Zk[B, T, J, C] *_J Gk[B, T, J]")
    rng = np.random.default_rng(5)
    x, wr, w = rng.standard_normal((2, 4, 3)), rng.standard_normal((3, 4)), rng.standard_normal((4, 3, 3))
    tape = reference.run(text, {"X": (("B", "T", "D"), x), "Wr": (("D", "Er"), wr), "W": (("E", "D", "C"), w)},
                         sizes={"J": 2, "M": 2, "I": 2, "E": 4})
    z = tape.value("Z")[1]
    p = np.exp(x @ wr)
    p /= p.sum(axis=-1, keepdims=True)
    for b, t in np.ndindex(2, 4):
        top = np.argsort(-p[b, t])[:2]
        experts = [(t * 2 + j) % 4 for j in range(2)]         # the view deals a token's copies in turn
        want = sum(p[b, t, top[j]] * (x[b, t] @ w[experts[j]]) for j in range(2))
        assert np.allclose(z[b, t], want)


def _programs():
    train = training_program(MIXTRAL, tp_axes=("Y",), seq_parallel=True, moe=True, ep_axes=("X",))
    serve = layer_program(MIXTRAL, Sharding(model=("Y", "Z"), heads=("Y",), kv_batch=("Z",), experts=("Z",)))
    return [pytest.param(train, {"X": 2, "Y": 2}, id="training-ep2-tp2-sp"),
            pytest.param(serve, {"Y": 2, "Z": 2}, id="serving-experts-over-Z")]


@pytest.mark.parametrize("text, mesh", _programs())
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_an_moe_layer_runs_on_the_simulator(text, mesh, backward):
    """Training's layer (experts over X, which also splits the batch: the tokens go to their experts and
    back by AllToAlls; TP and sequence parallelism over Y) and serving's (experts over Z, the experts'
    outputs gathered back) each run on simulated devices; every step's blocks, every tensor and every
    gradient (the router's Wr's through TopK included) equal the program's NumPy meaning."""
    plan = symcost.derive(text, mesh=mesh, dims=SIZES, backward=backward)
    if "X" in mesh:
        assert sum(s.kind == "AllToAll" for s in plan.steps) == (4 if backward else 2)
    out = check_plan(plan, SIZES)
    program = symcost.parse(text)
    if backward:
        assert {"d" + n for n in reference.inputs(program)} <= set(out)
        assert np.abs(out["dWr"]).max() > 0
        assert any(s.is_elementwise and s.op.grad and s.op.kind == "TopK" for s in plan.steps)
    else:
        assert reference.results(program) <= set(out)
        gk = out["Gk"]                                        # each token's k weights, largest first
        assert np.all(np.diff(gk, axis=-1) <= 0) and np.all(gk.sum(axis=-1) < 1)


def test_an_expert_parallel_plan_that_loses_the_way_back_is_caught():
    """The backward's AllToAll that takes the experts' gradients back to their tokens, dropped: caught."""
    text, mesh = _programs()[0].values
    plan = symcost.derive(text, mesh=mesh, dims=SIZES, backward=True)
    (i,) = [n for n, s in enumerate(plan.steps) if s.phase == "backward" and s.kind == "AllToAll"
            and s.op.before.name == "dXr"]
    forged = dataclasses.replace(plan, steps=plan.steps[:i] + plan.steps[i + 1:])
    with pytest.raises(SimulationError, match=r"is not the gradient of the program.s loss"):
        check_plan(forged, SIZES)


@pytest.mark.parametrize("text, message", [
    ("Xk[B, T, J_X, D] = Dispatch_J(Rn[B, T, D], Gk[B, T, J])", "needs J whole on each device"),
    ("Xk[B, T, J, D] = Dispatch(Rn[B, T, D], Gk[B, T, J])", "needs the dimension it copies along"),
    ("Xk[B, T, D] = Dispatch_J(Rn[B, T, D], Gk[B, T, J])", "with J added"),
])
def test_a_dispatch_is_written_with_the_dimension_it_adds(text, message):
    with pytest.raises(symcost.errors.SymcostError, match=message):
        symcost.derive(text, mesh={"X": 2})
