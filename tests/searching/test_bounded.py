"""A bounded search (``search(..., top=K)``, the command line's default on a space of 1,000 candidates or
more) shows the best K the search that prices every candidate shows, in its order, deriving fewer."""
import json
import re

import numpy as np
import pytest

from symcost.cli import main
from symcost.errors import UsageError
from symcost.searching import bounded, search
from symcost.searching.space import Space

from conftest import ROOT

MLP = (ROOT / "examples" / "mlp.sc").read_text()
MLP3 = (ROOT / "examples" / "mlp3.sc").read_text()
#: two statements read the input and the first weight: in a search with the backward pass their gradients
#: add up (no statement's piece is exact); without it, every piece is
SHARED = ("rank B=65536, D=8192, F=32768\nparam W_in[D, F], W_out[F, D]\nH[B, F] = In[B, D] *_D W_in[D, F]\n"
          "Out[B, D] = H[B, F] *_F W_out[F, D]\nG[B, F] = In[B, D] *_D W_in[D, F]\n")


def _same_top(every, top, k: int) -> None:
    assert top.priced + top.bounded == every.priced == every.candidates
    assert [p.candidate for p in top.ranked[:k]] == [p.candidate for p in every.ranked[:k]]
    assert [p.t_step for p in top.ranked[:k]] == [p.t_step for p in every.ranked[:k]]
    assert all(p.fits for p in top.ranked[:k])


@pytest.mark.parametrize("text, mesh, dims, backward, k, derived", [
    pytest.param(MLP3, "X=4,Y=2", None, True, 10, 12, marks=pytest.mark.slow),           # of 400
    pytest.param(MLP3, "X=4,Y=2", None, False, 1, 2, marks=pytest.mark.slow),
    pytest.param(MLP3, "X=2,Y=2", "B=65536", True, 3, 3, marks=pytest.mark.slow),        # of 210
    (MLP3, "X=2,Y=2", None, True, 5, 5),
    # forward only, the bounds once held a backward floor on the links, which ranked tied candidates out
    (SHARED, "X=2,Y=2", None, False, 3, 5),
    (SHARED, "X=4,Y=2", None, False, 10, 10),
])
def test_the_top_is_the_top_of_every_candidate(monkeypatch, text, mesh, dims, backward, k, derived):
    """Spaces under :data:`bounded.FROM`, bounded here all the same: the best k and their order (ties broken
    by the space's order, whatever order the candidates were derived in) are those of every candidate.
    ``derived``: how many the bounded search derives (of candidates as fast as the k-th, only those whose
    communication bound is not above the k-th's)."""
    monkeypatch.setattr(bounded, "FROM", 1)
    every = search(text, mesh, dims, "tpu-v5p", backward=backward, jobs=1)
    top = search(text, mesh, dims, "tpu-v5p", backward=backward, jobs=1, top=k)
    _same_top(every, top, k)
    assert top.priced == derived


def test_each_bound_is_at_most_what_the_engine_derives(monkeypatch):
    """The first bounds (every statement at its least) are at most the whole ones (every statement's
    piece), which are at most the step time and communication time the engine derives; the heap the walk
    starts from holds every candidate once, by its first bounds."""
    space = Space.of(MLP3, "X=2,Y=2", "tpu-v5p")
    b = bounded.Bounds(space, dict(dims=dict(space.program.ranking), hw="tpu-v5p", backward=True))
    every = {p.candidate: p for p in search(MLP3, "X=2,Y=2", None, "tpu-v5p", backward=True, jobs=1).ranked}
    heap = b.order()
    assert len(heap) == len(b.cands) == len(every) and b.first == () and b.planned == 0
    assert sorted(i for _, i in heap) == list(range(len(b.cands)))
    first = [b.bounds(i) for i in range(len(b.cands))]
    whole = [b.whole(i) for i in range(len(b.cands))]
    assert b.planned == 312                                   # every piece the candidates take, once each
    for c, (low, comms), (low2, comms2) in zip(b.cands, first, whole):
        assert low <= low2 <= every[c].t_step * (1 + 1e-12)
        assert comms <= comms2 <= every[c].t_comms * (1 + 1e-12)
    assert all(low > 0.5 * every[c].t_step for c, (low, _) in zip(b.cands, whole))       # not a trivial bound
    assert sum(comms > 0.5 * every[c].t_comms for c, (_, comms) in zip(b.cands, whole)) > len(every) / 2


