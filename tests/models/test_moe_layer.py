"""An MoE layer's MLP is written once (``models.expert_layer.moe_block``) for training and serving, its
router priced as the rest of the layer is: the gate logits an einsum against ``Wr[D, Er]`` (its FLOPs in
the layer's compute, its weight in the parameters and in memory), its softmax and top-k an elementwise
kernel (``TopK``: its floor and its bytes)."""
import pytest

from symcost.elementwise import vector_flops
from symcost.env import Env
from symcost.hardware import hardware
from symcost.models import expert_layer, transformer
from symcost.models.config import load_model_config
from symcost.models.inference import Serving
from symcost.models.layer_cost import LayerCost
from symcost.models.transformer import layer_program, param_counts, sizes, training_program
from symcost.models.counts import forward_flops
from symcost.pricing import kernel_starts, op_cost
from symcost.program import derive_program

MIXTRAL = load_model_config("mixtral-8x7b")
DS = load_model_config("deepseek-v3")
H100 = hardware("h100")


def _block(text: str) -> list[str]:
    """The MLP statements of a layer program: from the router's logits to the MLP's result ``Z``."""
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("Lg["))
    end = max(i for i, l in enumerate(lines) if l.startswith("Z["))
    return lines[start:end + 1]


def test_training_and_serving_write_their_experts_with_one_writer(monkeypatch):
    """Both layer programs call the one writer and use what it returns, statement for statement; laid out
    on no mesh, the training layer's MLP and the serving layer's are the same statements."""
    calls = []

    def recording(cfg, **kw):
        out = expert_layer.moe_block(cfg, **kw)
        calls.append(out)
        return out
    monkeypatch.setattr(transformer, "moe_block", recording)
    for cfg in (MIXTRAL, DS):
        calls.clear()
        train = training_program(cfg, tp_axes=("Y",), seq_parallel=True, moe=True, ep_axes=("X",))
        serve = layer_program(cfg, transformer.Sharding(model=("Y", "Z"), heads=("Y",), kv_batch=("Z",),
                                                        experts=("Z",)))
        (tw, tl), (sw, sl) = calls
        assert _block(train) == tl and _block(serve) == sl
        assert all(w in train.splitlines()[0] for w in tw)
        assert "param " + ", ".join(sw) in serve.splitlines()
    assert _block(training_program(DS, moe=True)) == _block(layer_program(DS, {}))
    assert _block(training_program(MIXTRAL, moe=True)) == _block(layer_program(MIXTRAL, {}))


def test_the_router_is_in_the_layers_compute():
    """The gate logits Lg[B, T, Er] = Rn[B, T, D] *_D Wr[D, Er] are 2 B T D E FLOPs forward: in the serving
    layer's plan; in the training layer's model FLOPs (one microbatch of 4 x 4096 tokens a rank, EP 8, TP
    8); and in the FLOPs a token costs, a Mixtral layer's matmuls being 2 x (attention's weights + the
    router's D E + k experts' 3 D F) + the weighted sum of the k results (2 k D; the permutation before
    the experts is a copy, no arithmetic), plus the unembedding; at one token a sequence (``T k / E`` not
    whole) the same."""
    dims = sizes(MIXTRAL, batch=4, seq=512)
    plan = derive_program(layer_program(MIXTRAL, {}), mesh="X=1", dims=dims, moves="none")
    (lg,) = [s for s in plan.steps if s.tensor == "Lg" and s.is_einsum]
    assert plan.evaluate(lg.flops) == 2 * 4 * 512 * 4096 * 8
    lay = LayerCost(MIXTRAL, H100, tp=8, microbatch=4, seq=4096, ep=8, moe=True)
    tplan = lay.plan()
    (router,) = [s for s in tplan.steps if s.phase == "forward" and s.tensor == "Lg" and s.is_einsum]
    assert router.op.dims == ("B", "T", "D", "Er")
    whole = 2 * 4 * 4096 * 4096 * 8                     # a rank's microbatch: the plan's B is 8 of them
    assert 2 * dict(tplan.sizes)["B"] * 4096 * 4096 * 8 / 8 == whole
    einsums = [s for s in tplan.steps if s.phase == "forward" and s.is_einsum]
    assert lay.einsum_flops_all()[0] == pytest.approx(sum(2.0 * _prod(tplan, s) / 8 for s in einsums))
    assert 2.0 * _prod(tplan, router) / 8 == whole
    L, D, E, k, F = MIXTRAL.L, MIXTRAL.D, MIXTRAL.E, MIXTRAL.k, MIXTRAL.F_expert
    attention = param_counts(MIXTRAL)["attention"] / L
    per_token = forward_flops(MIXTRAL, batch=1, seq=4096, attention=False) / 4096
    assert per_token == L * (2 * attention + 2 * D * E + 2 * k * 3 * D * F + 2 * k * D) + 2 * D * MIXTRAL.V
    # one token (a decode step's): its k experts, not one token's worth for each of the E
    one = forward_flops(MIXTRAL, batch=1, seq=1, attention=False)
    assert one == pytest.approx(per_token, rel=1e-12)


