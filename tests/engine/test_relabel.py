"""A relabelling (the same blocks on other devices) costs at most one collective-permute: on meshes without
a preset the engine's plan is never slower than the one permute XLA's partitioner would insert, priced by
the same route (each block the shorter way along each axis; halfway round a ring, half each way)."""
import itertools
import random

import numpy as np
import pytest

import symcost
from symcost.collectives import Move
from symcost.collectives.permute import moved_axes
from symcost.layout import Layout
from symcost.mesh import parse_mesh
from symcost.pricing import op_cost
from symcost.simulate import check_plan
from symcost.xla import book_env, plan_seconds

SIZES = {"B": 512, "D": 256}


def layouts(mesh):
    """Every way to shard A[B, D] over the mesh's axes (each axis on one dimension or none, in an order)."""
    names = mesh.names
    out = []
    for place in itertools.product((None, 0, 1), repeat=len(names)):
        dims = [[a for a, p in zip(names, place) if p == d] for d in (0, 1)]
        for b in itertools.permutations(dims[0]):
            for d in itertools.permutations(dims[1]):
                out.append((b, d))
    return out


def blocks(mesh, axes):
    n = 1
    for a in axes:
        n *= mesh.axis(a).size
    return n


def text(axes):
    return ("_{" + "".join(axes) + "}") if axes else ""


def relabellings(mesh_text, count, seed):
    mesh = parse_mesh(mesh_text)
    lays = layouts(mesh)
    pairs = [(s, t) for s in lays for t in lays if s != t
             and all(blocks(mesh, x) == blocks(mesh, y) for x, y in zip(s, t))]
    random.Random(seed).shuffle(pairs)
    return [(mesh_text, s, t) for s, t in pairs[:count]]


CASES = relabellings("X=2,Y=2,Z=2", 40, 0) + relabellings("X=2,Y=4", 20, 1) + relabellings("X=4,Y=2,Z=2", 30, 2)


@pytest.mark.parametrize("mesh,src,dst", CASES, ids=[f"{m}:{s}->{t}" for m, s, t in CASES])
def test_a_relabelling_is_never_dearer_than_one_permute(mesh, src, dst):
    expr = f"A[B{text(src[0])}, D{text(src[1])}] -> A[B{text(dst[0])}, D{text(dst[1])}]"
    plan = symcost.derive(expr, mesh=mesh, dims=SIZES, objective="comms", overlap=False)
    env = book_env(plan)
    before = Layout.of("A", "BD", [tuple(src[0]), tuple(src[1])])
    after = Layout.of("A", "BD", [tuple(dst[0]), tuple(dst[1])])
    permute = Move("Permute", moved_axes(before.axes, after.axes, plan.mesh.names), before, after)
    one = float(op_cost(permute, env).t_comms)
    assert plan_seconds(plan, env) <= one * (1 + 1e-9)
    check_plan(plan, SIZES, np.random.default_rng(0))       # and the plan the engine chose runs right


def test_the_three_axis_relabelling_is_one_permute_of_a_quarter_block():
    """A[B_{YZ}, D] -> A[B_{XZ}, D] on X=2,Y=2,Z=2: one permute of B D / 4 elements per device (XLA's
    collective-permute), not an AllGather over XYZ of the whole array. On rings of two a block goes half
    each way round, over both links: V / W_ici."""
    plan = symcost.derive("A[B_{YZ}, D] -> A[B_{XZ}, D]", mesh="X=2,Y=2,Z=2", dims="B=1024,D=1024")
    assert [(s.kind, s.axes) for s in plan.collectives] == [("Permute", ("X", "Y", "Z"))]
    env = book_env(plan)
    V = 1024 * 1024 * 2 / 4
    assert plan_seconds(plan, env) == pytest.approx(max(2 * env.T_min, V / env.W_ici), rel=1e-12)


# on X=2,Y=4 a relabelling can only reorder the axes of a dimension, whose digits never line up
@pytest.mark.parametrize("mesh_text,some_line_up", [("X=2,Y=2,Z=2,V=2", True), ("X=4,Y=2,Z=2", True),
                                                    ("X=2,Y=4", False), ("X=3,Y=3,Z=2", True)])
def test_a_permute_whose_digits_line_up_takes_its_sources_from_the_devices_own_coordinates(mesh_text, some_line_up):
    """Where every step of a relabelling reads and writes axes of the same sizes, digit for digit, each
    source coordinate is one of the device's own (:func:`~symcost.collectives.permute._digits`): the
    sources those columns give are every device's :func:`~symcost.collectives.permute.source`, as the
    arithmetic of :func:`~symcost.collectives.permute._sources` gives them; where they do not line up
    (an axis of 4 read as two of 2), no columns are claimed and the arithmetic still agrees."""
    from symcost.collectives import permute
    mesh = parse_mesh(mesh_text)
    names, sizes = mesh.names, tuple(mesh.axis(a).size for a in mesh.names)
    size = dict(zip(names, sizes))
    grid = [dict(zip(names, c)) for c in itertools.product(*(range(n) for n in sizes))]
    lined = other = 0
    for _, src, dst in relabellings(mesh_text, 400, 3):
        change = permute.changes(src, dst)
        want = np.array([[permute.source(c, change, size, names)[a] for a in names] for c in grid])
        assert (permute._sources(change, names, sizes) == want).all(), (src, dst)
        columns = permute._digits(change, names, sizes)
        if columns is None:
            other += 1
            continue
        # the bytes the route is kept by, as the arithmetic writes them (routed reads either)
        taken = np.ascontiguousarray(permute._grid(sizes)[:, list(columns)])
        assert (taken == want).all() and taken.tobytes() == permute._sources(change, names, sizes).tobytes()
        lined += 1
    assert (lined > 0) == some_line_up and (other > 0) == (len(set(sizes)) > 1)
