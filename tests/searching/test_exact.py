"""search --exact: the mixed-integer program's optimum is the brute-force optimum of its pieces, its bound
is below every plan the ordinary search prices, its best plan is the engine's and runs on the simulator,
and without scipy it says what to install."""
import importlib.util
import itertools
import json
import sys

import pytest
from conftest import ROOT

import symcost
from symcost.cli import main
from symcost.searching import pieces as pcs
from symcost.searching import search
from symcost.searching.exact import undominated
from symcost.searching.milp import Model
from symcost.searching.space import Candidate, Space
from symcost.simulate import check_plan

#: every test but the one of its absence needs scipy (the ``exact`` extra, installed by ``make test``)
needs_scipy = pytest.mark.skipif(importlib.util.find_spec("scipy") is None,
                                 reason="search --exact needs scipy (the exact extra)")


#: the MLP written as two statements: H is a tensor of its own, shared by both (its layout is a choice)
TWO = """
param W_in[D, F], W_out[F, D]
H[B, F] = In[B, D] *_D W_in[D, F]
Out[B, D] = H[B, F] *_F W_out[F, D]
"""
DIMS = dict(B=65536, D=8192, F=32768)
OPTIONS = dict(dims=DIMS, hw="tpu-v5p", backward=True)


def _pieces(mesh):
    space = Space.of(TWO, mesh, "tpu-v5p")
    return space, [pcs.statement_pieces(space, at, OPTIONS) for at in pcs.statements(space)]


def _brute_force(by_statement) -> float:
    """The least largest-resource-sum over every choice of one piece a statement that agrees on every
    tensor two statements share."""
    best = float("inf")
    for chosen in itertools.product(*by_statement):
        layouts: dict = {}
        if any(layouts.setdefault(t, s) != s for p in chosen for t, s in p.splits):
            continue
        best = min(best, max(map(sum, zip(*(p.vector for p in chosen)))))
    return best


@needs_scipy
@pytest.mark.parametrize("mesh", ["X=4", pytest.param("X=2,Y=2", marks=pytest.mark.slow)])
def test_the_programs_optimum_is_the_brute_force_optimum(mesh):
    space, by_statement = _pieces(mesh)
    assert [len(ps) for ps in by_statement] == [12 ** len(space.mesh.axes)] * 2   # 3 x 4 roles an axis
    brute = _brute_force(by_statement)
    whole = Model(tuple(tuple(ps) for ps in by_statement), len(pcs.resources(space.mesh))).solve()
    pruned = Model(undominated(by_statement), len(pcs.resources(space.mesh))).solve()
    assert whole.value == pytest.approx(brute, rel=1e-9)
    assert pruned.value == pytest.approx(brute, rel=1e-9)
    assert whole.bound <= brute * (1 + 1e-9)


@needs_scipy
def test_a_solution_cut_off_gives_the_next_best():
    space, by_statement = _pieces("X=4")
    model = Model(tuple(tuple(ps) for ps in by_statement), len(pcs.resources(space.mesh)))
    first = model.solve()
    model.exclude(first.chosen)
    second = model.solve()
    assert second.chosen != first.chosen and second.value >= first.value * (1 - 1e-12)


@needs_scipy
def test_a_piece_spends_what_its_statement_spends_in_the_whole_plan():
    """The pieces of a candidate whose statements share no tensor add up to no more than the engine's
    totals of the whole program's plan on every resource, and to the same compute."""
    space, by_statement = _pieces("X=4")
    cand = Candidate((("F", "B"),), ("X",))     # FSDP: the weights split on F, the batch on B
    subs = [pcs.alone(space, at) for at in pcs.statements(space)]
    chosen = [next(p for p in ps if p.splits == pcs.splits_of(sub, cand)) for sub, ps in zip(subs, by_statement)]
    plan = symcost.derive(str(space.program_for(cand)), mesh="X=4", dims=DIMS, hw="tpu-v5p", backward=True)
    whole = pcs.vector(plan.step_costs(), plan.mesh)
    summed = [sum(v) for v in zip(*(p.vector for p in chosen))]
    assert all(p.exact for p in chosen)
    assert summed[:2] == pytest.approx(whole[:2], rel=1e-12)         # compute and HBM: the same einsums
    # each axis's links: no more than the plan the whole step takes (a piece holds the least over the
    # statement's equally fast forward plans: here AllGather_XY, or AllGather_X then AllGather_Y)
    assert all(a <= b * (1 + 1e-12) for a, b in zip(summed, whole))


