"""Hardware presets: every figure has a source, the book's derived constants follow, wraparound rules."""
import re
from pathlib import Path

import pytest

import symcost
from symcost.errors import UsageError
from symcost.hardware import NUMERIC, hardware, presets

PRESETS = presets()


def test_every_preset_the_design_names_exists():
    assert set(PRESETS) == {"tpu-v3", "tpu-v4p", "tpu-v5p", "tpu-v5e", "tpu-v6e", "a100", "h100", "h200", "b200"}


@pytest.mark.parametrize("name", PRESETS)
def test_every_number_has_a_source(name):
    hw = hardware(name)
    for field in NUMERIC + ("flops",):
        assert hw.source(field), f"{name}.{field} has no source"
    assert hw.C == dict(hw.flops)["bf16"]
    assert set(hw.bindings()) >= {"C", "W_hbm", "W_ici", "W_dcn", "W_nvlink", "T_min"}


@pytest.mark.parametrize("name", presets())
def test_a_preset_shows_each_source_once_cited_by_number(name):
    """``symcost hardware NAME``: every figure cites a numbered source, each source written once at the end
    (the H100's datasheet backs four figures: it was written out four times)."""
    hw = hardware(name)
    text = hw.show()
    body, _, notes = text.partition("\n  sources:\n")
    listed = dict(re.match(r"  \[(\d+)\] (.*)", line).groups() for line in notes.splitlines())
    assert sorted(map(int, listed)) == list(range(1, len(listed) + 1))
    assert {int(n) for n in re.findall(r"\[(\d+)\]$", body, re.M)} == set(map(int, listed))
    assert len(set(listed.values())) == len(listed)                    # each source once
    hidden = {"ici_bandwidth"} if hw.family == "gpu" else set()       # a GPU shows NVLink one way alone
    assert set(listed.values()) == {v for k, v in hw.sources if v and k not in hidden}


def test_book_constants_follow_from_the_presets():
    v5p, v5e, h100 = hardware("tpu-v5p"), hardware("tpu-v5e"), hardware("h100")
    assert v5p.C / v5p.ici_bandwidth == pytest.approx(2550, rel=1e-3)            # Part 5: alpha_ici
    # Part 7 rounds v5e's HBM to 8.2e11 to get 240; the table's 8.1e11 gives 243
    assert v5e.C / v5e.hbm_bandwidth == pytest.approx(240, rel=0.02)
    assert h100.C / h100.hbm_bandwidth == pytest.approx(295, rel=0.01)           # the book: "about 280"
    # Part 5 uses C = 4.46e14 for C / W_dcn = 71,360; the table's 4.59e14 gives 73,440
    assert v5p.C / v5p.dcn_bandwidth == pytest.approx(71_360, rel=0.03)
    assert v5e.ici_one_way * v5e.t_min == pytest.approx(45_000)                   # Part 3: 45 kB
    assert symcost.hardware("tpu-v5p").C == 4.59e14


@pytest.mark.parametrize("name, shape, links, expected", [
    ("tpu-v4p", (4, 4, 4), None, (True, True, True)),
    ("tpu-v4p", (2, 2, 4), None, (False, False, False)),
    ("tpu-v5p", (16, 16, 16), None, (True, True, True)),
    ("tpu-v5p", (8, 8), None, (False, False)),
    ("tpu-v5p", (16, 64), (1, 2), (True, True)),       # 16 x (8x8): a multiple of the 4x4x4 cube
    ("tpu-v5e", (8,), None, (False,)),
    ("tpu-v5e", (16,), None, (True,)),
    ("tpu-v5e", (16, 16), None, (True, True)),
    ("tpu-v5e", (4, 8), None, (False, False)),
    ("tpu-v5e", (256,), (2,), (True,)),                # one axis spanning the whole 16x16 pod
    ("tpu-v3", (32, 8), None, (True, False)),
    ("h100", (8,), None, (False,)),
])
def test_wraparound_rules(name, shape, links, expected):
    assert hardware(name).wraparound(shape, links) == expected


