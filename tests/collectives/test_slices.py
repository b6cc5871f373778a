"""Meshes as TPU slices are: v4p / v5p ICI axes lie on the slice their chips make (book Part 2: 64 v5p chips
are a 4x4x4 cube with wraparound), each a product of whole slice dimensions; a mesh that cannot lie so says
why; derive's JSON and text name every axis's link model."""
import json

import pytest

import symcost
from symcost.cli import main
from symcost.hardware import hardware
from symcost.mesh import parse_mesh
from symcost.topology import place

V5P = hardware("tpu-v5p")


@pytest.mark.parametrize("mesh,edges,wrap", [
    ("X=64", {"X": (4, 4, 4)}, True),                            # the book's cube, one axis over all three
    ("X=16,Y=4", {"X": (4, 4), "Y": (4,)}, True),                # not a 16-long line
    ("X=4,Y=4,Z=4", {"X": (4,), "Y": (4,), "Z": (4,)}, True),
    ("X=8", {"X": (2, 2, 2)}, False),                            # 8 chips: a 2x2x2 slice, no wraparound
    ("X=4", {"X": (2, 2)}, False),                               # 4 chips: 2x2x1
    ("X=32,Y=4", {"X": (4, 8), "Y": (4,)}, True),                # 128 chips: 4x4x8
    ("X=16,Y=16,Z=16", {"X": (16,), "Y": (16,), "Z": (16,)}, True),
])
def test_v5p_axes_lie_on_the_slice_their_chips_make(mesh, edges, wrap):
    placed = place(parse_mesh(mesh), V5P).mesh
    for name, e in edges.items():
        a = placed.axis(name)
        assert sorted(a.edges) == sorted(e) and a.links == len(e) and a.wraparound is wrap


def test_a_mesh_that_is_not_a_slice_says_why():
    p = place(parse_mesh("X=8,Y=8"), V5P)
    assert "64 chips are a 4x4x4 slice" in p.notes[0] and "splits one" in p.notes[0]
    assert all(not a.edges for a in p.mesh.axes)


def test_written_link_models_are_kept():
    p = place(parse_mesh("X=16:nowrap,Y=4:nowrap"), V5P)
    assert [(a.links, a.wraparound) for a in p.mesh.axes] == [(1, False), (1, False)]


def test_the_cube_prices_an_all_to_all_on_its_three_rings():
    """64 chips as one axis: AllToAll on a 4x4x4 torus with wraparound, V max(4, 4, 4) / (4 * 64 W_ici)."""
    plan = symcost.derive("A[I_X, J] -> A[I, J_X]", mesh="X=64", dims="I=8192,J=8192", hw="tpu-v5p")
    (step,) = plan.collectives
    V = 8192 * 8192 * 2
    assert float(plan.evaluate(step.cost.throughput)) == pytest.approx(V * 4 / (4 * 64 * V5P.ici_bandwidth))


def test_derive_json_and_text_name_the_link_models(capsys):
    assert main(["derive", "A[I_X, J] -> A[I, J_X]", "--mesh", "X=16,Y=4", "--hw", "tpu-v5p",
                 "--dims", "I=8192,J=8192", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mesh"] == {"X": 16, "Y": 4}
    assert out["links"] == {"X": {"kind": "ici", "wrap": True, "links": 2},
                            "Y": {"kind": "ici", "wrap": True, "links": 1}}
    assert main(["derive", "A[I_X, J] -> A[I, J_X]", "--mesh", "X=2,Y=8", "--hw", "h100"]) == 0
    text = capsys.readouterr().out
    assert "mesh: X=2:nvlink,Y=8:dcn" in text or "mesh: X=2:dcn,Y=8:nvlink" in text
    assert main(["derive", "A[I_X, J] -> A[I, J_X]", "--mesh", "S=2:dcn,X=16,Y=4", "--hw", "tpu-v5p"]) == 0
    assert "mesh: S=2:dcn,X=16:2:ici:wrap,Y=4:ici:wrap" in capsys.readouterr().out
