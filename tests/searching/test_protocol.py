"""The three searches (shardings of a program, training runs, serving meshes) go through one protocol
(symcost.searches): the same stages, the same count and estimate before and while pricing, and the same
partial answer when stopped (Ctrl-C): what was priced until then, filtered and ranked, ``complete`` false,
and exit status 130 from the command line."""
import importlib.util
import json
import re

import pytest

from symcost import progress, searches
from symcost.cli import main
from symcost.hardware import hardware
from symcost.models.config import load_model_config
from symcost.models.runs import search_runs
from symcost.models.serving_search import search_serving
from symcost.searching import search

from conftest import ROOT

MLP = """
    param W_in[D, F], W_out[F, D]
    Out[B, D] = In[B, D] *_D W_in[D, F] *_F W_out[F, D]
"""


def _program():
    return search(MLP, mesh="X=4", dims="B=65536,D=8192,F=32768", hw="tpu-v5p", backward=True)


def _runs():
    return search_runs(load_model_config("megatron-22b"), hardware("a100"), chips=8, sequences=4, seq=2048, top=400)


def _serving():
    # the best row alone derived again at its batch: the protocol's stages are the sweep's (what is asserted)
    return search_serving(load_model_config("llama3-8b"), hardware("h100"), chips=8, seq=4096, latency=0.02,
                          top=1)


#: each search, the name its lines start with, what an item of its space is, and where a test stops it (past
#: the first item that has a value passing the filter: 9 candidates, 408 runs, 4 meshes)
SEARCHES = {"program": (_program, "search", "candidates", 3), "runs": (_runs, "run search", "runs", 200),
            "serving": (_serving, "serving search", "meshes", 2)}


def _recording(monkeypatch):
    """searches.run, recording the stages each call drives and what it found."""
    seen, real = [], searches.run

    def run(stages, **kw):
        found = real(stages, **kw)
        seen.append((stages, found))
        return found
    monkeypatch.setattr(searches, "run", run)
    return seen


def _stopped_after(monkeypatch, k: int):
    """Pricing interrupted (Ctrl-C) once ``k`` items of the space are priced."""
    real = searches.priced

    def priced(stages, items):
        for i, got in enumerate(real(stages, items)):
            if i == k:
                raise KeyboardInterrupt
            yield got
    monkeypatch.setattr(searches, "priced", priced)


@pytest.mark.parametrize("which", SEARCHES)
def test_each_search_is_driven_by_the_protocol(monkeypatch, which):
    make, name, unit, _ = SEARCHES[which]
    seen = _recording(monkeypatch)
    result = make()
    assert len(seen) == 1
    stages, found = seen[0]
    assert (stages.name, stages.unit) == (name, unit)
    assert found.complete and result.complete and found.done == found.size == len(stages.items())
    # what the result ranks is the protocol's ranking of the values that passed its filter
    assert found.passed == len([p for p in found.priced if stages.passes(p)])
    assert list(found.ranked[:found.passed]) == stages.rank([p for p in found.priced if stages.passes(p)])


@pytest.mark.parametrize("which", SEARCHES)
def test_the_count_and_an_estimate_come_before_the_answer_for_each_search(monkeypatch, capsys, which):
    make, name, unit, _ = SEARCHES[which]
    monkeypatch.setattr(searches, "SAMPLE", 1)
    with progress.showing(True):
        make()
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith(f"{name}: ")]
    assert re.fullmatch(rf"{name}: .*\b[\d,]+ .* to price.*", lines[0]), lines
    assert re.fullmatch(rf"{name}: about \d+ s more at [\d,.]+ {unit} a second \(the first 2\)", lines[1]), lines
    with progress.showing(False):           # a library call says nothing
        make()
    assert capsys.readouterr().err == ""