@pytest.mark.parametrize("alias, name", [("v5p", "tpu-v5p"), ("TPUv5p", "tpu-v5p"), ("tpu_v5e", "tpu-v5e"),
                                         ("H100-SXM", "h100"), ("TPU-V4P", "tpu-v4p")])
def test_aliases(alias, name):
    assert hardware(alias).name == name


def test_unknown_name_suggests_a_close_one():
    with pytest.raises(UsageError) as e:
        hardware("tpu-v5x")
    assert "unknown hardware 'tpu-v5x'; did you mean tpu-v5p?" in str(e.value)
    assert "tpu-v6e" in str(e.value)
    with pytest.raises(UsageError) as e:            # no close name: the list reads on from the name
        hardware("nope")
    assert str(e.value).startswith("unknown hardware 'nope'; known presets: a100, ")


def test_flops_by_dtype():
    v5e = hardware("tpu-v5e")
    assert v5e.flops_for("int8") == 2 * v5e.flops_for("bf16")
    assert v5e.flops_for("fp16") == v5e.C
    with pytest.raises(UsageError, match="no fp32"):
        v5e.flops_for("fp32")


def test_a_mesh_on_hardware_settles_wraparound():
    plan = symcost.derive("A[I_X, J] -> A[I, J]", mesh="X=4", dims="I=8192,J=2048", hw="tpu-v5e")
    assert plan.mesh.axis("X").wraparound is False
    gpu = symcost.derive("A[I_X, J] -> A[I, J]", mesh="X=8", hw="h100")
    assert gpu.mesh.axis("X").kind == "nvlink"


def _bare_h100() -> str:
    """The h100 preset without its [efficiency] tables and their source: a preset to add them to."""
    text = (Path(symcost.__file__).parent / "hardware" / "h100.toml").read_text()
    text = re.sub(r"(?ms)^# Achieved fractions.*?(?=^\[sources\])", "", text)
    return re.sub(r"(?m)^efficiency = .*\n?", "", text)


def test_a_users_preset_file_loads_with_its_efficiency(tmp_path):
    import tomllib
    base = _bare_h100()
    data = tomllib.loads(base)
    f = tmp_path / "my-h100.toml"
    f.write_text(base.replace('name = "h100"', 'name = "my-h100"').replace("[flops]", 'vector_flops = 6.7e13\n\n[flops]')
                 + '\n[efficiency]\nhbm = 0.9\n[efficiency.matmul.bf16]\nflops = [1e9, 1e12]\neta = [0.4, 0.8]\n'
                 '[efficiency.collectives.nvlink]\neta = 0.8\nlatency = 1e-5\n'
                 '[efficiency.collectives.nvlink.AllReduce]\neta = 0.7\nlatency = 2e-5\nresidual = 0.02\n'
                 .replace("[efficiency]", "[efficiency]") )
    text = f.read_text().replace("[sources]", '[sources]\nvector_flops = "measured"\nefficiency = "measured by a test"')
    f.write_text(text)
    hw = symcost.hardware(str(f))
    assert hw.name == "my-h100" and hw.C == data["flops"]["bf16"] and hw.vector_flops == 6.7e13
    assert hw.efficiency.hbm == 0.9 and hw.efficiency.math(3.16e10) == pytest.approx(0.6, abs=0.01)
    assert hw.efficiency.net("nvlink") == (0.8, 1e-5) and hw.efficiency.net("nvlink", "AllReduce") == (0.7, 2e-5)
    plan = symcost.derive("A[I, J_X] * B[J_X, K] -> C[I, K]", mesh="X=8", dims="I=8,J=8,K=8", hw=str(f))
    assert plan.hardware.name == "my-h100"


def test_a_preset_lacking_fields_names_them_all_and_a_misspelt_one_what_it_may_mean(tmp_path):
    """A new preset file was checked a field a try ("lacks the field 'description'", then 'hbm_bandwidth',
    ...); every missing field is named at once, and an unknown one with the field it may mean."""
    f = tmp_path / "mine.toml"
    f.write_text('name = "mine"\nfamily = "gpu"\nhbm_bytes = 8e10\n')
    with pytest.raises(UsageError, match=r"mine.toml lacks the fields 'description', 'hbm_bandwidth', "
                                         r"'ici_bandwidth', .*'flops', 'sources' \(the shipped presets"):
        symcost.hardware(str(f))
    f.write_text(_bare_h100().replace("t_min", "tmin"))
    with pytest.raises(UsageError, match=r"unknown field 'tmin' \(did you mean 't_min'\?\)"):
        symcost.hardware(str(f))


