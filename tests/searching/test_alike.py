"""Statements alike but for their tensors' names share one planned piece (``searching/alike.py``): the piece
read for one is, to the last bit, the piece planned for it alone."""
import pytest

from symcost.searching import alike, bounded
from symcost.searching import pieces as pcs
from symcost.searching.keyed import Keyed
from symcost.searching.space import Space

from conftest import ROOT

#: two projections alike (their inputs apart, so their pieces are exact) and a third that is not
TWINS = """param Wk[D, H], Wv[D, H], Wo[H, D]
K[B, H] = X1[B, D] *_D Wk[D, H]
V[B, H] = X2[B, D] *_D Wv[D, H]
O[B, D] = K[B, H] *_H Wo[H, D]
"""
OPTIONS = dict(dims={"B": 4096, "D": 8192, "H": 8192}, hw="tpu-v5p", backward=True)


def _form(text: str, at: int, mesh: str = "X=4") -> alike.Form:
    return alike.form(pcs.alone(Space.of(text, mesh), at))


def test_statements_alike_but_for_names_have_one_form():
    assert _form(TWINS, 1).text == _form(TWINS, 2).text
    assert _form(TWINS, 1).text != _form(TWINS, 3).text
    # another contraction, another size of a dimension read, a parameter laid out otherwise: not alike
    other = "param Wk[D, H], Wv[H, D]\nK[B, H] = X1[B, D] *_D Wk[D, H]\nV[B, D] = X2[B, H] *_H Wv[H, D]\n"
    assert _form(other, 1).text != _form(other, 2).text
    pinned = "param Wk[D, H_X], Wv[D, H]\nK[B, H] = X1[B, D] *_D Wk[D, H]\nV[B, H] = X2[B, D] *_D Wv[D, H]\n"
    assert _form(pinned, 1).text != _form(pinned, 2).text


def test_names_must_correspond_in_their_order():
    """Renamed so that the names sort otherwise (the result first in one, last in the other), two statements
    are not taken as alike: whatever the engine orders by name keeps its order between alike statements."""
    text = "param Wk[D, H], Wv[D, H]\nZ[B, H] = X1[B, D] *_D Wk[D, H]\nA[B, H] = X2[B, D] *_D Wv[D, H]\n"
    assert _form(text, 1).text != _form(text, 2).text


def test_a_piece_read_for_an_alike_statement_is_the_one_planned(monkeypatch):
    space = Space.of(TWINS, "X=2,Y=2")
    subs = {at: pcs.alone(space, at) for at in (1, 2)}
    apart = [pcs.all_pieces(space, {at: subs[at]}, OPTIONS)[0] for at in (1, 2)]
    planned = []
    plan = pcs.key_vectors
    monkeypatch.setattr(pcs, "key_vectors", lambda job, item: planned.append(item) or plan(job, item))
    together = pcs.all_pieces(space, subs, OPTIONS)
    assert len(planned) == len(apart[0]) == len(apart[1]) > 10         # the second statement's none planned
    assert {p.statement for p in together[1]} == {2}
    for alone_, read in zip(apart, together):
        assert [(p.splits, p.vector, p.exact, p.program) for p in alone_] == \
            [(p.splits, p.vector, p.exact, p.program) for p in read]
    # and alike, named as the other's are, they are the same vectors
    rename = {"K": "V", "Wk": "Wv", "X1": "X2"}
    first = {tuple((rename[n], d) for n, d in p.splits): p.vector for p in apart[0]}
    assert first == {p.splits: p.vector for p in apart[1]}


@pytest.mark.slow
def test_the_llama_layers_alike_projections_plan_alike():
    """The LLaMA 3 8B layer on h100 X=4,Y=2: its key and value projections (576 pieces each) and its gate
    and up projections (225 each), each planned apart, are the same pieces renamed to the last bit; a
    bounded search plans 927 distinct of the 1,218 pieces it needs."""
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_search import _layer_text
    space = Space.of(_layer_text(), "X=4,Y=2", "h100")
    subs = {at: pcs.alone(space, at) for at in pcs.statements(space)}
    options = dict(dims=dict(space.program.ranking), hw="h100", backward=True)
    work = Keyed(subs, list(space.candidates())).work
    for a, b, rename, n in ((4, 5, {"Kn": "Vn", "Wk": "Wv"}, 576), (9, 10, {"U1": "U2", "W1": "W2"}, 225)):
        got = [{tuple(sorted((rename.get(t, t), d) for t, d in p.splits)): p.vector
                for p in pcs.all_pieces(space, {at: subs[at]}, options, work=[w for w in work if w[0] == at])[0]}
               for at in (a, b)]
        assert len(got[0]) == n and got[0] == got[1]
    b = bounded.Bounds(space, options)
    for _, i in sorted(b.order())[:200]:
        b.whole(i)
    assert len(b.alike) < b.planned