class _Clock:
    """``time.perf_counter`` for :class:`searches.Pace`, moved on by hand."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _paced(monkeypatch, capsys, arrivals, total, **kw) -> list[str]:
    """What a :class:`searches.Pace` of ``total`` items says when they come back at the times ``arrivals``
    (seconds after it was made)."""
    clock = _Clock()
    monkeypatch.setattr(searches.time, "perf_counter", clock)
    pace, start = searches.Pace("search", "pieces", total, **kw), clock.now
    with progress.showing(True):
        for t in arrivals:
            clock.now = start + t
            pace()
    return [x for x in capsys.readouterr().err.splitlines() if "more" in x]


def test_the_estimate_leaves_out_the_wait_for_the_first_item(monkeypatch, capsys):
    """Worker processes start (12 s) before the first piece comes back; then one every 0.1 s. The estimate,
    after 50 since the first, is the 749 left at 10 a second: 75 s, not the 4 min the rate of the first 51
    counted from the start (51 in 17 s) would give."""
    arrivals = [12.0 + 0.1 * k for k in range(60)]
    assert _paced(monkeypatch, capsys, arrivals, 800) == [
        "search: about 75 s more at 10 pieces a second (the first 51)"]
    assert _paced(monkeypatch, capsys, arrivals, 1300, what=" for them") == [
        "search: about 2 min more for them at 10 pieces a second (the first 51)"]


@pytest.mark.skipif(importlib.util.find_spec("tqdm") is None, reason="progress bars need tqdm (the progress extra)")
def test_a_route_search_inside_a_stage_does_not_start_its_bar_again(monkeypatch, capsys):
    """The route searches of a plan a search prices report their layouts as inner work: shown only where no
    bar is open (a long derivation alone), never closing the stage's bar, whose count would start again
    (a bounded search's candidates counted 6, 3, 11, 11, 7, ... as its pieces' route searches took turns)."""
    monkeypatch.setattr(progress, "DELAY", 0)
    with progress.showing(True):
        progress.advance(1, "pricing candidates", unit=" candidates")
        progress.advance(256, "searching layouts", inner=True)
        progress.advance(1, "pricing candidates", unit=" candidates")
        assert progress._state["what"] == "pricing candidates" and progress._state["bar"].n == 2
    with progress.showing(True):
        progress.advance(256, "searching layouts", inner=True)     # no bar open: a derivation alone
        assert progress._state["what"] == "searching layouts" and progress._state["bar"].n == 256
        progress.advance(1, "pricing candidates", unit=" candidates")     # a stage's bar replaces it
        assert progress._state["what"] == "pricing candidates"
    capsys.readouterr()


def test_slow_items_are_estimated_after_a_few_seconds_and_a_small_stage_not_at_all(monkeypatch, capsys):
    """Items of 2 s each: said once 5 s have passed since the first (the third after it), at 0.5 a second
    (a rate under 10 with two digits); a stage of at most SAMPLE + 1 items says nothing."""
    assert _paced(monkeypatch, capsys, [2.0 * k for k in range(1, 11)], 100) == [
        "search: about 3 min more at 0.5 pieces a second (the first 4)"]
    assert _paced(monkeypatch, capsys, [0.1 * k for k in range(51)], searches.SAMPLE + 1) == []
    assert _paced(monkeypatch, capsys, [0.1 * k for k in range(51)], searches.SAMPLE + 2) == [
        "search: about 0 s more at 10 pieces a second (the first 51)"]


@pytest.mark.parametrize("which", SEARCHES)
def test_ctrl_c_keeps_the_best_of_what_each_search_priced(monkeypatch, which):
    make, _, _, k = SEARCHES[which]
    seen = _recording(monkeypatch)
    whole = make()
    _, every = seen[-1]
    _stopped_after(monkeypatch, k)
    part = make()
    stages, found = seen[-1]
    assert whole.complete and not part.complete and not found.complete
    assert found.done == k < found.size == every.size
    # the partial answer ranks exactly the values the first k items priced to, as the whole search ranks them
    first = stages.items()[:k]
    head = [p for item, got in zip(first, stages.price(first)) for p in got]
    assert [_key(p) for p in found.priced] == [_key(p) for p in head]
    kept = [p for p in every.ranked if _key(p) in {_key(q) for q in head}]
    assert found.ranked and [_key(p) for p in found.ranked] == [_key(p) for p in kept]
    assert found.stopped == f"stopped (Ctrl-C) after {k} of {every.size:,}: the best so far"


def _key(p):
    """A priced value by what it is (a candidate, a run's knobs, a mesh and batch), not by identity."""
    for attr in ("candidate", "kw"):
        if hasattr(p, attr):
            return repr(getattr(p, attr))
    return (p.mesh, p.batch)


@pytest.mark.parametrize("argv, key, schema", [
    (["search", str(ROOT / "examples" / "mlp.sc"), "--mesh", "X=4", "--hw", "tpu-v5p", "--dims", "B=65536"], None,
     "search.json"),
    (["model", "megatron-22b", "--train", "--search", "--hw", "a100", "--chips", "8", "--batch", "8192",
      "--seq", "2048"], "train", "model.json"),
    (["model", "llama3-8b", "--decode", "--search", "--hw", "h100", "--chips", "8", "--seq", "4096", "--top", "1"],
     "decode", "model.json"),     # one row shown: three derived again at their batch, not fifteen
])
def test_a_stopped_search_prints_the_best_so_far_and_exits_130(monkeypatch, capsys, argv, key, schema):
    """The same for all three: the JSON (valid under its schema) says ``complete`` false, the text says
    the search was stopped, the exit status is 130."""
    jsonschema = pytest.importorskip("jsonschema")
    _stopped_after(monkeypatch, 2)
    code = main(argv + ["--json"])
    out = json.loads(capsys.readouterr().out)
    jsonschema.validate(out, json.loads((ROOT / "symcost" / "schemas" / schema).read_text()))
    found = out[key] if key else out
    assert code == 130 and found["complete"] is False
    if key:
        assert out["search"]["candidates"] == found["searched"]
    assert main(argv) == 130
    assert "stopped (Ctrl-C) after " in capsys.readouterr().out


def test_ctrl_c_in_a_sweep_over_chip_budgets_stops_the_sweep(monkeypatch, capsys):
    """``--vs chips`` runs one run search a budget: stopped in the first budget's search, it searches no
    further budgets, shows the budgets found so far and exits 130."""
    real, calls = searches.priced, []

    def priced(stages, items):
        calls.append(stages)
        for i, got in enumerate(real(stages, items)):
            if len(calls) == 2 and i == 1:    # the whole budget's search ends; the sweep's first is stopped
                raise KeyboardInterrupt
            yield got
    monkeypatch.setattr(searches, "priced", priced)
    argv = ["model", "megatron-22b", "--train", "--search", "--hw", "a100", "--chips", "8", "--batch", "8192",
            "--seq", "2048", "--vs", "chips", "--top", "1", "--json"]
    code = main(argv)
    out = json.loads(capsys.readouterr().out)["train"]
    assert code == 130 and len(calls) == 2 and out["complete"] is False
    assert [r["chips"] for r in out["vs_chips"]] == [1]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_ctrl_c_that_a_finalizer_dropped_still_stops_the_pricing(python_ctrl_c):
    """Python runs a signal's handler between any two instructions, those of a finalizer too, and drops
    (prints) an exception a finalizer raises: a Ctrl-C landing while an unfinished generator is freed never
    reaches the search. The pricing still stops at the next item, with what it priced."""
    import signal
    from dataclasses import dataclass

    def dropping_generator():
        try:
            yield 0
            yield 1
        finally:                      # Ctrl-C arrives while this runs as the generator is freed
            signal.raise_signal(signal.SIGINT)
            sum(range(100))

    @dataclass(frozen=True)
    class Squares:
        name, unit = "squares search", "numbers"

        def items(self):
            return list(range(100))

        def count(self, n):
            return f"{n} numbers to square"

        def price(self, items):
            for x in items:
                if x == 3:
                    first = dropping_generator()
                    next(first)
                    del first             # freed unfinished: its finally runs inside the finalizer
                yield (x * x,)

        def passes(self, p):
            return True

        def rank(self, kept):
            return sorted(kept)

        def label(self, item):
            return ""
    found = searches.run(Squares())
    assert not found.complete and found.done == 4 and found.ranked == (0, 1, 4, 9)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler      # Python's handler is back
