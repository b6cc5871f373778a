"""symcost search as a user meets it: the Python API takes what the command line takes, the result is a
frozen value whose JSON carries each candidate's program, the labels say what was searched (sizes as bound,
link kinds), and long work says how long it will take and keeps what it found when stopped."""
import dataclasses
import json
import re

import pytest

import symcost
from symcost import caching, progress
from symcost.cli import main
from symcost.searching import search

from conftest import ROOT

MLP = (ROOT / "examples" / "mlp.sc").read_text()


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_api_takes_a_dict_mesh_with_vs_and_jobs():
    """Both calls a user tried: a dict mesh with ``vs`` (it raised AttributeError) and ``jobs="auto"`` (it
    raised TypeError) give the ranking the string mesh and one process give."""
    by_dict = symcost.search(MLP, mesh={"X": 4, "Y": 4}, dims="B=65536", hw="tpu-v5p", vs="B")
    by_text = symcost.search(MLP, mesh="X=4,Y=4", dims="B=65536", hw="tpu-v5p", vs="B", jobs="auto")
    assert by_dict.candidates == by_text.candidates == 81     # 2x2x4 slice: X on the 2x2, Y on the 4
    assert [p.layouts for p in by_dict.ranked] == [p.layouts for p in by_text.ranked]
    assert [p.t_step for p in by_dict.ranked] == [p.t_step for p in by_text.ranked]
    assert [r.best for r in by_dict.regimes] == [r.best for r in by_text.regimes]


