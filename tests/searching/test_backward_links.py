"""The floor under the backward links of a statement that reads or writes a tensor several statements read
(:mod:`symcost.searching.floors`): its weight and input gradients must be summed over an axis that splits
what they sum, so a piece that does not plan its backward alone still claims those links. Never above
what the engine's plan of any candidate spends on each resource, and not trivial."""
import sys

import pytest
from conftest import ROOT

import symcost
from symcost.program import derive_program
from symcost.searching import bounded, price
from symcost.searching import pieces as pcs
from symcost.searching import floors
from symcost.searching.floors import backward_links
from symcost.searching.space import Space

#: the MLP's two statements and a third that reads its input and weight again: the first and third
#: statements' pieces are not exact (In and W_in are read twice), and their results' gradients arrive in
#: their results' layouts (H is read by one einsum, G by none), so their gradients have a floor
SHARED = """
param W_in[D, F], W_out[F, D]
H[B, F] = In[B, D] *_D W_in[D, F]
Out[B, D] = H[B, F] *_F W_out[F, D]
G[B, F] = In[B, D] *_D W_in[D, F]
"""
DIMS = dict(B=65536, D=8192, F=32768)
OPTIONS = dict(dims=DIMS, hw="tpu-v5p", backward=True)


def _resources(plan) -> list:
    return list(pcs.vector(plan.step_costs(), plan.mesh))


def test_the_floor_of_a_forced_reduction_is_the_reduction_the_plan_makes():
    """``dW`` summed over B, which ``dOut[B_Y, F_X]`` splits over Y, must end whole over Y: the floor on Y
    is the plan's AllReduce to the bit. On X (``dIn`` sums F, split over X) it is below the plan's."""
    text = "param W[D, F_X]\nOut[B_Y, F_X] = In[B_Y, D] *_D W[D, F]"
    dims = "B=8192,D=4096,F=4096"
    forward = derive_program(text, "X=4,Y=2", dims, "h100", alternatives=False)
    plan = derive_program(text, "X=4,Y=2", dims, "h100", backward=True, alternatives=False)
    back = [c for c, s in zip(plan.step_costs(), plan.steps) if s.phase == "backward"]
    spent = pcs.vector(back, plan.mesh)[2:]
    on_x, on_y = backward_links(forward, "Out", ("In", "W"))
    assert on_y == pytest.approx(spent[1], rel=1e-12) and on_y > 0
    assert 0 < on_x < spent[0]
    assert backward_links(forward, "Out", ("W",)) == (0.0, on_y)    # the input's gradient claims X's


def test_a_result_read_by_several_statements_or_by_elementwise_work_has_no_floor():
    """Its gradient's layout is not its own: the first contribution's, or what the elementwise backward
    makes (``tests/searching/test_exact.py`` has the statements that have one)."""
    many = Space.of(SHARED + "K[B, D] = H[B, F] *_F W_out[F, D]\n", "X=2", "tpu-v5p")
    applied = Space.of(SHARED.replace("Out[B, D] = H[B, F]", "R[B, F] = relu(H[B, F])\nOut[B, D] = R[B, F]"),
                       "X=2", "tpu-v5p")
    for sp in (many, applied):
        where = pcs.statements(sp)
        assert pcs.exactly(sp, {at: None for at in where}, backward=True)[where[0]] is False


def test_the_floor_adds_to_the_forward_links_and_claims_some():
    """A piece with a floor is its forward resources (planned without the backward pass) and the floor on
    each axis's links; over every key of the first statement, the floor claims links at some."""
    space = Space.of(SHARED, "X=2,Y=2", "tpu-v5p")
    at = pcs.statements(space)[0]
    sub, fixed = pcs.alone(space, at), ("H", ("In", "W_in"))
    claimed = 0
    for cand, _ in pcs.keys(sub):
        plain = pcs._priced(sub, cand, OPTIONS, space.mesh, exact=False)
        floored = pcs._priced(sub, cand, OPTIONS, space.mesh, exact=fixed)
        if plain is None:
            assert floored is None
            continue
        forward = pcs.planned_alone(sub, cand, {**OPTIONS, "backward": False}, {len(sub.program.statements) - 1: 0})
        links = backward_links(forward, *fixed)
        assert floored[1][:2] == plain[1][:2]
        assert floored[1][2:] == pytest.approx([p + f for p, f in zip(plain[1][2:], links)], rel=1e-12)
        claimed += any(f > 0 for f in links)
    # H[B, F] is split by an axis whose activation role is B or F (6 of its 12 roles): dW_in sums B, dIn
    # sums F, so each of those keys has a floor; 144 keys less the 6 x 6 that leave H whole
    assert claimed == 144 - 6 * 6