def test_a_small_space_one_statement_or_another_objective_prices_every_candidate(monkeypatch):
    small = search(MLP3, "X=2,Y=2", None, "tpu-v5p", backward=True, top=3)
    assert small.bounded == 0 and small.priced == small.candidates == 210 and small.top is None
    space = Space.of(MLP3, "X=2,Y=2", "tpu-v5p")
    big = dict(top=10, objective="time", vs=None, efficiency=False, overlap=True)
    assert not bounded.applies(space, **big)                          # 210 < FROM
    monkeypatch.setattr(bounded, "FROM", 210)
    assert bounded.applies(space, **big)
    # the MLP is one statement (a chain of two einsums): its pieces would be its candidates, planned twice
    assert not bounded.applies(Space.of(MLP, "X=16,Y=16,Z=16", "tpu-v5p"), **big)
    for other in (dict(top=None), dict(objective="comms"), dict(vs="B"), dict(efficiency=True),
                  dict(overlap=False)):
        assert not bounded.applies(space, **{**big, **other}), other


@pytest.mark.parametrize("top", [0, -1, 2.5, True, "3"])
def test_top_must_be_a_count(top):
    with pytest.raises(UsageError, match="top must be a number of candidates"):
        search(MLP, "X=4", "B=65536", "tpu-v5p", top=top)