@pytest.mark.parametrize("text", [
    "rank B=65536, D=8192, F=32768\nparam W_in[D, F], W_out[F, D]\nH[B, F] = In[B, D] *_D W_in[D, F]\n"
    "Out[B, D] = H[B, F] *_F W_out[F, D]\n",
    # a parameter pinned to X: on one device it is still written over X (of size one), which no plan
    # without moves reaches
    "rank B=65536, D=8192, F=32768\nparam W_in[D_X, F], W_out[F, D]\nH[B, F] = In[B, D] *_D W_in[D_X, F]\n"
    "Out[B, D] = H[B, F] *_F W_out[F, D]\n",
])
def test_a_statements_least_is_its_work_on_one_device_shared_evenly(text):
    """Each statement's least (forward and backward): its local steps planned on one device (every axis of
    size one), their compute and HBM time shared by every device, no communication; planned with no move
    allowed (no layout searched) where the statement's tensors are whole, as the search's own moves plan it
    to the bit."""
    from symcost.env import Env
    from symcost.pricing import totals
    from symcost.program import derive_program
    from symcost.searching.space import Candidate, Space
    space = Space.of(text, "X=4,Y=2", "tpu-v5p")
    options = dict(dims=dict(space.program.ranking), hw="tpu-v5p", backward=True)
    for at in pcs.statements(space):
        sub = pcs.alone(space, at)
        prog = sub.program_for(Candidate(((None, None), (None, None)), ("X", "Y")))
        plan = derive_program(prog, {"X": 1, "Y": 1}, options["dims"], "tpu-v5p", backward=True, alternatives=False)
        local = totals([c for c in plan.step_costs() if c.local], Env.numeric(plan.mesh), "none")
        assert pcs.floor(sub, options, space.mesh) == (float(local.t_math) / 8, float(local.t_hbm) / 8, 0.0, 0.0)


def test_a_piece_that_is_not_exact_is_planned_without_its_backward_pass():
    """A statement that reads a tensor other statements read keeps only its forward steps (its backward is
    the floor), so its plans are derived forward only: the same forward resources, to the bit, as its plans
    with the backward pass, the least over its equally fast forward plans included. Every key of the MLP's
    first statement on ``X=2,Y=2`` once a third statement reads its input and weight again."""
    space = Space.of(TWO + "G[B, F] = In[B, D] *_D W_in[D, F]\n", "X=2,Y=2", "tpu-v5p")
    where = pcs.statements(space)
    exact = pcs.exactly(space, {at: None for at in where}, backward=True)   # the two not exact: their floors' names
    assert exact == {where[0]: ("H", ("In", "W_in")), where[1]: True, where[2]: ("G", ("In", "W_in"))}
    sub, compared = pcs.alone(space, where[0]), 0
    for cand, _ in pcs.keys(sub):
        with_backward = pcs._priced(sub, cand, OPTIONS, space.mesh, exact=True)
        if with_backward is not None:
            assert pcs._priced(sub, cand, OPTIONS, space.mesh, exact=False) == (None, with_backward[1])
            compared += 1
    assert compared == 144                     # 12 roles an axis, each key planned both ways


