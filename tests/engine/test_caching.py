"""Caches are owned by a planning context, keep immutable answers, and change no answer: a plan derived
without any cache is the plan derived with them."""
import glob
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings

import symcost
from symcost import caching
from symcost.errors import SymcostError
from symcost.simulate import check_plan
from symcost.testing import einsum_cases, training_cases

MLP = "In[B_X, D_Y] *_D Win[D, F_Y] *_F Wout[F_Y, D] -> Out[B_X, D_Y]"


def test_a_context_owns_what_is_memoised_inside_it():
    symcost.clear_caches()
    before = caching.entries()
    with caching.context() as mine:
        symcost.derive(MLP, mesh="X=4,Y=4")
        assert mine.entries() > 0
        assert caching.current() is mine and caching.entries() == mine.entries()
    assert caching.entries() == before == 0          # the process's caches never saw it
    assert mine.entries() == 0                        # and the context's were dropped on the way out


def test_contexts_nest_and_the_process_context_comes_back():
    outer = caching.current()
    with caching.context() as a:
        with caching.disabled() as b:
            assert caching.current() is b and not b.enabled
            symcost.derive(MLP, mesh="X=2,Y=2")
            assert b.entries() == 0
        assert caching.current() is a
    assert caching.current() is outer


def test_a_thread_starts_in_the_process_context():
    seen = []
    with caching.context() as mine:
        t = threading.Thread(target=lambda: seen.append(caching.current()))
        t.start()
        t.join()
    assert seen[0] is not mine


def test_planning_pauses_the_collector_until_the_last_block_closes():
    """A search's context keeps hundreds of thousands of objects that each pass of the cyclic collector would
    walk, for next to no cyclic garbage: planning pauses it, and puts it back as it was."""
    import gc
    assert gc.isenabled()
    with caching.context():
        assert not gc.isenabled()
        with caching.context(wider=8):
            assert not gc.isenabled()
        assert not gc.isenabled()                          # another planning block is still open
    assert gc.isenabled()
    seen = []

    def inside():
        seen.append(gc.isenabled())
        raise SymcostError("refused")
    with pytest.raises(SymcostError):
        caching.collector_paused()(inside)()
    assert seen == [False] and gc.isenabled()                # put back when the block raises
    found = symcost.search("param W[D, F]\nOut[B, F] = In[B, D] *_D W[D, F]", "X=4", "B=4096,D=8192,F=8192",
                           "tpu-v5p")
    assert found.priced > 0 and gc.isenabled()
    gc.disable()                                            # a caller's paused collector stays paused
    try:
        symcost.derive("A[I_X, J] * B[J, K] -> C[I_X, K]", mesh="X=4")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_search_leaves_no_cyclic_garbage_to_speak_of():
    """What pausing the collector costs: the cyclic garbage a search makes waits for the next pass. A serving
    search and a program search make a few dozen objects of it (reference counting frees the rest)."""
    import gc
    from symcost.hardware import hardware
    from symcost.models.config import load_model_config
    from symcost.models.serving_search import search_serving
    gc.collect()
    gc.disable()
    try:
        search_serving(load_model_config("llama3-8b"), hardware("h100"), 8, 4096, top=1)
        symcost.search(open("examples/mlp.sc").read(), "X=4,Y=2", "B=4096,D=8192,F=32768", "tpu-v5p", backward=True)
        left = gc.collect()
    finally:
        gc.enable()
    assert left < 1000


def _programs():
    out = [(open(p).read(), None) for p in sorted(glob.glob("derivations/*.sc"))]
    out += [(MLP, "X=4,Y=2"), ("A[I_X, J] * B[J, K_X] -> C[I_X, K]", "X=4"),
            ("A[I_XY, J] -> A[I, J_XY]", "X=2,Y=2")]
    return out


@pytest.mark.parametrize("text, mesh", _programs(), ids=lambda v: (v or "")[:24])
def test_plans_are_the_same_without_caches(text, mesh):
    for backward in ((False, True) if "->" not in text or "param" in text or "W" in text else (False,)):
        with caching.context():
            cached = symcost.derive(text, mesh=mesh, backward=backward, hw="tpu-v5p")
            again = symcost.derive(text, mesh=mesh, backward=backward, hw="tpu-v5p")  # from the caches
        with caching.disabled():
            fresh = symcost.derive(text, mesh=mesh, backward=backward, hw="tpu-v5p")
        assert cached.to_json() == again.to_json() == fresh.to_json()
        assert [s.signature() for s in cached.steps] == [s.signature() for s in fresh.steps]