def test_the_result_is_frozen_and_each_candidate_carries_its_program():
    r = search(MLP, "X=4,Y=2", "B=65536", "h100", backward=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.priced = 0
    data = r.as_dict(top=3)
    assert len(data["ranked"]) == 3
    for item in data["ranked"]:
        for layout in item["layouts"].values():
            assert layout in item["program"]
        # ready for derive: the engine alone plans it, at the sizes searched, to the same step and collectives
        alone = symcost.derive(item["program"], "X=4,Y=2", data["dims"], "h100", backward=True)
        assert alone.numbers().t_step == pytest.approx(item["t_step"], rel=1e-12)
        assert [s.signature() for s in alone.collectives] == item["collectives"]


def test_search_echoes_the_sizes_it_bound():
    """``--dims B=65536`` over a program whose rank statement says B=1048576: the program shown, and each
    candidate's, is the one priced (it said "rank B=1048576")."""
    r = search(MLP, "X=4", "B=65536", "tpu-v5p")
    assert "rank B=65536, D=8192, F=32768" in str(r.space.program)
    assert "1048576" not in r.as_dict(1)["program"] and "1048576" not in r.as_dict(1)["ranked"][0]["program"]


@pytest.mark.parametrize("mesh, hw, kind", [("X=4,Y=2", "h100", "nvlink"), ("X=16,Y=16", "tpu-v5p", "ici"),
                                            ("X=4,Y=2:dcn", "tpu-v5p", None)])
def test_the_mesh_line_and_json_name_link_kinds(capsys, mesh, hw, kind):
    """The link models are the mesh's as it was laid on the preset (its placement decides wraparound), in
    the JSON and on the mesh line, whatever the program (one einsum here)."""
    from symcost.mesh import link_models
    from symcost.searching.space import Space
    text = "param W[D, F]\nOut[B, F] = In[B, D] *_D W[D, F]"
    laid = link_models(Space.of(text, mesh, hw).mesh)
    dims = ("--dims", "B=65536,D=8192,F=8192")
    code, out, _ = run(capsys, "search", text, "--mesh", mesh, "--hw", hw, *dims, "--top", "1", "--json")
    data = json.loads(out)
    assert code == 0 and data["links"] == laid
    assert all(v["kind"] == kind for v in laid.values()) if kind else laid["Y"]["kind"] == "dcn"
    code, out, _ = run(capsys, "search", text, "--mesh", mesh, "--hw", hw, *dims, "--top", "1")
    line = next(x for x in out.splitlines() if x.startswith("mesh: "))
    for axis, model in laid.items():
        size = data["mesh"][axis]
        wrap = "" if model["kind"] != "ici" else ", wrap" if model["wrap"] else ", no wrap"
        count = f", {model['links']} links" if model["links"] != 1 else ""     # X=4 on v5p: a 2x2 of its slice
        assert f"{axis}={size} ({model['kind']}{count}{wrap})" in line


def test_the_count_and_an_estimate_come_before_the_answer(capsys):
    """On a terminal: the candidate count before anything is priced, then, after the first candidates,
    how long the rest will take."""
    with progress.showing(True):
        search(MLP, "X=4,Y=2", "B=65536", "tpu-v5p")
    err = capsys.readouterr().err
    assert "search: 81 candidates (81 assignments, symmetric duplicates collapsed) to price on 1 process" in err
    assert re.search(r"search: about \d+ s more at [\d,.]+ candidates a second \(the first \d+\)", err)
    with progress.showing(False):           # a library call says nothing
        search(MLP, "X=4,Y=2", "B=65536", "tpu-v5p")
    assert capsys.readouterr().err == ""


def _stopped_after(k):
    """A pricing that is interrupted (Ctrl-C) after ``k`` candidates."""
    from symcost.searching import pool
    real = pool.priced_all

    def priced_all(*a, **kw):
        for i, p in enumerate(real(*a, **kw)):
            if i == k:
                raise KeyboardInterrupt
            yield p
    return priced_all


def test_ctrl_c_keeps_the_best_found_so_far(monkeypatch, capsys):
    import symcost.searching as searching
    whole = search(MLP, "X=4,Y=2", "B=65536", "tpu-v5p")            # the command line's below: --backward
    monkeypatch.setattr(searching, "priced_all", _stopped_after(30))
    part = search(MLP, "X=4,Y=2", "B=65536", "tpu-v5p")
    assert not part.complete and whole.complete and part.priced == 30
    first = set(list(part.space.candidates())[:30])
    assert {p.candidate for p in part.ranked} == first
    best = min((p for p in whole.ranked if p.candidate in first), key=lambda p: (p.t_step, p.t_comms))
    assert part.ranked[0].t_step == best.t_step
    code, out, _ = run(capsys, "search", "examples/mlp.sc", "--mesh", "X=4,Y=2", "--hw", "tpu-v5p", "--dims",
                       "B=65536", "--backward", "--top", "1")
    assert code == 130
    assert "stopped (Ctrl-C) after 30 of 81 shardings: the best so far" in out and " 1. " in out
    code, out, _ = run(capsys, "search", "examples/mlp.sc", "--mesh", "X=4,Y=2", "--hw", "tpu-v5p", "--dims",
                       "B=65536", "--json")
    assert code == 130 and json.loads(out)["complete"] is False


def test_a_search_owns_its_caches(monkeypatch):
    """A search prices in a planning context of its own, its caches wider than a derivation's: the
    process's caches are as they were when it ends, and its plans are those derived outside it."""
    from symcost.searching import WIDER, pool
    caching.clear()
    symcost.derive("In[B_X, D_Y] *_D W[D, F_Y] -> Out[B_X, F_Y]", "X=4,Y=4")
    process, held = caching.current(), caching.entries()
    bounds = [c.cache_info().maxsize for c in caching.registered()]
    with caching.context(wider=4):
        assert [c.cache_info().maxsize for c in caching.registered()] == \
            [4 * b if c.memo.widens else b for c, b in zip(caching.registered(), bounds)]
    seen = []
    real = pool.price

    def spy(*args, **kwargs):
        seen.append((caching.current() is process, caching.current().wider))
        return real(*args, **kwargs)
    monkeypatch.setattr(pool, "price", spy)
    inside = search(MLP, "X=4,Y=2", "B=65536", "tpu-v5p", backward=True)
    assert len(seen) == 81 and set(seen) == {(False, WIDER)}
    assert caching.current() is process and caching.entries() == held
    outside = [symcost.derive(inside.program_of(p), "X=4,Y=2", inside.dims, "tpu-v5p", backward=True).numbers().t_step
               for p in inside.ranked[:10]]
    assert outside == [p.t_step for p in inside.ranked[:10]]


def test_a_search_keeps_the_callers_cache_mode(monkeypatch):
    """Where caches are off (or checked), the search's own context is so too: the no-cache property of a
    search is not quietly run with caches."""
    from symcost.searching import pool
    seen = []
    real = pool.price

    def spy(*args, **kwargs):
        c = caching.current()
        seen.append((c.enabled, c.check))
        return real(*args, **kwargs)
    monkeypatch.setattr(pool, "price", spy)
    with caching.disabled():
        search(MLP, "X=4", "B=65536", "tpu-v5p")
    with caching.context(check=True):
        search(MLP, "X=4", "B=65536", "tpu-v5p")
    assert seen == [(False, False)] * 9 + [(True, True)] * 9
