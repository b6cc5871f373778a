"""Tied forward plans weighed with the backward pass: an alternative spliced into the trace (its backward
pass resumed where the statements after it left off) is the plan that planning again with that choice
gives, and the derivation is the same with splicing as without."""
import pytest

from symcost import ties
from symcost.backward import resolve_params
from symcost.binding import bind
from symcost.planner import plan_program
from symcost.program import derive_program

# one sharding of a LLaMA 3 8B layer (what `symcost search` prices): four einsums with equally fast plans,
# some reaching the layout the first plan reaches (spliced), some another (planned again)
LAYER = """
rank D=4096, F=14336, K=8, G=4, H=128, B=8, T=4096, S=4096
param Wq[D_Y, K_Z, G, H], Wk[D_Y, K_Z, H], Wv[D_Y, K_Z, H], Wo[K_Z, G, H, D_Y]
param W1[D_Y, F], W2[D_Y, F], W3[F, D_Y]
Q[B, T, K, G, H] = X[B, T, D_Z] *_D Wq[D, K, G, H]
Kn[B, T, K, H] = X[B, T, D] *_D Wk[D, K, H]
Vn[B, T, K, H] = X[B, T, D] *_D Wv[D, K, H]
A[B, T, S, K, G] = Q[B, T, K, G, H] *_H Kc[B, S, K, H]
Ctx[B, T, K, G, H] = A[B, T, S, K, G] *_S Vc[B, S, K, H]
Y[B, T, D_Z] = Ctx[B, T, K, G, H] *_{K,G,H} Wo[K, G, H, D]
U1[B, T, F] = Y[B, T, D] *_D W1[D, F]
U2[B, T, F] = Y[B, T, D] *_D W2[D, F]
Out[B, T, D_Z] = U1[B, T, F] *_F W3[F, D]
"""
SIZES = dict(D=4096, F=14336, K=8, G=4, H=128, B=8, T=4096, S=4096)
MESH = "X=2,Y=2,Z=2"


@pytest.fixture(scope="module")
def planner():
    bound = bind(LAYER, MESH, SIZES, "h100")

    def planned(choices=None):
        trace = plan_program(bound, alternatives=False, choices=choices)
        return ties.planned(trace, resolve_params(trace, None), "activations", True)
    return planned


def test_every_tied_alternative_spliced_is_the_plan_planned_again(planner):
    best = planner()
    assert [(t.at, t.n) for t in best.trace.ties] == [(4, 2), (5, 2), (7, 7), (11, 7)]
    spliced = replanned = 0
    for tie in best.trace.ties:
        for k in range(1, tie.n):
            again = planner({tie.at: k})
            got = ties._alternative(best, tie.at, k, "activations", True)
            if got is None:          # another layout: the statements after it are planned from there
                replanned += 1
                assert ties.spliced(best.trace, tie.at, k) is None
                continue
            spliced += 1
            assert got.trace.steps == again.trace.steps and got.trace.uses == again.trace.uses
            assert got.steps == again.steps and got.saved == again.saved
            assert ties.rank(got) == ties.rank(again)
            assert set(got.states) == set(again.states)
            for i in got.states:
                assert got.states[i].steps == again.states[i].steps and got.states[i].grads == again.states[i].grads
    assert spliced == 12 and replanned == 2


def test_a_second_tie_is_spliced_into_the_alternative_chosen_for_the_first(planner):
    """After a tie's alternative is taken, the next tie is spliced into that plan, not the first one."""
    first = planner()
    taken = planner({7: 3})
    got = ties._alternative(taken, 11, 3, "activations", True)
    again = planner({7: 3, 11: 3})
    assert got is not None and got.steps == again.steps and ties.rank(got) == ties.rank(again)
    assert got.steps != ties._alternative(first, 11, 3, "activations", True).steps


def test_the_derivation_is_the_same_without_splicing(monkeypatch):
    plan = derive_program(LAYER, MESH, SIZES, "h100", backward=True, alternatives=False)
    assert any("forward plans are equally fast" in n for n in plan.notes)
    monkeypatch.setattr(ties, "spliced", lambda trace, at, k: None)
    again = derive_program(LAYER, MESH, SIZES, "h100", backward=True, alternatives=False)
    assert [s.signature() for s in plan.steps] == [s.signature() for s in again.steps]
    assert plan.steps == again.steps and plan.notes == again.notes
    assert plan.memory == again.memory and plan.numbers() == again.numbers()