def test_a_keys_floor_read_off_its_splits_is_the_floor_of_its_layouts():
    """The bounded search reads each key's floor off its splits (:func:`floors.links_at`, each tensor's
    gradient laid out once a split): for every key of the statements with a floor, on two meshes, it is the
    floor of the layouts the key gives (:func:`floors.links`), to the bit, and claims links at some."""
    claimed = 0
    for mesh in ("X=2,Y=2", "X=4,Y=2,Z=2"):
        space = Space.of(SHARED, mesh, "tpu-v5p")
        exact = pcs.exactly(space, {at: None for at in pcs.statements(space)}, backward=True)
        plan = derive_program(SHARED, space.mesh, DIMS, "tpu-v5p", alternatives=False)
        pricing = floors.pricing(plan)
        for at in (a for a in pcs.statements(space) if isinstance(exact[a], tuple)):
            sub = pcs.alone(space, at)
            read, laid = floors.links_at(sub, *exact[at], *pricing), floors.at_splits(sub)
            for _, k in pcs.keys(sub):
                got = read(k)
                assert got == floors.links(laid(k), *exact[at], *pricing)
                claimed += any(f > 0 for f in got)
    assert claimed > 100


def _read_without_writing(space, options, every: int = 10) -> int:
    """Every key of every statement: its layouts read off its splits are those of the statement written for
    a candidate with those splits, which are those its plan has (one in ``every`` planned)."""
    n = planned = 0
    for at in pcs.statements(space):
        sub = pcs.alone(space, at)
        at_splits = floors.at_splits(sub)
        for i, (cand, k) in enumerate(pcs.keys(sub)):
            layouts = at_splits(k)
            assert layouts == floors.written(sub.program_for(cand))
            n += 1
            plan = pcs.planned_alone(sub, cand, {**options, "backward": False}) if i % every == 0 else None
            if plan is not None:
                assert layouts == {lay.name: lay for lay in plan.layouts}
                planned += 1
    assert planned > n / (2 * every)
    return n


def test_a_statements_layouts_are_read_off_its_splits():
    """The bounded search bounds the statements it has not planned yet by their least work and their
    links' floor, read off each key's layouts without writing or planning the statement."""
    assert _read_without_writing(Space.of(SHARED, "X=2,Y=2", "tpu-v5p"), OPTIONS) == 3 * 144


def _check_under(space, cands, options, b):
    """Each candidate's whole bound, resource by resource, at most what its plan spends."""
    for cand in cands:
        i = b.cands.index(cand)
        b.whole(i)
        pieces = b.at_hand(i)
        summed = [sum(col) for col in zip(*pieces)]
        p = price.price(space, cand, **options)
        if p is None:
            continue
        spent = _resources(p.plan)
        assert all(s <= e * (1 + 1e-12) + 1e-15 for s, e in zip(summed, spent)), (str(space.program_for(cand)))


def test_every_candidate_spends_at_least_its_bound_on_every_resource():
    space = Space.of(SHARED, "X=2,Y=2", "tpu-v5p")
    b = bounded.Bounds(space, OPTIONS)
    _check_under(space, list(space.candidates()), OPTIONS, b)


@pytest.mark.slow
def test_every_candidate_the_layer_search_derives_spends_at_least_its_bound():
    """The LLaMA 3 8B layer on h100 ``X=4,Y=2``: six of its nine statements read or write the input X or
    the attention's output Y, which several statements read; the candidates the bounded search derives
    (the fastest), each resource at least its pieces' sum. Each piece the walk planned is at least what
    stood for it before (the statement's least, and its links' floor where its gradients have one: the
    exact pieces' statements too, the attention's two products and the down projection)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_search import _layer_text
    space = Space.of(_layer_text(), "X=4,Y=2", "h100")
    options = dict(dims=dict(space.program.ranking), hw="h100", backward=True)
    b = bounded.Bounds(space, options)
    position = {c: i for i, c in enumerate(space.candidates())}

    def key(p):          # the search's ranking (symcost.searching: the step time, then communication, ...)
        return price.rounded(p.t_step), p.t_comms, p.memory_bytes or 0.0, position[p.candidate]
    before = [list(h) for h in b.hand]
    derived = [got[0].candidate for got in bounded.until_proven(b, 10, key=key) if got]
    assert len(derived) == b.derived == 196
    _check_under(space, derived, options, b)
    spec = floors.floored(space, b.subs, backward=True)
    assert {6, 7, 11} <= set(spec) and {at for at in b.subs if b.exact[at] is True} == {6, 7, 11}
    linked = set()
    for j, at in enumerate(b._at):
        for n, done in enumerate(b.done[j]):
            if done and b.hand[j][n] is not None:
                assert all(f <= v * (1 + 1e-12) + 1e-15 for f, v in zip(before[j][n], b.hand[j][n])), (at, n)
                if any(before[j][n][2:]):
                    linked.add(at)
    assert {6, 7, 11} <= linked          # floors on the links of the exact pieces' statements, not all zero
    assert _read_without_writing(space, options, every=50) == 4375
    symcost.clear_caches()