def test_searches_are_the_same_without_caches():
    kw = dict(mesh="X=2,Y=2", dims="B=4096,D=8192,F=32768", hw="tpu-v5p")
    text = "In[B, D] *_D Win[D, F] *_F Wout[F, D] -> Out[B, D]"
    with caching.context():
        cached = symcost.search(text, **kw)
    with caching.disabled():
        fresh = symcost.search(text, **kw)
    a, b = cached.as_dict(top=len(cached.ranked)), fresh.as_dict(top=len(fresh.ranked))
    a.pop("seconds"), b.pop("seconds")               # how long it took: the one figure that may differ
    assert a == b and len(a["ranked"]) > 1


def test_every_kept_answer_is_immutable():
    """In a checking context every memoised answer is verified as it is kept (a dict of mutable routes,
    once returned by the chain planner's reachability search, would fail here)."""
    with caching.context(check=True) as mine:
        for text, mesh in _programs():
            symcost.derive(text, mesh=mesh, backward="param" in text, hw="tpu-v5p")
        symcost.search("In[B, D] *_D Win[D, F] *_F Wout[F, D] -> Out[B, D]", mesh="X=2,Y=2",
                       dims="B=4096,D=8192,F=32768", backward=True, hw="tpu-v5p")
        assert mine.entries() > 100


def test_a_mutable_answer_is_refused_in_a_checking_context():
    @caching.memoize(maxsize=2)
    def table(n):
        return {"n": n}

    with caching.context(check=True), pytest.raises(TypeError, match="keeps a mutable answer"):
        table(1)
    assert caching.frozen((1, "a", frozenset({2}))) and not caching.frozen([1])


def _steps(plan) -> tuple:
    """A plan as its steps say it (what JSON prints of them, without the closed forms that take SymPy
    most of a second to print for a random layer)."""
    return (tuple((s.signature(), s.phase, s.critical, s.why) for s in plan.steps), plan.layouts, plan.residuals,
            plan.memory)


PROFILE = settings.get_profile(os.environ.get("SYMCOST_HYPOTHESIS", "fast"))


@given(training_cases())
@settings(PROFILE, max_examples=max(5, PROFILE.max_examples // 20))
def test_random_layers_plan_the_same_without_caches_and_run(case):
    """Without caches every chain search and every tie's alternatives are searched afresh (a random layer
    with its backward pass takes 0.1-2 s so), so this property runs a twentieth of the profile's examples:
    5, or 25 under make test."""
    text, mesh, sizes = case
    plan = symcost.derive(text, mesh=mesh, dims=sizes, backward=True)
    with caching.disabled():
        fresh = symcost.derive(text, mesh=mesh, dims=sizes, backward=True)
        assert _steps(plan) == _steps(fresh)
        check_plan(fresh, sizes, np.random.default_rng(0))


@given(einsum_cases(max_axes=2))
@settings(PROFILE, max_examples=max(5, PROFILE.max_examples // 5))
def test_random_einsums_plan_the_same_without_caches(case):
    text, mesh, sizes = case
    with caching.disabled():
        fresh = symcost.derive(text, mesh=mesh, dims=sizes)
    assert _steps(symcost.derive(text, mesh=mesh, dims=sizes)) == _steps(fresh)


def _derive_in_subprocess(env: dict) -> dict:
    code = ("import symcost, sys; sys.stdout.write(symcost.derive(open('derivations/weight_stationary_2d.sc')"
            ".read(), backward=True, hw='tpu-v5p').to_json())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, **env})
    return json.loads(out.stdout)


@pytest.mark.slow
def test_plans_depend_neither_on_string_hashing_nor_on_the_cache_switch():
    a = _derive_in_subprocess({"PYTHONHASHSEED": "1"})
    b = _derive_in_subprocess({"PYTHONHASHSEED": "2"})
    c = _derive_in_subprocess({"PYTHONHASHSEED": "3", "SYMCOST_CACHE": "off"})
    assert a == b == c