def _prod(plan, step) -> float:
    sz = dict(plan.sizes)
    out = 1.0
    for d in step.op.dims:
        out *= sz[d]
    return out


def test_the_routers_weights_are_held_and_counted():
    """Wr[D, E] is a parameter of every MoE layer: Mixtral's 46.7e9 are its experts, attention and
    embeddings and 32 x 4096 x 8 router weights; one chip holds all of it (2 bytes each), and on 8 chips
    each holds the whole router (too small to split), so the slice holds it 8 times."""
    p = param_counts(MIXTRAL)
    L, D, E, F = MIXTRAL.L, MIXTRAL.D, MIXTRAL.E, MIXTRAL.F_expert
    assert p["total"] == p["attention"] + p["embedding"] + L * (E * 3 * D * F + D * E)
    assert p["active"] == p["attention"] + p["embedding"] + L * (2 * 3 * D * F + D * E)
    assert p["total"] == pytest.approx(46.7e9, rel=1e-3)
    one = Serving(MIXTRAL, hardware("h200"), chips=1)
    assert one.held_param_bytes == 2 * p["total"]
    eight = Serving(MIXTRAL, H100, chips=8)
    assert eight.held_param_bytes == pytest.approx(2 * p["total"] + 7 * L * D * E * 2, rel=1e-12)


def test_the_routers_softmax_and_top_k_is_an_elementwise_kernel():
    """TopK_Er(Lg[B, T, Er]) -> Gk[B, T, J] reads the E logits and writes the k weights a token (bf16), six
    vector FLOPs a logit, and launches a kernel of its own (it waits on the router's matmul) that pays the
    preset's floor; the experts' outputs are summed with those weights as training sums them."""
    s = Serving(MIXTRAL, H100, chips=1)
    plan = s._plan("layer", 16, 1, 4096, moe=True)
    env = Env.numeric(plan.mesh, dict(plan.sizes), H100.bindings("bf16"), H100.efficiency)
    ops = [st.op for st in plan.steps]
    (i,) = [n for n, st in enumerate(plan.steps) if st.tensor == "Gk"]
    gk = plan.steps[i]
    assert gk.is_elementwise and gk.op.kind == "TopK"
    c = op_cost(gk.op, env)
    assert float(c.bytes) == 16 * (8 + 2) * 2
    assert float(vector_flops(gk.op, env)) == 6 * 16 * 8
    costs = [op_cost(op, env) for op in ops]
    assert kernel_starts(costs)[i]
    (z,) = [st for st in plan.steps if st.tensor == "Z"]
    assert z.is_einsum and {t.name for t in z.op.inputs} == {"Zk", "Gk"}


def _statement(plan, tensor, phase="forward"):
    (step,) = [s for s in plan.steps if s.phase == phase and s.tensor == tensor and not s.is_collective]
    return step


