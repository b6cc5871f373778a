"""Every candidate a search ranks is the plan the engine derives alone.

A search prices thousands of candidates in one process (or in workers), in a planning context of its own
whose caches are wider than a derivation's and shared across candidates; a defect in what a cache is keyed by would show as a candidate whose plan or
step time differs from ``symcost.derive`` of that candidate's program. Here each candidate's numbers and
steps, as the search kept them, are checked against a derivation of its ``program`` at the searched sizes,
in another cache state. A sample in the fast tier; in the slow tier every candidate of the MLP on
``X=16,Y=16,Z=16`` (forward, and forward and backward) and of the LLaMA 3 8B layer on h100 ``X=4,Y=2``
forward and backward (each plan's forward steps included; the layer's forward-only search, which walks the
same code without the backward pass, on a stretch of its candidates).

The engine alone is :func:`symcost.program.derive_program`. The layer's candidates are derived as a search
derives them (``alternatives=False``: the same plan, its runner-ups weighed but not kept), and every tenth
through ``symcost.derive`` as a user does (runner-ups kept and explained: that plan too must be the same);
the runner-ups would double the check's time (61 s against 45 s for the layer's backward check).
"""

import pytest

import symcost
from symcost import caching
from symcost.program import derive_program
from symcost.searching import search
from symcost.searching.pool import priced_all
from symcost.searching.space import Space

from conftest import ROOT

MLP = (ROOT / "examples" / "mlp.sc").read_text()
REL = 1e-12


def _layer() -> str:
    """``symcost model llama3-8b --program``: one layer with nothing sharded, its sizes in a rank statement."""
    import contextlib
    import io

    from symcost.cli import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["model", "llama3-8b", "--program"]) == 0
    return out.getvalue()


def _steps(plan) -> list:
    """Each step's phase and operation, compared as values (every field of the move or einsum, which its
    signature renders only in part)."""
    return [(s.phase, s.op) for s in plan.steps]


def _shown(plan) -> list[str]:
    return [f"{s.phase} {s.signature()}" for s in plan.steps]


def _same_as_alone(p, program: str, mesh: str, dims: str, hw: str, backward: bool,
                   efficiency: bool = False, api: bool = True) -> None:
    """``api``: derived by ``symcost.derive`` (runner-ups kept); else by the engine as a search calls it."""
    if api:
        alone = symcost.derive(program, mesh, dims, hw, backward=backward, efficiency=efficiency)
    else:
        alone = derive_program(program, mesh, dims, hw, backward=backward, efficiency=efficiency,
                               choose_achieved=efficiency, alternatives=False)
    num = alone.numbers()
    for field in ("t_step", "t_math", "t_hbm", "t_comms"):
        assert getattr(num, field) == pytest.approx(getattr(p, field), rel=REL, abs=1e-300), (field, program)
    assert [s.signature() for s in alone.collectives] == list(p.collectives), program
    assert _steps(alone) == _steps(p.plan), (program, _shown(alone), _shown(p.plan))


def _checked(text: str, mesh: str, dims: str | None, hw: str, backward: bool, every: int = 1,
             wider: int = 1, efficiency: bool = False, api_every: int = 1, r=None) -> int:
    """Search (one process, its caches wider, candidates in the space's order; ``r``: that search, made
    already), then derive every ``every``-th candidate alone, in ranked order, from emptied caches ``wider``
    times their bounds (the whole space derived again shares as a search does, in another order and another
    cache state); every ``api_every``-th of those through ``symcost.derive``, the others by the engine as a
    search calls it."""
    r = r or search(text, mesh, dims, hw, backward=backward, jobs=1, efficiency=efficiency)
    assert r.priced == r.candidates
    caching.clear()
    chosen = r.ranked[::every]
    with caching.context(wider=wider):
        for i, p in enumerate(chosen):
            _same_as_alone(p, r.program_of(p), mesh, r.dims, hw, backward, efficiency, api=i % api_every == 0)
    return len(chosen)


@pytest.mark.parametrize("backward", [False, True])
def test_a_sample_of_the_mlp_on_16x16x16(backward):
    assert _checked(MLP, "X=16,Y=16,Z=16", "B=1048576", "tpu-v5p", backward, every=15) == 11


@pytest.mark.parametrize("backward", [False, True])
def test_a_sample_of_the_mlp_with_the_presets_floors(backward):
    """With the preset's achieved figures and per-kernel floor (``search --efficiency``), each candidate's
    plan is still the one ``derive --efficiency`` finds alone: both weigh moves with the floors."""
    assert _checked(MLP, "X=8,Y=8", "B=4096", "h100", backward, every=5, efficiency=True) == 17


@pytest.mark.parametrize("backward", [False, True])
def test_a_sample_of_the_layer_on_x4_y2(backward):
    """A stretch of consecutive candidates of the layer (they share most statement plans, so the wider
    caches are read across candidates), priced as the search prices them, each against the engine alone."""
    text = _layer()
    space = Space.of(text, "X=4,Y=2", "h100")
    sizes = dict(space.program.ranking)
    cands = list(space.candidates())[1000:1030]
    with caching.context(wider=16):
        priced = list(priced_all(space, cands, options=dict(dims=sizes, hw="h100", backward=backward)))
    dims = ",".join(f"{k}={v}" for k, v in sizes.items())
    caching.clear()
    for p in priced[::3]:
        _same_as_alone(p, str(space.program_for(p.candidate)), "X=4,Y=2", dims, "h100", backward)


@pytest.mark.slow
@pytest.mark.parametrize("backward", [False, True])
def test_every_candidate_of_the_mlp_on_16x16x16(backward):
    """Each through ``symcost.derive``. The search plans without keeping runner-up plans and must still
    choose the plan derive chooses: on 16x16x16 the Megatron-like candidates (TP over YZ or XYZ) once priced
    2.6 % faster than derive gave for the same program, their runner-ups never weighed."""
    assert _checked(MLP, "X=16,Y=16,Z=16", "B=1048576", "tpu-v5p", backward) == 165


# The layer's check is the suite's longest: a class, so that ``--dist loadscope`` gives it a worker of its
# own while the module's other tests run on the other (it keeps a module's functions on one worker, a
# class's methods on one)
@pytest.fixture(scope="class")
def every():
    """Every candidate of the layer on h100 X=4,Y=2, forward and backward, priced (its class's two tests)."""
    return search(_layer(), "X=4,Y=2", None, "h100", backward=True, jobs=1)


@pytest.mark.slow
class TestEveryCandidateOfTheLayerOnX4Y2Backward:
    def test_forward_and_backward(self, every):
        assert _checked(_layer(), "X=4,Y=2", None, "h100", True, wider=16, api_every=10, r=every) == 2916

    def test_the_bounded_search_shows_the_same_top_ten(self, every):
        """What ``search --top 10`` shows of the layer (each statement's pieces planned, candidates derived
        from the least bound up, :mod:`symcost.searching.bounded`): every candidate's top ten, in order."""
        top = search(_layer(), "X=4,Y=2", None, "h100", backward=True, jobs=1, top=10)
        assert (top.priced, top.bounded) == (196, 2720)      # of the 252 as fast as the best (1.77 ms), 56 shown
                                                              # to communicate more than the tenth (46 before
                                                              # the pieces' backward links had a floor)
        assert [(p.candidate, p.t_step) for p in top.ranked[:10]] == [(p.candidate, p.t_step) for p in every.ranked[:10]]
