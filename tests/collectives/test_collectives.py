"""Every move kind, through its rule: its transpose is its adjoint on the devices' blocks, it is exact on
the simulator, and its costs follow the book's table."""
import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings, strategies as st

import symcost
from symcost.collectives import RULES, Grid, Move, moves_from, rule
from symcost.env import Env
from symcost.layout import Layout
from symcost.mesh import parse_mesh
from symcost.pricing import op_cost
from symcost.simulate import collect, distribute

from conftest import examples


@st.composite
def moves_of(draw, kind):
    """A random mesh (1 to 3 axes of 2 or 3 devices), a random layout of a 1- to 3-dimensional tensor, and one
    move of ``kind`` out of it."""
    n = draw(st.integers(1, 3))
    sizes = [draw(st.integers(2, 3)) for _ in range(n)]
    mesh = parse_mesh(",".join(f"{a}={s}" for a, s in zip("XYZ", sizes)))
    dims = "IJK"[:draw(st.integers(1, 3))]
    per, unreduced = {d: [] for d in dims}, []
    for a in mesh.names:
        c = draw(st.sampled_from([None, "U"] + list(dims)))
        (unreduced if c == "U" else per[c] if c else []).append(a)
    axes = [tuple(draw(st.permutations(per[d]))) for d in dims]
    lay = Layout.of("A", dims, axes, unreduced)
    edges = [m for m in rule(kind).edges(lay, mesh)]
    if kind == "Send":
        edges = [Move("Send", (a,), lay, lay, draw(st.sampled_from([1, -1]))) for a in mesh.names]
    m = draw(st.sampled_from(edges)) if edges else None
    shape = {d: int(np.prod(sizes)) * 2 for d in dims}
    return mesh, m, shape


def _blocks(layout, mesh, shape, rng):
    """Arbitrary per-device blocks of the right local shape (not necessarily consistent replicas)."""
    grid = Grid(mesh)
    local = [shape[d] // grid.count(ax) for d, ax in zip(layout.dims, layout.axes)]
    return {dev: rng.standard_normal(local) for dev in grid.devices()}


def _dot(a, b):
    return sum(float(np.vdot(a[d], b[d])) for d in a)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(RULES))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_transpose_is_the_adjoint_on_the_blocks(kind, data):
    """<m(x), y> = <x, m^T(y)> summed over the devices, for arbitrary blocks x and y: AllGather^T is
    ReduceScatter, AllReduce its own, AllToAll and Permute their inverses, a send the send back. A Slice's
    adjoint pads each block into partial sums; its stated transpose (AllGather) is that, reduced."""
    mesh, m, shape = data.draw(moves_of(kind))
    if m is None:
        return
    t = rule(kind).transpose(m)
    if t is None:   # only an AllGather from several dimensions at once: the backward pass routes it instead
        assert kind == "AllGather" and sum(a != b for a, b in zip(m.before.axes, m.after.axes)) > 1
        return
    grid, rng = Grid(mesh), np.random.default_rng(0)
    x, y = _blocks(m.before, mesh, shape, rng), _blocks(t.before, mesh, shape, rng)
    mx = rule(kind).simulate(x, m, grid)
    if kind != "Slice":
        assert _dot(mx, y) == pytest.approx(_dot(x, rule(t.kind).simulate(y, t, grid)), rel=1e-9, abs=1e-9)
        return
    padded = {}   # the adjoint of slicing: each device's block back at its place in a zero block
    for dev, blk in y.items():
        full = np.zeros([s * grid.count(ax[len(bx):]) for s, ax, bx in zip(blk.shape, m.after.axes, m.before.axes)])
        full[grid.block_slices(dev, Layout.of("A", m.after.dims, [a[len(b):] for a, b in zip(m.after.axes, m.before.axes)]),
                               full.shape)] = blk
        padded[dev] = full
    assert _dot(mx, y) == pytest.approx(_dot(x, padded), rel=1e-9)
    reduced = rule("AllReduce").simulate(padded, Move("AllReduce", m.axes, m.before, m.before), grid)
    gathered = rule(t.kind).simulate(y, t, grid)
    assert all(np.allclose(reduced[d], gathered[d]) for d in reduced)