def test_the_tokens_go_to_their_experts_unweighted_and_the_gate_multiplies_once():
    """The permutation copies each token to its k experts (``Dispatch_J``: no product with the gate
    weights), and ``Gk`` multiplies once, in the weighted sum of each token's k results; the copy costs what
    the product it replaces did -- Rn, Gk read and Xk written (16 tokens: 16 x (D + k + k D) x 2 bytes),
    a kernel of its own (not fused into the router's top-k) -- and does no arithmetic. In training its
    backward is one sum of the k copies' gradients (reads dXk, writes dRn) where the product's was two
    einsums each reading dXk; the router's weights get their gradient from the weighted sum alone."""
    s = Serving(MIXTRAL, H100, chips=1)
    plan = s._plan("layer", 16, 1, 4096, moe=True)
    env = Env.numeric(plan.mesh, dict(plan.sizes), H100.bindings("bf16"), H100.efficiency)
    xk = _statement(plan, "Xk")
    assert xk.op.kind == "Dispatch" and [t.name for t in xk.op.inputs] == ["Rn", "Gk"]
    readers = [st for st in plan.steps if st.is_einsum and "Gk" in {t.name for t in st.op.inputs}]
    assert [st.tensor for st in readers] == ["Z"]
    costs = [op_cost(st.op, env) for st in plan.steps]
    i = plan.steps.index(xk)
    D, k = MIXTRAL.D, MIXTRAL.k
    assert float(costs[i].bytes) == 16 * (D + k + k * D) * 2
    assert float(costs[i].flops) == 0 and float(vector_flops(xk.op, env)) == 0
    assert kernel_starts(costs)[i] and plan.steps[i - 1].tensor == "Gk"
    lay = LayerCost(MIXTRAL, H100, tp=8, microbatch=1, seq=4096, ep=8, moe=True)
    tplan = lay.plan()
    back = [st for st in tplan.steps if st.phase == "backward" and "dXk" in
            {t.name for t in getattr(st.op, "inputs", ())}]
    assert [(st.op.kind, st.tensor) for st in back] == [("Dispatch", "dRn")]
    tenv = Env.numeric(tplan.mesh, dict(tplan.sizes), H100.bindings("bf16"), H100.efficiency)
    sz = dict(tplan.sizes)
    tokens = sz["B"] * sz["T"] / 8                            # a rank's: EP 8 splits B
    assert float(op_cost(back[0].op, tenv).bytes) == tokens * (k * D + D) * 2
    assert float(vector_flops(back[0].op, tenv)) == tokens * k * D
    dgk = [st for st in tplan.steps if st.phase == "backward" and st.tensor == "dGk" and st.is_einsum]
    assert [{t.name for t in st.op.inputs} for st in dgk] == [{"dZ", "Zk"}]


def test_the_routers_gradient_is_summed_once_a_step():
    """With sequence parallelism each TP rank scores its own tokens, so the router's gradient is a sum over
    the TP ranks as well as over the EP ranks (the plan's AllReduce over X and Y). Megatron-Core marks the
    router's weight sequence-parallel and sums it once a step (finalize_model_grads), as the run sums every
    weight's gradient over its data-parallel replicas once a step: the layer does not pay that reduction
    each microbatch (its EP communication is the AllToAlls and nothing else), and the run pays one AllReduce
    over the 8 TP ranks of every router's fp32 gradient (32 layers x D x E x 4 bytes) in its TP
    communication. The key and value weights' reduce-scatter over the TP ranks stays in the layer: those
    weights are split over them."""
    from symcost.models.collective import collective_seconds
    from symcost.models.execution import Run
    lay = LayerCost(MIXTRAL, H100, tp=8, microbatch=1, seq=4096, ep=8, moe=True, seq_parallel=True)
    plan = lay.plan()
    (dwr,) = [s for s in plan.steps if s.tensor == "dWr" and s.is_collective]
    assert set(dwr.axes) == {"X", "Y"}
    D, E, L = MIXTRAL.D, MIXTRAL.E, MIXTRAL.L
    assert lay.figures()["sp_grads"] == D * E
    env = lay.env(plan)
    ep = [s for s in plan.steps if s.is_collective and "X" in s.axes and not s.tensor.startswith("dW")]
    assert {s.kind for s in ep} == {"AllToAll"}
    tk = H100.efficiency.t_kernel                 # each AllToAll is a kernel: it pays the per-kernel floor
    assert tk > 0 and lay.timings()["ep_comms"] == pytest.approx(sum(float(op_cost(s.op, env).seconds) + tk for s in ep))
    assert any(s.tensor == "dWk" and s.kind == "ReduceScatter" for s in plan.steps)
    run = Run(MIXTRAL, H100, tp=8, dp=8, ep=8, sequences=64, seq=4096, seq_parallel=True, zero=1)
    it = run.iteration()
    once = collective_seconds(H100, "AllReduce", 4 * L * D * E, 8, "A=8", "A")
    assert once > 0
    assert it["tp_comms"] == pytest.approx(run.pipeline.microbatches * L * run.layer()["tp_comms"] + once)