def test_the_command_line_says_what_it_derived_and_every_prices_them_all(monkeypatch, capsys):
    monkeypatch.setattr(bounded, "FROM", 1)
    argv = ["search", str(ROOT / "examples" / "mlp3.sc"), "--backward", "--mesh", "X=2,Y=2", "--hw", "tpu-v5p",
            "--top", "2", "--jobs", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "priced 2 of 210 shardings, from the least bound up, in " in out
    assert ("the other 208 rank below the best 2: by the bounds of its statements planned alone, each is slower, "
            "or as fast with more communication (--every prices them all)") in out
    assert main(argv + ["--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["bounded"] > 0 and got["priced"] + got["bounded"] == got["candidates"] == 210
    assert main(argv + ["--json", "--every"]) == 0
    every = json.loads(capsys.readouterr().out)
    assert every["bounded"] == 0 and every["priced"] == 210
    assert [c["program"] for c in got["ranked"]] == [c["program"] for c in every["ranked"]]


def test_with_several_processes_some_pieces_are_planned_ahead_and_the_top_is_the_same(monkeypatch, capsys):
    """With two processes the pieces of the statement with the fewest (here the second einsum's 86) are
    planned ahead in them, every one, and the walk finds them at hand: the same top, in the same order, no
    more candidates derived."""
    from symcost import progress
    monkeypatch.setattr(bounded, "FROM", 1)
    space = Space.of(MLP3, "X=2,Y=2", "tpu-v5p")
    options = dict(dims=dict(space.program.ranking), hw="tpu-v5p", backward=True)
    with progress.showing(True):
        b = bounded.Bounds(space, options, jobs=2)
    assert "86 of the 312 pieces the candidates take (statement 3) planned ahead on 2 processes" in \
        capsys.readouterr().err
    assert b.first == (3,) and b.planned == 86 and all(b.done[b._at.index(3)])
    alone = bounded.Bounds(space, options)
    key = (lambda p: (p.t_step, p.t_comms))
    two = [g[0] for g in bounded.until_proven(b, 5, key) if g]
    one = [g[0] for g in bounded.until_proven(alone, 5, key) if g]
    assert [p.candidate for p in two] == [p.candidate for p in one] and b.derived == alone.derived
    assert sorted(two, key=key)[:5] == sorted(one, key=key)[:5]


def test_its_bar_has_no_end(monkeypatch, capsys):
    """A bounded search derives candidates until its top is proven, not every one: its bar counts those
    derived without an end (no share of the space, no time left; it shows the pieces planned so far)."""
    from symcost import progress
    monkeypatch.setattr(bounded, "FROM", 1)
    monkeypatch.setattr(progress, "DELAY", 0)
    with progress.showing(True):
        r = search(MLP3, "X=2,Y=2", None, "tpu-v5p", backward=True, jobs=1, top=2)
    bars = [x for x in capsys.readouterr().err.replace("\r", "\n").splitlines() if x.startswith("pricing candidates")]
    assert bars and r.priced == 2
    assert all(re.fullmatch(r"pricing candidates: \d+ candidates \[.*\]\s*", b) for b in bars), bars
    assert not any("%" in b or "/210" in b for b in bars)


def test_the_walk_keeps_the_least_bound_left_and_the_slowest_of_the_best_for_its_bar(monkeypatch):
    """As it goes, the walk keeps the least bounds left and, once it has found as many as asked, the slowest
    of them; when it stops, those bounds rank after the slowest (the proof). The bar says how far under it
    the step-time bound still is, or, where it may be as fast, how far under its communication the bound
    left is."""
    import types

    from symcost.searching import _Bounded
    monkeypatch.setattr(bounded, "FROM", 1)
    space = Space.of(MLP3, "X=2,Y=2", "tpu-v5p")
    b = bounded.Bounds(space, dict(dims=dict(space.program.ranking), hw="tpu-v5p", backward=True))
    key = (lambda p: (p.t_step, p.t_comms))
    seen, found = [], []
    for got in bounded.until_proven(b, 3, key):
        seen.append((b.least, b.kth))
        found.extend(got)
    assert [k for _, k in seen[:2]] == [None, None] and all(k is not None for _, k in seen[2:])
    assert b.kth == sorted(found, key=key)[2]
    assert not any(bounded.beaten(least, k) for least, k in seen[2:])     # each derived was not ruled out
    assert bounded.beaten(b.least, b.kth)                                 # the one left ranks after it

    def label(least, t_step, t_comms, top):
        kth = types.SimpleNamespace(t_step=t_step, t_comms=t_comms)
        return _Bounded.label(types.SimpleNamespace(bounds=types.SimpleNamespace(planned=1234, least=least, kth=kth),
                                                    top=top), None)
    assert label((1.5e-3, 0.0), 2e-3, 1e-4, 10) == \
        "1,234 pieces planned; least bound left 25.00% under the 10th best (2 ms)"
    assert label((1.5e-3, 0.25e-3), 1.5e-3, 1e-3, 1) == \
        "1,234 pieces planned; bound left as fast as the best (1.5 ms), its communication 75.00% under"
    assert _Bounded.label(types.SimpleNamespace(bounds=types.SimpleNamespace(planned=1234, kth=None), top=3),
                          None) == "1,234 pieces planned"


def test_a_candidate_whose_statement_is_refused_alone_is_derived_not_dropped(monkeypatch):
    """Where the engine refuses a statement planned alone (no piece), the candidates that take that sharding
    have no bound: they are derived (first), so the top is still every candidate's."""
    from symcost.searching import pieces
    real = pieces._priced
    refused: list = []

    def some_refused(sub, cand, options, mesh, exact=True):
        key = (str(sub.program), pieces.splits_of(sub, cand))
        if key in refused or "G[B, E] =" in str(sub.program) and len(refused) < 3:   # the second einsum, thrice
            if key not in refused:
                refused.append(key)
            return None
        return real(sub, cand, options, mesh, exact)
    monkeypatch.setattr(pieces, "_priced", some_refused)
    space = Space.of(MLP3, "X=2,Y=2", "tpu-v5p")
    b = bounded.Bounds(space, dict(dims=dict(space.program.ranking), hw="tpu-v5p", backward=True))
    unbounded = [e for e in (b.whole(i) for i in range(len(b.cands))) if e[0] == 0.0]
    assert len(refused) == 3 and unbounded and all(comms == 0.0 for _, comms in unbounded)
    monkeypatch.setattr(bounded, "FROM", 1)
    top = search(MLP3, "X=2,Y=2", None, "tpu-v5p", backward=True, jobs=1, top=5)
    every = search(MLP3, "X=2,Y=2", None, "tpu-v5p", backward=True, jobs=1)
    assert top.priced >= len(unbounded)
    _same_top(every, top, 5)


def test_ctrl_c_while_deriving_keeps_the_best_derived_so_far(monkeypatch):
    """Stopped while it derives, a bounded search returns what it derived, ``complete`` false, nothing
    counted as bounded (what was left is not proven)."""
    real, calls = bounded.price, []

    def stopped(space, cand, **kw):
        calls.append(cand)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(space, cand, **kw)
    monkeypatch.setattr(bounded, "price", stopped)
    monkeypatch.setattr(bounded, "FROM", 1)
    r = search(MLP3, "X=2,Y=2", None, "tpu-v5p", backward=True, jobs=1, top=5)
    assert not r.complete and r.priced == 2 and r.bounded == 0 and r.ranked[0].fits


def test_the_text_counts_what_the_engine_refuses_apart():
    """Of a bounded space, the candidates priced, those the engine refuses (derived first, having no bound)
    and those left out add up to the space (the LLaMA 3 8B layer with its elementwise work on h100 X=4,Y=2:
    36 priced, 612 refused, 2,268 left out)."""
    from types import SimpleNamespace

    from symcost.cli.search import _bounded_lines
    r = SimpleNamespace(candidates=2916, priced=36, bounded=2268, seconds=3.3, assignments=2916, feasible=36, top=3)
    first, second = _bounded_lines(r, " 80 GB of HBM")
    assert first.startswith("priced 36 of 2,916 shardings (612 others the engine refuses), from the least bound up")
    assert second.startswith("the other 2,268 rank below the best 3:")
    r.bounded = 2880
    assert "refuses" not in _bounded_lines(r, "")[0]


@pytest.mark.parametrize("text, mesh, coded", [(MLP3, "X=2,Y=2", True), (MLP3, "X=4,Y=2,Z=2", True),
                                               (MLP3, "X=4,Y=2,Z=2", False), (MLP, "X=2,Y=4,Z=2", True)])
def test_each_candidates_keys_are_its_statements_splits(text, mesh, coded, monkeypatch):
    """The keys the tables hold for a candidate are those each statement's splitter gives it, and ``work``
    takes each key once, with the first candidate that takes it, in the order a walk over the candidates,
    statement by statement, first meets them; alike whether a row of roles is told apart as one number or,
    where that would not fit in 62 bits, as the row itself (``coded`` False)."""
    from symcost.searching import keyed, pieces as pcs
    from symcost.searching.keyed import Keyed
    rows = np.array([[1, 2], [2, 1], [1, 2]])
    assert keyed._coded(rows, 3).tolist() == [5, 7, 5]                       # a number a row, base 3
    assert keyed._coded(rows, 2 ** 31).tolist() == rows.tolist()             # 2^62 and more: the rows
    if not coded:
        monkeypatch.setattr(keyed, "_coded", lambda seen, base: seen)
    space = Space.of(text, mesh, "tpu-v5p")
    subs = {at: pcs.alone(space, at) for at in pcs.statements(space)}
    cands = list(space.candidates())
    table, splits = Keyed(subs, cands), [pcs.splitter(sub) for sub in subs.values()]
    first: dict = {}
    for i, cand in enumerate(cands):
        keys = tuple(split(cand) for split in splits)
        assert table.of(i) == keys
        for at, k in zip(subs, keys):
            first.setdefault((at, k), cand)
    assert table.work == [(at, cand, k) for (at, k), cand in first.items()]
    assert sum(len(ks) for ks in table.keys.values()) == len(first) <= len(cands) * len(subs)


def test_the_candidates_are_listed_in_mesh_order_once_each():
    """Interchangeable axes (Y and Z here, of one size, though X lies between them) take multisets of roles,
    each candidate once, its roles written in mesh order."""
    space = Space.of(MLP3, "Y=2,X=4,Z=2", "tpu-v5p")
    assert space.classes == (("Y", "Z"), ("X",))
    cands = list(space.candidates())
    assert len(cands) == len(set(cands)) == space.size
    assert all(c.axes == ("Y", "X", "Z") for c in cands)
    pairs = [(c.roles[0], c.roles[2]) for c in cands if c.roles[1] == space.roles[0]]
    r = len(space.roles)
    assert len(pairs) == len(set(pairs)) == r * (r + 1) // 2
    assert {frozenset(p) for p in pairs} == {frozenset((a, b)) for a in space.roles for b in space.roles}


def test_the_bounds_summed_as_arrays_are_each_candidates_own():
    """The candidates' bounds summed as arrays a statement at a time (the heap the walk starts from) are
    each candidate's bounds from the pieces at hand to the bit, before any piece is planned and after some
    are (the others at their least)."""
    space = Space.of(MLP3, "X=2,Y=2", "tpu-v5p")
    b = bounded.Bounds(space, dict(dims=dict(space.program.ranking), hw="tpu-v5p", backward=True))
    for planned in (0, 40):
        for i in range(0, len(b.cands), 5)[:planned]:
            b.refine(i)
        each = sorted((bounded.order(*b.bounds(i)), i) for i in range(len(b.cands)))
        assert sorted(b.order()) == each and len(each) == space.size
    assert b.planned == 40 and len({e[0] for e in each}) > 1           # bounds that tell the candidates apart


def test_a_candidates_missing_pieces_are_planned_the_statement_with_the_fewest_first():
    """A candidate's pieces not planned yet are planned one at a time, its statement with the fewest pieces
    first (here the second einsum, 86 pieces, then the third, 104, then the first, 122): each such piece is
    shared by the most candidates; each planned once (a later candidate taking it finds it at hand)."""
    space = Space.of(MLP3, "X=2,Y=2", "tpu-v5p")
    b = bounded.Bounds(space, dict(dims=dict(space.program.ranking), hw="tpu-v5p", backward=True))
    assert b.size == {2: 122, 3: 86, 4: 104}
    order = []
    while True:
        before = [list(d) for d in b.done]
        if not b.refine(7):
            break
        order.extend(b._at[j] for j, (d0, d1) in enumerate(zip(before, b.done)) if d0 != d1)
    assert order == [3, 4, 2] and b.planned == 3
    same = next(i for i in range(len(b.cands)) if i != 7 and b.keyed.of(i)[1] == b.keyed.of(7)[1]
                and b.keyed.of(i)[2] != b.keyed.of(7)[2])
    assert b.done[1][b.keyed.row(same)[1]] and b.at_hand(same)[1] == b.at_hand(7)[1]     # statement 3's, at hand
    assert b.refine(same) and b.planned == 4 and b.done[2][b.keyed.row(same)[2]]          # then statement 4's