@pytest.mark.parametrize("kind", [k for k, r in RULES.items() if r.inserted])
@settings(max_examples=examples(30), deadline=None)
@given(data=st.data())
def test_every_move_is_exact_on_the_simulator(kind, data):
    """A move only relocates blocks or sums partial sums: the whole array is the same after it."""
    mesh, m, shape = data.draw(moves_of(kind))
    if m is None:
        return
    rng = np.random.default_rng(1)
    x = rng.standard_normal([shape[d] for d in m.before.dims])
    blocks = rule(kind).simulate(distribute(x, m.before, mesh, rng), m, Grid(mesh))
    assert np.allclose(collect(blocks, m.after, mesh, x.shape), x)


def test_every_writable_rule_accepts_its_own_signature():
    """A rule's signature is a collective a user may write, and the engine plans it as that one move."""
    from symcost.notation import COLLECTIVE_KINDS
    for name in COLLECTIVE_KINDS:
        written = RULES[name].signature.split(" (")[0]
        plan = symcost.derive(written, mesh="X=4,Y=2", moves="none")
        assert [s.signature() for s in plan.steps] == [written]


def test_every_rule_cites_where_its_time_comes_from():
    import inspect
    for r in RULES.values():
        doc = inspect.getmodule(type(r)).__doc__
        assert "book Part" in doc or "Part 3" in doc, type(r).__name__


@pytest.mark.parametrize("kind, seconds", [
    ("AllGather", 2 * 1024 * 4096 / 4 / 9e10),            # book Part 3 Q2 shape: V / W_ici on a ring of links
    ("ReduceScatter", 2 * 1024 * 4096 / 4 / 9e10),
    ("AllReduce", 2 * 2 * 1024 * 4096 / 4 / 9e10),
])
def test_costs_follow_the_books_table(kind, seconds):
    mesh = parse_mesh("X=4,Y=4")
    a = Layout.of("A", "BD", [("X",), ("Y",)])
    m = {"AllGather": Move("AllGather", ("X",), a, a.with_dim_axes("B", ())),
         "ReduceScatter": Move("ReduceScatter", ("X",), a.with_dim_axes("B", ()).with_unreduced("X"), a),
         "AllReduce": Move("AllReduce", ("X",), a.with_dim_axes("B", ()).with_unreduced("X"), a.with_dim_axes("B", ()))}[kind]
    env = Env.numeric(mesh, {"B": 1024, "D": 4096}, {"W_ici": 9e10, "T_min": 1e-6})
    assert op_cost(m, env).t_comms == pytest.approx(seconds)


def test_moves_from_explores_only_the_allowed_kinds():
    lay = Layout.of("A", "IJ", [("X",), ()], unreduced={"Y"})
    mesh = parse_mesh("X=2,Y=2,Z=2")
    kinds = {m.kind for m in moves_from(lay, mesh, allowed=("AllGather", "AllReduce"))}
    assert kinds == {"AllGather", "AllReduce"}
    assert "Send" not in {m.kind for m in moves_from(lay, mesh)}    # only where written


def test_send_is_its_own_kind_and_shifts_blocks():
    plan = symcost.derive("Send_Z(A[B, L_Z, D]) -> A[B, L_Z, D]", mesh="Z=4", dims="B=2,L=4,D=2")
    (s,) = plan.collectives
    assert s.kind == "Send" and s.op.distance == 1
    from symcost.simulate import check_plan
    check_plan(plan, {"B": 2, "L": 4, "D": 2})