@needs_scipy
@pytest.mark.parametrize("mesh", ["X=4", pytest.param("X=2,Y=2", marks=pytest.mark.slow)])
def test_the_bound_is_below_every_plan_and_the_best_is_the_searchs(mesh):
    every = search(TWO, mesh, DIMS, "tpu-v5p", backward=True)
    exact = search(TWO, mesh, DIMS, "tpu-v5p", backward=True, exact=True)
    assert exact.complete and exact.gap <= 1e-3
    assert all(p.t_step >= exact.bound * (1 - 1e-12) for p in every.ranked)
    assert exact.best.t_step <= every.best.t_step * (1 + 1e-12)
    # the search's space is solved to within the exact search's gap (0.1 %)
    assert every.best.t_step <= exact.search_best.t_step <= every.best.t_step * (1 + 1e-3)
    derived = symcost.derive(exact.program_of(exact.best), mesh=mesh, dims=DIMS, hw="tpu-v5p", backward=True)
    assert derived.numbers().t_step == pytest.approx(exact.best.t_step, rel=1e-12)


@needs_scipy
@pytest.mark.slow      # workers started four times: about 2.5 s
def test_pieces_planned_in_workers_are_the_pieces_planned_here():
    """``jobs`` processes plan the pieces (each sends back a key's resource vectors): the same pieces, in the
    same order, so the same bound and the same best plan."""
    space = Space.of(TWO, "X=2,Y=2", "tpu-v5p")
    where = pcs.statements(space)
    subs = {at: pcs.alone(space, at) for at in where}
    here = pcs.all_pieces(space, subs, OPTIONS)
    assert pcs.all_pieces(space, subs, OPTIONS, jobs=2) == here
    assert here == [pcs.statement_pieces(space, at, OPTIONS) for at in where]
    one, two = (search(TWO, "X=4", DIMS, "tpu-v5p", backward=True, exact=True, jobs=j) for j in (1, 2))
    assert (two.bound, two.gap, two.best.t_step, two.program_of(two.best)) == \
        (one.bound, one.gap, one.best.t_step, one.program_of(one.best))


@needs_scipy
def test_the_best_plan_runs_on_the_simulator():
    """The plan the exact search shows, written with its layouts pinned, derived again and run on
    simulated devices: every tensor and gradient equals the unsharded computation."""
    sizes = dict(B=16, D=8, F=16)
    r = search(TWO, "X=4", sizes, "tpu-v5p", backward=True, exact=True)
    plan = symcost.derive(r.program_of(r.best), mesh="X=4", dims=sizes, backward=True)
    out = check_plan(plan, sizes)
    assert {"dW_in", "dW_out", "Out"} <= set(out)


