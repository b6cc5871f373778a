"""Tied forward plans weighed with the backward pass: an alternative spliced into the trace (its backward
pass resumed where the statements after it left off) is the plan that planning again with that choice
gives, and the derivation is the same with splicing as without."""
import json
import os
import subprocess
import sys

import pytest

from symcost import ties
from symcost.backward import resolve_params
from symcost.binding import bind
from symcost.planner import plan_program
from symcost.program import derive_program, derive_tied

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


# a two-einsum program whose results are not written: its tied plans reach different layouts
OPEN = "H = In[B_X, D_Y] *_D W[D, F]\nOut = H[B, F] *_F W2[F, D]"


def planner_of(text, mesh, sizes, hw):
    bound = bind(text, mesh, sizes, hw)

    def planned(choices=None):
        trace = plan_program(bound, alternatives=False, choices=choices)
        return ties.planned(trace, resolve_params(trace, None), "activations", True)
    return planned


@pytest.fixture(scope="module")
def planner():
    return planner_of(LAYER, MESH, SIZES, "h100")


def spliced_and_planned(planned) -> tuple[int, int]:
    """Every tie's every alternative, spliced where it can be, against the program planned again with that
    choice: equal in every step, use, tie, backward state and rank. How many were spliced and planned again."""
    best = planned()
    spliced = replanned = 0
    for tie in best.trace.ties:
        for k in range(1, tie.n):
            again = planned({tie.at: k})
            got = ties._alternative(best, tie.at, k, "activations", True)
            if got is None:          # another layout: the statements after it are planned from there
                replanned += 1
                assert ties.spliced(best.trace, tie.at, k) is None
                continue
            spliced += 1
            assert got.trace.steps == again.trace.steps and got.trace.uses == again.trace.uses
            assert got.trace.ties == again.trace.ties      # later ties' spans shifted where the step counts differ
            assert got.steps == again.steps and got.saved == again.saved
            assert ties.rank(got) == ties.rank(again)
            assert set(got.states) == set(again.states)
            for i in got.states:
                assert got.states[i].steps == again.states[i].steps and got.states[i].grads == again.states[i].grads
    return spliced, replanned


@pytest.mark.slow
def test_every_tied_alternative_of_a_layer_is_spliced_and_is_the_plan_planned_again(planner):
    assert [(t.at, t.n) for t in planner().trace.ties] == [(4, 2), (5, 2), (7, 7), (11, 7)]
    plans = planner().trace.ties[3].plans
    assert len({len(p.steps) for p in plans}) > 1      # equally fast, in more or fewer steps
    assert spliced_and_planned(planner) == (14, 0)


def test_an_alternative_reaching_another_layout_is_planned_again():
    planned = planner_of(OPEN, "X=4,Y=2,Z=2", dict(B=4096, D=8192, F=8192), "tpu-v5p")
    spliced, replanned = spliced_and_planned(planned)
    assert (spliced, replanned) == (2, 10)


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


# a sharding of the layer whose backward pass can gather dOut from either of two layouts it already has,
# over Y or over Z, equally fast: the planner took the first in an order set by the process's string hashing
TWO_SOURCES = LAYER.replace("Wq[D_Y, K_Z, G, H], Wk[D_Y, K_Z, H], Wv[D_Y, K_Z, H], Wo[K_Z, G, H, D_Y]",
                            "Wq[D, K_X, G, H_Y], Wk[D, K_X, H_Y], Wv[D, K_X, H_Y], Wo[K_X, G, H_Y, D]") \
    .replace("W1[D_Y, F], W2[D_Y, F], W3[F, D_Y]", "W1[D, F_Z], W2[D, F_Z], W3[F_Z, D]") \
    .replace("Q[B, T, K, G, H] = X", "Q[B, T, K, G_Y, H] = X").replace("A[B, T, S, K, G] = Q", "A[B, T, S, K, G_Y] = Q") \
    .replace("Ctx[B, T, K, G, H] = A", "Ctx[B, T, K, G_Y, H] = A")


@pytest.mark.slow
def test_equally_cheap_routes_are_chosen_the_same_in_every_process(tmp_path):
    """Of equally cheap routes from several layouts a tensor has, the search takes the one from the first
    in the program's order; keeping those searches under a set of layouts made the choice (and
    `derive --json`) change with PYTHONHASHSEED."""
    path = tmp_path / "layer.sc"
    path.write_text(TWO_SOURCES)
    dims = ",".join(f"{k}={v}" for k, v in SIZES.items())
    outs = []
    for seed in ("1", "2"):
        r = subprocess.run([sys.executable, "-m", "symcost.cli", "derive", str(path), "--backward", "--mesh", MESH,
                            "--hw", "h100", "--dims", dims, "--json"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}, check=True)
        outs.append(r.stdout)
    assert outs[0] == outs[1]
    gathers = [(s["axes"], s["before"]) for s in json.loads(outs[0])["steps"]
               if s["kind"] == "AllGather" and s["tensor"] == "dOut"]
    assert (["Z"], "dOut[B_X, T, D_Z]") in gathers and (["Y"], "dOut[B_XY, T, D]") not in gathers


@pytest.mark.parametrize("backward", [pytest.param(True, marks=pytest.mark.slow), False])
def test_derive_tied_gives_the_plan_each_choice_gives(backward):
    """What a search's piece reads: the k-th of a statement's equally fast forward plans, spliced in (its
    backward pass resumed) where it can be, is the plan ``derive_program(..., choices={at: k})`` plans
    again: the same steps, totals and memory, for every k."""
    plans = derive_tied(LAYER, MESH, SIZES, "h100", at=11, most=7, backward=backward)
    assert len(plans) == 7
    for k, p in enumerate(plans):
        q = derive_program(LAYER, MESH, SIZES, "h100", backward=backward, alternatives=False, choices={11: k})
        assert p.steps == q.steps and p.numbers() == q.numbers() and p.memory == q.memory and p.ties == q.ties
    assert len({tuple(s for s in p.steps if s.phase == "forward") for p in plans}) > 1
