"""A search kept between targets (``routes.Frontier``) gives each target the route, cost and ``complete`` that a
search for that target alone gives (``routes.route_to``), in whatever order targets are asked."""
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from symcost import caching
from symcost.layout import Layout
from symcost.mesh import parse_mesh
from symcost.rewrite import chains
from symcost.rewrite.ranking import Ranker
from symcost.rewrite.routes import Entry, Frontier, route_to

from conftest import examples

MESH = parse_mesh("X=4,Y=2,Z=2")
RANKER = Ranker.make(MESH, {"I": 4096, "J": 8192, "K": 1024})
AXES = ("X", "Y", "Z")


def _layouts(unreduced=frozenset()):
    """Every layout of A[I, J, K] on the mesh, those axes left out that stay unreduced."""
    free = [a for a in AXES if a not in unreduced]
    out = []
    for choice in itertools.product((None, 0, 1, 2), repeat=len(free)):
        dims: list = [[], [], []]
        for a, d in zip(free, choice):
            if d is not None:
                dims[d].append(a)
        out.append(Layout("A", ("I", "J", "K"), tuple(tuple(d) for d in dims), frozenset(unreduced), "bf16"))
    return out


LAYOUTS = _layouts()
PARTIAL = _layouts(frozenset({"Z"}))


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.sampled_from(LAYOUTS + PARTIAL), min_size=1, max_size=6, unique=True),
       st.lists(st.floats(0, 1e-3), min_size=6, max_size=6),
       st.lists(st.sampled_from(LAYOUTS), min_size=1, max_size=6),
       st.sampled_from([None, 40, 400]))
def test_each_target_gets_the_route_a_search_for_it_alone_finds(sources, costs, targets, limit):
    with caching.context():
        pairs = [(lay, Entry(c, ())) for lay, c in zip(sources, costs)]
        kept = Frontier(pairs, RANKER, limit)
        for t in targets:
            alone = route_to(pairs, RANKER, t, limit=limit)
            assert kept.to(t) == alone


def test_a_target_settled_already_is_read_and_one_farther_goes_on():
    with caching.context():
        pairs = [(LAYOUTS[5], Entry(0.0, ()))]
        kept = Frontier(pairs, RANKER, None)
        assert kept.to(LAYOUTS[5]) == (Entry(0.0, ()), True) and len(kept.settled) == 1
        seen = 1
        for t in LAYOUTS:
            settled_before = t in {kept.g.layouts[i] for i in kept.settled}
            assert kept.to(t) == route_to(pairs, RANKER, t)
            assert (len(kept.settled) == seen) == settled_before     # read, or the search went on
            seen = len(kept.settled)
        assert seen >= len(LAYOUTS)      # every layout asked, and those the routes to them pass


@pytest.mark.parametrize("enabled", [True, pytest.param(False, marks=pytest.mark.slow)])   # no caches twice: slow
def test_chain_plans_are_the_same_whether_their_searches_are_kept_or_not(enabled):
    """A chain asked for several targets in turn, its results' searches kept (the process's planning
    context) or made afresh (no caches): the same plans."""
    a = Layout.of("A", "IJ", [("X",), ("Y",)])
    b = Layout.of("B", "JK", [("Y",), ()])
    targets = [Layout.of("C", "IK", axes) for axes in ([(), ()], [("X",), ()], [(), ("X",)], [("X", "Z"), ("Y",)],
                                                         [("Z",), ("X",)])]

    def plans():
        return [[str(s) for s in chains.plan_chain([a, b], [None], "C", ("I", "K"), t, MESH, RANKER)[0].steps]
                for t in targets]
    with caching.context(enabled=enabled):
        got = plans()
    with caching.disabled():
        assert got == plans()