@needs_scipy
def test_json_carries_the_bound_and_the_gap(capsys):
    code = main(["search", TWO, "--backward", "--mesh", "X=4", "--dims", "B=65536,D=8192,F=32768", "--hw",
                 "tpu-v5p", "--exact", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(data, json.loads((ROOT / "symcost" / "schemas" / "search.json").read_text()))
    assert 0 < data["bound"] <= data["ranked"][0]["t_step"]
    assert data["gap"] == pytest.approx((data["ranked"][0]["t_step"] - data["bound"]) / data["ranked"][0]["t_step"])
    assert data["search_best"]["slower_by"] >= 0
    assert data["time_limit"] is None                   # the gap closed


@needs_scipy
def test_ctrl_c_keeps_the_best_found_so_far(monkeypatch):
    """Stopped while it derives its second plan, the exact search returns the first with the bound proven
    until then, marked incomplete (the command line exits 130, as the ordinary search does)."""
    from symcost.searching import exact
    calls = []

    def stopping(*args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return exact_planned(*args, **kwargs)

    exact_planned = exact.planned
    monkeypatch.setattr(exact, "planned", stopping)
    space = Space.of(TWO, "X=4", "tpu-v5p")
    found = exact.solve(space, OPTIONS, gap=-1.0)          # a gap never closed: it goes on until stopped
    assert not found.complete and len(found.ranked) == 1 and len(calls) == 2
    assert 0 <= found.bound <= found.ranked[0].t_step
    assert found.gap == pytest.approx((found.ranked[0].t_step - found.bound) / found.ranked[0].t_step)


@needs_scipy
def test_a_gap_left_open_by_the_time_limit_is_said_as_such():
    """An exact search whose seconds run out before the gap closes is complete (not stopped by Ctrl-C: the
    command exits 0), says its time ran out, and does not call the search's best the optimum."""
    from symcost.cli.search import render
    from symcost.searching.exact import exact_search
    space = Space.of(TWO, "X=4", "tpu-v5p")
    r = exact_search(space, DIMS, OPTIONS, gap=-1.0, seconds=0.0)     # a gap never closed, no time to try
    assert r.complete and r.time_limit == 0.0 and r.priced >= 1 and r.gap >= 0
    assert r.as_dict()["time_limit"] == 0.0
    text = render(r, 1)
    assert "(its 0 s to close the gap ran out first: the best plan found, not proven optimal; --time-limit " \
           "gives it more)" in text
    assert "Ctrl-C" not in text and "is the optimum" not in text
    closed = search(TWO, "X=4", DIMS, "tpu-v5p", backward=True, exact=True)
    assert closed.complete and closed.time_limit is None and "ran out" not in render(closed, 1)


@needs_scipy
def test_the_time_limit_is_the_users(capsys, monkeypatch):
    """``--time-limit`` (Python: ``time_limit``) is the seconds the exact search spends closing its gap; it
    is the exact search's alone, and a number >= 0. A gap closed within it is proven whatever the limit."""
    from symcost.searching import exact
    given = []
    real = exact.exact_search

    def spy(*args, **kwargs):
        given.append(kwargs.get("seconds"))
        return real(*args, **kwargs)

    monkeypatch.setattr(exact, "exact_search", spy)
    r = symcost.search(TWO, "X=4", DIMS, "tpu-v5p", backward=True, exact=True, time_limit=0)
    assert r.complete and r.gap <= 1e-3 and r.time_limit is None      # the joint solve closed it at once
    args = ["search", TWO, "--backward", "--mesh", "X=4", "--dims", "B=65536,D=8192,F=32768", "--hw", "tpu-v5p"]
    assert main(args + ["--exact", "--time-limit", "2.5"]) == 0
    assert given == [0.0, 2.5] and "is the optimum" in capsys.readouterr().out
    for bad in ("5", -1, float("nan"), True):
        with pytest.raises(symcost.UsageError, match="a number >= 0"):
            symcost.search(TWO, "X=4", DIMS, "tpu-v5p", exact=True, time_limit=bad)
    for bad, says in ((["--time-limit", "5"], "give --exact too"), (["--exact", "--time-limit", "-1"], ">= 0")):
        assert main(args + bad) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err


def test_without_scipy_it_says_what_to_install(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    code = main(["search", TWO, "--backward", "--mesh", "X=4", "--dims", "B=65536,D=8192,F=32768", "--hw",
                 "tpu-v5p", "--exact"])
    err = capsys.readouterr().err
    assert code == 2
    assert "needs scipy" in err and "symcost[exact]" in err and "Traceback" not in err


@needs_scipy
def test_exact_refuses_what_it_does_not_solve(capsys):
    code = main(["search", TWO, "--mesh", "X=4", "--dims", "B=65536,D=8192,F=32768", "--hw", "tpu-v5p",
                 "--exact", "--objective", "memory"])
    assert code == 2 and "--exact" in capsys.readouterr().err


@needs_scipy
@pytest.mark.slow
def test_where_the_searchs_best_is_not_the_optimum_the_better_plan_is_shown_and_runs():
    """Three matmuls of their own widths on 2x2: the ordinary search (every statement sharded by the same
    roles) is beaten by a plan whose tensors each take their own layout. The exact search says by how much,
    and the better plan, written with its layouts pinned, is derived again to the same step time and run
    forward and backward on simulated devices (the plan chosen at the search's sizes, run at small ones)."""
    text = (ROOT / "examples" / "mlp3.sc").read_text()
    every = search(text, "X=2,Y=2", None, "tpu-v5p", backward=True)
    r = search(text, "X=2,Y=2", None, "tpu-v5p", backward=True, exact=True)
    assert every.best.t_step <= r.search_best.t_step <= every.best.t_step * (1 + 1e-3)
    assert r.best.t_step < every.best.t_step * (1 - 1e-3)          # better than every candidate of the search
    assert r.gap <= 1e-3 and all(p.t_step >= r.bound * (1 - 1e-12) for p in every.ranked)
    data = r.as_dict()
    assert data["search_best"]["slower_by"] == pytest.approx(every.best.t_step / r.best.t_step - 1, rel=1e-9)
    assert data["ranked"][0]["program"] == r.program_of(r.best)
    plan = symcost.derive(r.program_of(r.best), mesh="X=2,Y=2", dims=r.sizes, hw="tpu-v5p", backward=True)
    assert plan.numbers().t_step == pytest.approx(r.best.t_step, rel=1e-12)
    out = check_plan(plan, dict(B=8, D=8, F=16, E=8))
    assert {"Out", "dIn", "dW1", "dW2", "dW3"} <= set(out)


@needs_scipy
@pytest.mark.slow
def test_the_llama_layer_is_solved_within_one_percent():
    """The LLaMA 3 8B layer, forward and backward, on h100 X=4,Y=2: the best plan with a proven gap of at
    most 1 % (its time is a benchmark row: benchmarks/bench_search.py)."""
    from symcost.models.config import load_model_config
    from symcost.models.transformer import open_layer
    layer = open_layer(load_model_config("llama3-8b"), batch=1, seq=8192)[0]
    r = search(layer, "X=4,Y=2", None, "h100", backward=True, exact=True)
    assert r.gap <= 0.01
    assert r.bound <= r.best.t_step <= r.search_best.t_step


GPT = ("rank B=4, T=2048, S=2048, D=6144, K=64, G=1, H=96, F=24576\n"
       "param Wq[D, K, G, H], Wk[D, K, H], Wv[D, K, H], Wo[K, G, H, D], W1[D, F], W3[F, D]\n"
       + "\n".join(line for line in (ROOT / "examples" / "megatron_sp_layer.sc").read_text().replace("_Y", "").splitlines()
                   if line and not line.startswith(("#", "param")) and line.split(" = ")[0] != line.split(" = ")[-1]))


@needs_scipy
def test_a_layer_with_elementwise_work_is_solved_and_bounded():
    """Megatron's GPT layer with its norms, softmax, dropouts and residual adds (the SP example without its
    axes), forward and backward on h100 X=4: elementwise statements are pieces too (each planned alone at
    its tensors' layouts, forward and backward), the bound is below every one of the search's plans, and
    the best is the search's best."""
    assert "LayerNorm_D(X[B, T, D])" in GPT and "Xn[B, T, D] = Xn[B, T, D]" not in GPT
    every = search(GPT, "X=4", None, "h100", backward=True)
    exact = search(GPT, "X=4", None, "h100", backward=True, exact=True)
    assert exact.complete and exact.gap <= 1e-3
    assert all(p.t_step >= exact.bound * (1 - 1e-12) for p in every.ranked)
    assert exact.best.t_step == pytest.approx(every.best.t_step, rel=1e-12)


def test_explicit_collectives_are_refused_by_name():
    """``--exact`` splits a program into einsums and elementwise work; a collective written in it is refused
    with its line and what to do instead (the ordinary search ranks such programs)."""
    from symcost.errors import UsageError
    text = "param W[D, F]\nH[B, F_X] = X[B, D] *_D W[D, F]\nAllGather_X(H[B, F_X]) -> H[B, F]"
    assert search(text, "X=4", "B=4096,D=1024,F=1024", "h100").priced == 9
    with pytest.raises(UsageError, match=r"line 3 is collective work \(AllGather_X\(H\[B, F_X\]\) -> H\[B, F\]\), "
                                         r"which it does not split into pieces yet: search without --exact"):
        search(text, "X=4", "B=4096,D=1024,F=1024", "h100", exact=True)


def test_a_program_no_candidate_can_plan_says_why():
    """The exact search, like the search, raises the engine's own error where every candidate is refused."""
    import symcost
    text = "param W[D, F]\nH[B, F_X] = X[B, D] *_D W[D, F]\nHg[B, F] = AllGather_X(H[B, F_X])"
    with pytest.raises(symcost.SymcostError, match="unknown operation 'AllGather'"):
        search(text, "X=4", "B=4096,D=1024,F=1024", "h100", exact=True)
