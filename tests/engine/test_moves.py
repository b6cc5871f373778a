"""The moves XLA makes beyond the book's four collectives: AllToAll over several axes, the collective-permute
as a relabelling of devices, collectives over mixed link kinds, host transfers and sends of several hops.
Each is exact on the simulator and priced by the formula its module states."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symcost
from symcost.collectives import Grid, rule
from symcost.errors import SymcostError
from symcost.layout import Layout
from symcost.mesh import parse_mesh
from symcost.simulate import check_plan, collect, distribute
from symcost.testing import meshes


def kinds(plan):
    return [(s.op.kind, s.op.axes) for s in plan.collectives]


def seconds(plan, step):
    return plan.evaluate(step.cost.t_comms)


# ---------------------------------------------------------------------------- on the simulator
@st.composite
def moved(draw, uneven):
    names, sizes = draw(meshes(max_axes=3))
    mesh = parse_mesh(",".join(f"{n}={s}" for n, s in zip(names, sizes)))
    per = {"I": [], "J": []}
    for a in names:
        c = draw(st.sampled_from([None, "I", "J"]))
        if c:
            per[c].append(a)
    axes = tuple(tuple(draw(st.permutations(per[d]))) for d in "IJ")
    lay = Layout.of("A", "IJ", axes)
    n = int(np.prod(sizes))
    shape = tuple(draw(st.integers(1, 2 * n + 1)) if uneven else n * draw(st.integers(1, 2)) for _ in "IJ")
    kind = draw(st.sampled_from(["AllToAll", "Permute"]))
    edges = [m for m in rule(kind).edges(lay, mesh) if kind == "Permute" or len(m.axes) > 1]
    if not edges:
        edges = list(rule("Permute").edges(lay, mesh))
    if not edges:
        return None
    return mesh, shape, draw(st.sampled_from(edges))


def _exact(case):
    if case is None:
        return
    mesh, shape, m = case
    x = np.arange(float(np.prod(shape))).reshape(shape)
    blocks = m.rule.simulate(distribute(x, m.before, mesh), m, Grid(mesh))
    assert np.array_equal(collect(blocks, m.after, mesh, shape), x)


@pytest.mark.slow
@given(moved(uneven=False))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_multi_axis_all_to_all_and_relabelling_permutes_are_exact(case):
    _exact(case)


@pytest.mark.slow
@given(moved(uneven=True))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_new_moves_are_exact_on_padded_blocks(case):
    _exact(case)


@pytest.mark.parametrize("text, mesh, dims", [
    ("A[I_{XY}, J] -> A[I, J_{XY}]", "X=4,Y=4", "I=64,J=32"),
    ("A[I_{XY}, J] -> A[I_{YX}, J]", "X=4,Y=4", "I=64,J=32"),
    ("A[B_{YZ}, D] -> A[B_{XZ}, D]", "X=2:nvlink,Y=2:nvlink,Z=2:nvlink", "B=16,D=8"),
    ("A[I_{XY}, J] -> A[I, J_{XY}]", "X=3,Y=2", "I=7,J=5"),
    ("AllToAll_{XY}(A[I_{XY}, J]) -> A[I, J_{XY}]", "X=2,Y=2", "I=8,J=8"),
    ("Permute_{XY}(A[I_{XY}, J]) -> A[I_{YX}, J]", "X=2,Y=4", "I=8,J=8"),
    ("ToHost(O[D_X, F]) -> H[D_X, F]\nToDevice(H[D_X, F]) -> O2[D_X, F]", "X=4", "D=8,F=8"),
    ("Send_{X,2}(A[B, D_Y]) -> A[B, D_Y]", "X=4,Y=2", "B=8,D=8"),
])
def test_plans_with_the_new_moves_are_exact(text, mesh, dims):
    plan = symcost.derive(text, mesh=mesh, dims=dims)
    check_plan(plan, {k: int(v) for k, v in (kv.split("=") for kv in dims.split(","))}, np.random.default_rng(0))


# ---------------------------------------------------------------------------- chosen and priced
def test_a_pair_of_axes_moves_in_one_all_to_all_at_the_books_price():
    plan = symcost.derive("A[I_{XY}, J] -> A[I, J_{XY}]", mesh="X=4,Y=4", dims="I=8192,J=8192", hw="tpu-v5p")
    assert kinds(plan) == [("AllToAll", ("X", "Y"))]
    (step,) = plan.collectives
    hw = plan.hardware.bindings(plan.compute_dtype)
    V = 8192 * 8192 * 2                       # the whole array over the group, bf16
    # book Part 3: V max(A, B) / (4 N W_ici) on a 4x4 torus; on v5p a 4-chip axis without wraparound is a
    # line, whose middle link carries the |a|^2/4 pairs across it for each of the N/|a| lines, blocks of
    # V / N^2 each way: V |a| / (2 N W_ici) (tests/collectives/test_link_loads.py routes every block)
    assert seconds(plan, step) == pytest.approx(V * 4 / (2 * 16 * hw["W_ici"]), rel=1e-9)


def test_a_relabelling_is_one_collective_permute_priced_by_its_route():
    plan = symcost.derive("Permute_{XY}(A[I_{XY}, J]) -> A[I_{YX}, J]", mesh="X=4,Y=4", dims="I=8192,J=8192",
                          hw="tpu-v5p")
    assert kinds(plan) == [("Permute", ("X", "Y"))]
    (step,) = plan.collectives
    hw = plan.hardware.bindings("bf16")
    # the transpose of a 4x4 grid on lines: the longest route is 3 + 3 hops; the busiest link carries 3
    # blocks one way (device (x, y) takes the block of (y, x))
    assert plan.evaluate(step.cost.latency) == pytest.approx(6 * hw["T_min"])
    assert seconds(plan, step) == pytest.approx(3 * 8192 * 8192 * 2 / 16 / (hw["W_ici"] / 2), rel=1e-9)
    # the engine's own plan, three AllToAlls on lines (each V |a| / (2 N W_ici)), is no slower
    free = symcost.derive("A[I_{XY}, J] -> A[I_{YX}, J]", mesh="X=4,Y=4", dims="I=8192,J=8192", hw="tpu-v5p")
    assert sum(seconds(free, s) for s in free.collectives) <= seconds(plan, step) * (1 + 1e-9)


def test_a_switched_domain_relabels_in_one_hop():
    plan = symcost.derive("Permute_{XYZ}(A[B_{YZ}, D]) -> A[B_{XZ}, D]", mesh="X=2:nvlink,Y=2:nvlink,Z=2:nvlink",
                          dims="B=8192,D=8192", hw="h100")
    (step,) = plan.collectives
    hw = plan.hardware.bindings("bf16")
    assert plan.evaluate(step.cost.latency) == pytest.approx(hw["T_min"])
    # one block through each GPU's one-way link; the engine's own plan is no slower
    assert seconds(plan, step) == pytest.approx(8192 * 8192 * 2 / 4 / hw["W_nvlink"], rel=1e-6)
    free = symcost.derive("A[B_{YZ}, D] -> A[B_{XZ}, D]", mesh="X=2:nvlink,Y=2:nvlink,Z=2:nvlink",
                          dims="B=8192,D=8192", hw="h100")
    assert sum(seconds(free, s) for s in free.collectives) <= seconds(plan, step) * (1 + 1e-9)


def test_a_neighbour_shift_on_a_ring_is_one_hop_and_a_longer_send_its_hops():
    one = symcost.derive("Send_X(A[B, D]) -> A[B, D]", mesh="X=8:wrap", dims="B=1024,D=1024", hw="tpu-v5p")
    two = symcost.derive("Send_{X,3}(A[B, D]) -> A[B, D]", mesh="X=8:wrap", dims="B=1024,D=1024", hw="tpu-v5p")
    t_min = one.hardware.bindings("bf16")["T_min"]
    assert one.evaluate(one.collectives[0].cost.latency) == pytest.approx(t_min)
    assert two.evaluate(two.collectives[0].cost.latency) == pytest.approx(3 * t_min)
    # every stage sends at once: a shift of 3 puts 3 blocks on each link
    assert two.evaluate(two.collectives[0].cost.throughput) == \
        pytest.approx(3 * one.evaluate(one.collectives[0].cost.throughput))


def test_a_reduction_over_ici_and_dcn_runs_the_books_way():
    plan = symcost.derive("A[I, J]{U_XS} -> A[I, J]", mesh="X=4,S=2:dcn", dims="I=8192,J=8192", hw="tpu-v5p")
    hw = plan.hardware.bindings("bf16")
    V = 8192 * 8192 * 2
    # a ReduceScatter over X inside the slice, a reduction across the 2 slices on 1/|X| of the data (each
    # chip's DCN link carries (S-1)/S of it each way; the book's 2 (V/4) / W_dcn is its large-S limit), an
    # AllGather over X. The engine may write the middle as a ReduceScatter over S and gather X and S
    # together: the same passes, the same time.
    assert kinds(plan)[0] == ("ReduceScatter", ("X",))
    # 4 v5p chips are a 2x2 slice: X spans both its dimensions, lines of 2; each pass (rotated halves,
    # links.gather_load) loads a link with 3 of the 8 half-blocks: 3 V / (4 W_ici)
    assert plan.mesh.axis("X").edges == (2, 2)
    inside = 2 * (3 * V / 4 / hw["W_ici"])
    across = 2 * (V / 4) * (1 / 2) / hw["W_dcn"]
    assert sum(seconds(plan, s) for s in plan.collectives) == pytest.approx(across + inside, rel=1e-6)


def test_a_written_mixed_all_reduce_is_priced_pass_by_pass():
    written = symcost.derive("AllReduce_{XS}(A[I, J]{U_XS}) -> A[I, J]", mesh="X=4,S=2:dcn",
                             dims="I=8192,J=8192", hw="tpu-v5p")
    expanded = symcost.derive("A[I, J]{U_XS} -> A[I, J]", mesh="X=4,S=2:dcn", dims="I=8192,J=8192",
                              hw="tpu-v5p")
    assert kinds(written) == [("AllReduce", ("X", "S"))]
    assert seconds(written, written.collectives[0]) == pytest.approx(
        sum(seconds(expanded, s) for s in expanded.collectives), rel=1e-6)


def test_host_transfers_go_over_pcie_at_the_preset_figure():
    plan = symcost.derive("ToHost(O[D_X, F]) -> O[D_X, F]", mesh="X=4", dims="D=8192,F=8192", hw="tpu-v5p")
    (step,) = plan.collectives
    hw = plan.hardware.bindings("bf16")
    assert seconds(plan, step) == pytest.approx(8192 * 8192 * 2 / 4 / hw["W_pcie"], rel=1e-9)
    assert step.cost.axes == ("pcie",)


@pytest.mark.parametrize("text, message", [
    ("ToDevice(O[D_X, F]) -> O[D_X, F]\nToDevice(O[D_X, F]) -> O[D_X, F]", "HBM already"),
    ("ToHost(O[D_X, F]) -> H[D_X, F]\nC[D_X] = H[D_X, F] *_F W[F]", "host memory"),
    ("Send_{X,Y}(A[B, D]) -> A[B, D]", "one mesh axis"),
])
def test_misused_moves_are_clear_errors(text, message):
    with pytest.raises(SymcostError, match=message):
        symcost.derive(text, mesh="X=4,Y=2", dims="D=8,F=8,B=8")


def test_the_new_moves_from_the_command_line(capsys):
    from symcost.cli import main
    assert main(["derive", "A[I_{XY}, J] -> A[I, J_{XY}]", "--mesh", "X=4,Y=4", "--dims", "I=8192,J=8192",
                 "--hw", "tpu-v5p"]) in (0, None)
    out = capsys.readouterr().out
    assert "AllToAll_XY" in out
    assert main(["derive", "ToHost(O[D_X, F]) -> O[D_X, F]", "--mesh", "X=4", "--dims", "D=8192,F=8192",
                 "--hw", "tpu-v5p"]) in (0, None)
    assert "PCIe" in capsys.readouterr().out


def test_json_of_the_new_moves_matches_its_schema(capsys):
    import json
    from pathlib import Path

    import jsonschema

    from symcost.cli import main
    program = ("AllToAll_{XY}(A[I_{XY}, J]) -> B[I, J_{XY}]\nPermute_{XY}(B[I, J_{XY}]) -> C[I, J_{YX}]\n"
               "Send_{X,2}(C[I, J_{YX}]) -> D[I, J_{YX}]\nToHost(D[I, J_{YX}]) -> E[I, J_{YX}]\n"
               "ToDevice(E[I, J_{YX}]) -> F[I, J_{YX}]")
    assert main(["derive", program, "--mesh", "X=4,Y=2", "--dims", "I=64,J=64", "--hw", "tpu-v5p",
                 "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    schema = json.loads((Path(symcost.__file__).parent / "schemas" / "derive.json").read_text())
    jsonschema.validate(out, schema)
    assert [s["kind"] for s in out["steps"]] == ["AllToAll", "Permute", "Send", "ToHost", "ToDevice"]


def test_an_all_to_all_over_ici_and_dcn_adds_one_pass_per_link_kind():
    both = symcost.derive("AllToAll_{XS}(A[I_{XS}, J]) -> A[I, J_{XS}]", mesh="X=4:nowrap,S=2:dcn",
                          dims="I=8192,J=8192", hw="tpu-v5p")
    (step,) = both.collectives
    hw = both.hardware.bindings("bf16")
    block = 8192 * 8192 * 2 / 8
    # inside the slice: a line of 4 (as written), whose middle link carries 4 of the 16 blocks each way, V |X| /
    # (2 N W_ici) with V = block * 4; across slices each device sends (N-1)/N of its block through its DCN
    # link: V (N-1) / (N^2 W_dcn) with V = block * 2
    ici = block * 4 * 4 / (2 * 4 * hw["W_ici"])
    dcn = block * 2 * 1 / (4 * hw["W_dcn"])
    assert both.evaluate(step.cost.throughput) == pytest.approx(ici + dcn, rel=1e-6)