@pytest.mark.parametrize("edit, words", [
    (lambda t: t.replace("hbm_bandwidth = 3.35e12", "hbm_bandwidth = -1"), "field 'hbm_bandwidth' must be a positive number"),
    (lambda t: t.replace('topology = "switched"', 'topology = "ring"'), "field 'topology' must be one of"),
    (lambda t: t + "\n[efficiency]\nhbm = 3\n", "field 'efficiency.hbm' must be a fraction"),
    (lambda t: t + "\n[efficiency]\nhbm = 0.9\n", "gives no source for 'efficiency'"),
    (lambda t: t.replace('name = "h100"', 'name = "h100"\nwarp = 3'), "unknown field 'warp'"),
    (lambda t: t.replace("pod = [8]", "pod = [0]"), "field 'pod' must be a list of positive integers"),
    (lambda t: t + "\n[efficiency]\n[efficiency.matmul.bf16]\nflops = [1e9]\neta = [0.5, 0.6]\n",
     "field 'efficiency.matmul.bf16' needs lists"),
    (lambda t: t + "\n[efficiency.waves]\nunits = 0\ntiles = [[256, 128]]\n", "field 'efficiency.waves'.units must be"),
    (lambda t: t + "\n[efficiency.waves]\nunits = 132\ntiles = [256, 128]\n", "field 'efficiency.waves'.tiles must be"),
])
def test_a_bad_preset_file_names_the_field(tmp_path, edit, words):
    base = _bare_h100()
    f = tmp_path / "bad.toml"
    f.write_text(edit(base))
    with pytest.raises(UsageError, match=words):
        symcost.hardware(str(f))


def test_matmul_waves_are_data_in_the_a100_preset():
    """Tile and wave quantization (NVIDIA's Matrix Multiplication Background guide): 108 SMs, 256x128 tiles.
    The preset's best-shape rate is measured at a shape whose tiles fill whole waves."""
    eff = symcost.hardware("a100").efficiency
    assert eff.waves == (108, ((256, 128), (128, 256)))
    assert eff.wave_fraction(6912, 16384) == 1.0                    # 27 x 128 tiles = 32 full waves
    assert eff.wave_fraction(2048, 4608) == pytest.approx(288 / 324)   # 8 x 36 tiles in 3 waves of 108
    assert eff.wave_fraction(2048, 160, 16) == pytest.approx(2048 * 160 * 16 / (3 * 108 * 256 * 128))
    assert eff.matmul_shape(2048, 4608, 12288) == pytest.approx(0.859 * 8 / 9)
    assert symcost.hardware("h100").efficiency.wave_fraction(100, 100) == 1.0   # no [efficiency.waves]
    assert any("waves: 108 units" in line for line in eff.describe({}))


def test_an_einsum_priced_with_efficiency_pays_its_waves():
    """derive --efficiency: a device's [2048, 12288] x [12288, 4608] matmul fills 3 waves of 8 x 36 tiles
    of the 108 SMs, so it runs at 0.859 x 8/9 of the peak. (The local einsum alone, moves="none": weighing
    its choices at the preset's figures, the planner prefers splitting D, whose [16384, 1536] x [1536, 4608]
    blocks fill their waves better, with the two collectives beside it under the book's overlap.)"""
    plan = symcost.derive("In[B_X, D] *_D W[D, F] -> Out[B_X, F]", mesh="X=8:nvlink",
                          dims="B=16384,D=12288,F=4608", hw="a100", efficiency=True, moves="none")
    flops = 2 * 2048 * 12288 * 4608
    assert plan.numeric()["t_math"] == pytest.approx(flops / (312e12 * 0.859 * 8 / 9))
