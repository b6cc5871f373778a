"""Layouts: validity with reasons, local shapes, bytes per device and across devices."""
import pytest

import symcost
from symcost.errors import ShardingError
from symcost.layout import Layout, bytes_per_device, bytes_total, check_layout, local_shape
from symcost.mesh import parse_mesh


def test_local_shape_and_bytes_symbolic():
    mesh = parse_mesh("X,Y")
    a = Layout.of("A", "IJ", [("X", "Y"), ()])
    I, J, X, Y = (symcost.symbols.dim("I"), symcost.symbols.dim("J"), symcost.symbols.axis("X"),
                  symcost.symbols.axis("Y"))
    assert local_shape(a, mesh) == (I / (X * Y), J)
    assert bytes_per_device(a, mesh) == 2 * I * J / (X * Y)


@pytest.mark.parametrize("text, words, column", [
    ("A[I_X, J_X]", "mesh axis 'X' shards two dimensions of A (I and J)", 8),
    ("A[I_XX, J]", "mesh axis 'X' appears twice in dimension I of A", 3),
    ("A[I_X, J]{U_X}", "mesh axis 'X' both shards dimension I of A and is unreduced", 10),
    ("A[I_Q, J]", "unknown mesh axis 'Q' in dimension I of A", 3),
    ("A[I, J]{U_Q}", "unknown mesh axis 'Q' in the unreduced axes of A", 8),
])
def test_invalid_layouts_say_which_axis_and_tensor(text, words, column):
    with pytest.raises(ShardingError) as e:
        symcost.check(text, mesh="X=4,Y=2")
    assert words in str(e.value)
    assert e.value.column == column
    from symcost.cli import exit_code
    assert exit_code(e.value) == 1


def test_indivisible_size_when_bound_is_padded_and_refused_under_strict():
    """A dimension that does not divide is planned padded, as GSPMD pads (each device holds the size
    rounded up); check --strict refuses it."""
    with pytest.raises(ShardingError) as e:
        symcost.check("A[I_X, J]", mesh="X=3", dims="I=128,J=2", strict=True)
    assert "dimension I=128 of A does not divide by X=3 devices" in str(e.value)
    (pad,) = symcost.check("A[I_X, J]", mesh="X=3", dims="I=128,J=2").padding
    assert (pad.tensor, pad.dim, pad.per_device, pad.padded) == ("A", "I", 43, 129)
    assert pad.waste == pytest.approx(1 / 129)
    assert symcost.check("A[I_X, J]", mesh="X=4", dims="I=128,J=2", strict=True).padding == ()
    from symcost.layout import bytes_per_device
    assert bytes_per_device(Layout.of("A", "IJ", [("X",), ()]), parse_mesh("X=3"), {"I": 128, "J": 2}) == 2 * 43 * 2


def test_padded_blocks_cost_the_padded_work():
    plan = symcost.derive("A[I_X, J] * B[J, K] -> C[I_X, K]", mesh="X=3", dims="I=10,J=4,K=4")
    assert plan.evaluate(plan.flops) == 2 * 4 * 4 * 4          # ceil(10 / 3) = 4 rows a device
    assert [p.tensor for p in plan.padding] == ["A", "C"]


def test_the_books_fsdp_bound_on_a_full_v5p_pod():
    """Part 6: FSDP over a whole v5p pod (8960 chips over three torus axes) is compute-bound above
    C / (3 W_ici) = 850 tokens per chip, the book says. D = 8192 does not divide by 8960 devices: each holds
    one row of each weight, 768 of them a padded one, and each AllGather moves all 8960 rows. So the
    derivation says 850 x 8960 / 8192 = 929.7 tokens per chip; the book's 850 leaves the padding out."""
    plan = symcost.derive("In[B_X, D] *_D Win[D_X, F] *_F Wout[F, D_X] -> Out[B_X, D]", mesh="X=8960:3",
                          dims="D=8192,F=28672", hw="tpu-v5p")
    (c,) = [c for c in plan.solve("B") if c["condition"] == "t_math = t_comms"]
    assert c["per_device"]["value"] == pytest.approx(850 * 8960 / 8192, rel=1e-3)
    assert {(p.tensor, p.dim, p.padded) for p in plan.padding} == {("Win", "D", 8960), ("Wout", "D", 8960)}
    assert plan.mesh.axis("X").ring                            # a whole pod keeps its wraparound


def test_literal_dims_cannot_be_sharded():
    with pytest.raises(symcost.NotationError, match="unexpected '_X'"):
        symcost.check("KV[2_X, B]", mesh="X=2")


def test_symbolic_mesh_from_the_notation():
    plan = symcost.check("A[I_X, J_Y]")
    assert plan.mesh.names == ("X", "Y")
    assert all(a.size is None for a in plan.mesh.axes)


def test_bytes_total_counts_replicas():
    mesh = parse_mesh("X=4,Y=8,Z=2")
    a = Layout.of("A", "IJK", [("X",), (), ()], dtype="bf16")
    sizes = {"I": 64, "J": 32, "K": 16}
    # replicated over Y and Z: total is Y*Z = 16 times one copy (book Part 3, Question 1)
    assert bytes_total(a, mesh, sizes) / (2 * 64 * 32 * 16) == 16


def test_check_layout_direct():
    mesh = parse_mesh("X=2")
    check_layout(Layout.of("A", "IJ", [("X",), ()]), mesh)
    with pytest.raises(ShardingError):
        check_layout(Layout.of("A", "IJ", [("X",), ("X",)]), mesh)