def test_a_link_time_kept_by_the_env_is_the_one_computed_afresh():
    """A numeric env keeps each collective's (latency, throughput) by its axes and bytes
    (``Env.kept_link_time``: a layout search prices the same ones again and again): every move out of a few
    layouts on a torus with a DCN axis, priced in one env, costs what it costs priced alone in a fresh env,
    and the env answered some from what it kept."""
    mesh = parse_mesh("X=4,Y=2,Z=2:dcn")
    sizes = {"I": 64, "J": 32, "K": 16}
    shared = Env.numeric(mesh, sizes)
    layouts = [Layout.of("A", "IJK", [("X",), ("Y",), ()]), Layout.of("B", "IJK", [("X", "Y"), (), ("Z",)]),
               Layout.of("C", "IJK", [(), ("Z",), ("Y", "X")]), Layout.of("D", "IJK", [("Y",), ("X",), ()], ["Z"])]
    moves = [m for lay in layouts for m in moves_from(lay, mesh, None) if m.rule.communicates]
    assert len({m.kind for m in moves}) >= 4
    for m in moves:
        assert op_cost(m, shared) == op_cost(m, Env.numeric(mesh, sizes)), m
    assert 0 < len(shared.link_times) < len(moves)
    assert Env.symbolic(mesh).link_times is None and Env.arrays(mesh).link_times is None


def test_a_gather_or_scatter_over_a_padded_dimension_moves_the_groups_padded_blocks():
    """I = 1, 5 or 8 rows over 8 devices: each device holds one row (padded where I < 8), and an AllGather
    (or a ReduceScatter, its transpose) moves all 8 rows; where the rows divide, the closed form is the
    book's (the gathered array's bytes)."""
    mesh = parse_mesh("X=8")
    whole, split = Layout.of("A", "IJ", [(), ()]), Layout.of("A", "IJ", [("X",), ()])
    gather = Move("AllGather", ("X",), split, whole)
    scatter = Move("ReduceScatter", ("X",), Layout.of("A", "IJ", [(), ()], ["X"]), split)
    for rows in (1, 5, 8):
        env = Env.numeric(mesh, {"I": rows, "J": 1024})
        assert op_cost(gather, env).bytes == op_cost(scatter, env).bytes == 8 * 1024 * 2
        assert rule("AllGather").ring_bytes(gather, env) == 7 * 1024 * 2
    env = Env.numeric(mesh, {"I": 16, "J": 1024})
    assert op_cost(gather, env).bytes == 16 * 1024 * 2
    I, J = symcost.symbols.dim("I"), symcost.symbols.dim("J")
    assert op_cost(gather, Env.symbolic(mesh)).bytes == 2 * I * J
    padded = Env.symbolic(mesh, frozenset({("I", ("X",))}))
    assert op_cost(gather, padded).bytes == 16 * J * sp.ceiling(I / 8)
    assert op_cost(scatter, padded).bytes == 16 * J * sp.ceiling(I / 8)


def test_an_all_to_all_into_a_padded_dimension_moves_the_padded_blocks():
    """A[I, J_X] -> A[I_X, J] with I = 1 over 8 devices: each device's block after is a whole row (7 of 8 of
    them padding), so the exchange moves as much as with I = 8; out of a padded dimension too."""
    mesh = parse_mesh("X=8")
    cols, rows = Layout.of("A", "IJ", [(), ("X",)]), Layout.of("A", "IJ", [("X",), ()])
    for before, after in ((cols, rows), (rows, cols)):
        m = Move("AllToAll", ("X",), before, after)
        one, eight = (op_cost(m, Env.numeric(mesh, {"I": i, "J": 4096})) for i in (1, 8))
        assert one.bytes == eight.bytes == 8 * 4096 * 2
        assert one.throughput == eight.throughput
    m = Move("AllToAll", ("X",), cols, rows)
    assert op_cost(m, Env.numeric(mesh, {"I": 16, "J": 4096})).bytes == 16 * 4096 * 2
